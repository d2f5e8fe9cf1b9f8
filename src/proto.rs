//! Code generated from `proto/leasehold/v1/leasehold.proto` by `build.rs`.

#![allow(missing_docs, clippy::all)]

tonic::include_proto!("leasehold.v1");

/// The encoded descriptor set of the Leasehold API, served by gRPC reflection
/// so that `grpcurl` works without a copy of the proto.
pub const FILE_DESCRIPTOR_SET: &[u8] = tonic::include_file_descriptor_set!("leasehold_descriptor");
