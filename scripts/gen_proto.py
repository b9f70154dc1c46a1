"""Regenerate rgd/wire/*_pb2.py from proto/.

The generated modules are checked in so that `pip install rgd` needs no protoc;
tests/unit/test_proto_fresh.py regenerates into a temp dir and fails if they differ.
Run: python scripts/gen_proto.py
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROTO_DIR = ROOT / "proto" / "rgd" / "v1"
OUT_DIR = ROOT / "rgd" / "wire"


def generate(out_dir: Path) -> list[Path]:
    """Run protoc (from grpcio-tools, pinned in the dev extra) into out_dir."""
    from grpc_tools import protoc  # dev-only dependency

    protos = sorted(p.name for p in PROTO_DIR.glob("*.proto"))
    out_dir.mkdir(parents=True, exist_ok=True)
    rc = protoc.main(
        ["protoc", f"-I{PROTO_DIR}", f"--python_out={out_dir}", f"--pyi_out={out_dir}", *protos]
    )
    if rc != 0:
        raise SystemExit(f"protoc failed with exit code {rc}")
    return sorted(out_dir.glob("*_pb2.py*"))


if __name__ == "__main__":
    for path in generate(OUT_DIR):
        print(f"wrote {path.relative_to(ROOT)}")
    sys.exit(0)
