"""The generated stubs in the tree match the .proto (regenerated afresh)."""

from __future__ import annotations

import filecmp
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]
IN_TREE = HERE / "src" / "leasehold" / "_proto"


def test_generated_code_is_not_stale(tmp_path):
    out = tmp_path / "_proto"
    subprocess.run(
        ["bash", str(HERE / "generate.sh"), str(out)],
        check=True,
        env={**os.environ, "PYTHON": sys.executable},
        capture_output=True,
    )
    generated = sorted(p.name for p in out.iterdir())
    in_tree = sorted(p.name for p in IN_TREE.iterdir() if p.name != "__pycache__")
    assert generated == in_tree
    stale = [n for n in generated if not filecmp.cmp(out / n, IN_TREE / n, shallow=False)]
    assert not stale, f"stale generated files {stale}: run clients/python/generate.sh"


def test_generated_code_imports_within_the_package():
    from leasehold._proto import leasehold_pb2, leasehold_pb2_grpc

    assert leasehold_pb2_grpc.leasehold_dot_v1_dot_leasehold__pb2 is leasehold_pb2
    assert leasehold_pb2.DESCRIPTOR.package == "leasehold.v1"
