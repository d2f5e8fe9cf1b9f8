"""Stubs generated from proto/leasehold/v1/leasehold.proto by generate.sh.

Do not edit: run clients/python/generate.sh after changing the .proto.
"""
