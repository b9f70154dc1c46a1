"""The checked-in generated protobuf code must match proto/ exactly."""

from pathlib import Path

from tests.support.scripts import load_script

ROOT = Path(__file__).resolve().parents[2]


def test_generated_code_is_fresh(tmp_path):
    gen = load_script("gen_proto")
    fresh = {p.name: p.read_bytes() for p in gen.generate(tmp_path)}
    checked_in = {p.name: p.read_bytes() for p in (ROOT / "rgd" / "wire").glob("*_pb2.py*")}
    assert fresh.keys() == checked_in.keys()
    stale = [name for name in fresh if fresh[name] != checked_in[name]]
    assert not stale, f"stale generated code, run: python scripts/gen_proto.py ({stale})"
