"""`rgd whatif` end to end, as a user runs it: logs written by the simulator's usage logs (rgd's
own log writer), the command in a subprocess, its files, its exit codes and messages, the
documented example (docs/operating/whatif.md) to the character, and logs on S3 (moto's server)."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.doc_examples import Command, FileBlock, read_page

BIN = Path(sys.executable).parent
ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "operating" / "whatif.md"


def rgd(*args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(BIN / "rgd"), *args], capture_output=True, text=True, timeout=300, cwd=cwd,
                          env={**os.environ, **(env or {})})


def page_steps() -> tuple[FileBlock, list[list[str]], Command]:
    """The page's scenario file, its commands (split as the shell splits them) and the
    `rgd whatif` command with the output shown under it (tests/support/doc_examples reads the
    page as tests/deploy/test_doc_examples.py does)."""
    steps = read_page(DOC).steps
    [scenario] = [s for s in steps if isinstance(s, FileBlock)]
    commands = [s for s in steps if isinstance(s, Command)]
    [whatif] = [c for c in commands if c.text.startswith(".venv/bin/rgd whatif ")]
    return scenario, [shlex.split(c.text) for c in commands], whatif


@pytest.fixture(scope="module")
def logs(tmp_path_factory) -> Path:
    """The documented scenario's logs, written by the simulator (python -m sim --log-dir)."""
    work = tmp_path_factory.mktemp("whatif-cli")
    scenario, _, _ = page_steps()
    assert scenario.name == "tenants.yaml"
    (work / "tenants.yaml").write_text(scenario.content)
    subprocess.run([sys.executable, "-m", "sim", "tenants.yaml", "--strategy", "rgd", "--log-dir", "logs"],
                   cwd=work, check=True, capture_output=True, timeout=300)
    return work


def test_the_documented_example_prints_what_the_docs_show(logs: Path) -> None:
    _, commands, whatif = page_steps()
    assert [c[:3] for c in commands] == [[".venv/bin/python", "-m", "sim"],
                                         [".venv/bin/rgd", "whatif", "logs/tenants/rgd"]]
    assert commands[0][3:] == ["tenants.yaml", "--strategy", "rgd", "--log-dir", "logs", ">", "sim.md"]
    proc = rgd(*commands[1][1:], cwd=logs)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""  # no warning: the replay reproduces the logs within 2 %
    assert proc.stdout == whatif.expected + "\n"


def test_it_writes_a_page_and_figures_that_agree_with_the_table(logs: Path) -> None:
    proc = rgd("whatif", "logs/tenants/rgd", "--out", "out", "--set", "tenant-a.publishRateInMsgs=500",
               "--set", "tenant-b.publishRateInMsgs=-1", cwd=logs)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads((logs / "out" / "whatif.json").read_text())
    assert doc["changes"] == ["tenant-a.publishRateInMsgs=500", "tenant-b.publishRateInMsgs=unlimited"]
    # 31 s: a simulated daemon ticks as it starts, and its first report covers the second before
    assert doc["daemons"] == ["a", "b", "c"] and doc["seconds"] == 31
    a, b = doc["groups"]["tenant-a/publish"], doc["groups"]["tenant-b/publish"]
    for g in (a, b):
        assert abs(g["replay_error"]) < 0.02
    # demand is above 500 msg/s from 2 s on: about 500 a second for 28 s
    assert a["proposed"]["admitted_messages"] == pytest.approx(500 * 28, rel=0.03)
    # unlimited: everything offered is admitted
    assert b["proposed"]["throttled_messages"] == 0
    assert b["proposed"]["admitted_messages"] == pytest.approx(
        b["now"]["admitted_messages"] + b["now"]["throttled_messages"], rel=1e-6)
    page = (logs / "out" / "whatif.html").read_text()
    for text in ("tenant-a.publishRateInMsgs=500", "tenant-b.publishRateInMsgs=unlimited", "500 msg/s",
                 "1k msg/s", "unchanged since its last report"):
        assert text in page, text
    assert page.count("<svg") == 4  # per group: admitted per second, fairness per second


@pytest.mark.parametrize(("args", "message"), [
    (["--set", "tenant-c.publishRateInMsgs=5"], "unknown group 'tenant-c': the logs have no traffic of it "
                                                "(groups in the logs: tenant-a, tenant-b)"),
    (["--set", "tenant-a.publishRate=5"], "unknown field 'publishRate' (expected one of publishRateInMsgs,"),
    (["--set", "tenant-a.publishRateInMsgs=half"], "value 'half' is not a number (-1 = unlimited)"),
    (["--set", "tenant-a=5"], "expected GROUP.FIELD=VALUE"),
    (["--strategy", "fastest"], "invalid choice: 'fastest'"),
])
def test_bad_input_is_named_and_exits_2(logs: Path, args: list[str], message: str) -> None:
    proc = rgd("whatif", "logs/tenants/rgd", "--out", "bad", *args, cwd=logs)
    assert proc.returncode == 2
    assert message in proc.stderr
    assert not (logs / "bad").exists()


def test_no_logs_is_named_and_exits_2(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "notes.txt").write_text("not a segment")
    for path, message in ((tmp_path / "missing", "missing: no such file or directory"),
                          (tmp_path / "empty", "empty: no usage log segments there")):
        proc = rgd("whatif", str(path), "--out", str(tmp_path / "out"), cwd=tmp_path)
        assert proc.returncode == 2
        assert message in proc.stderr
    proc = rgd("whatif", "--out", "x", cwd=tmp_path)
    assert (proc.returncode, proc.stderr.strip()) == (2, "rgd whatif: LOGS and --out are required")


def test_without_the_simulator_it_says_what_is_missing(logs: Path, tmp_path: Path) -> None:
    """As in the Docker image, which installs rgd without sim/: `sim` cannot be imported."""
    (tmp_path / "sitecustomize.py").write_text(
        "import sys\n"
        "class NoSim:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name == 'sim' or name.startswith('sim.'):\n"
        "            raise ModuleNotFoundError(\"No module named 'sim'\", name='sim')\n"
        "        return None\n"
        "sys.meta_path.insert(0, NoSim())\n")
    proc = rgd("whatif", "logs/tenants/rgd", "--out", "nosim", cwd=logs,
               env={"PYTHONPATH": str(tmp_path)})
    assert proc.returncode == 2
    assert "rgd whatif needs the simulator, the `sim` package (No module named 'sim')" in proc.stderr
    assert "not in the Docker image" in proc.stderr
    assert not (logs / "nosim").exists()


def test_logs_on_s3(logs: Path) -> None:
    import s3fs
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        endpoint = f"http://{host}:{port}"
        fs = s3fs.S3FileSystem(endpoint_url=endpoint, key="testing", secret="testing", skip_instance_cache=True)
        fs.mkdir("rgd-archive")
        for seg in (logs / "logs" / "tenants" / "rgd").glob("*.seg"):
            fs.put(str(seg), f"rgd-archive/tenants/{seg.name}")
        env = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
               "AWS_DEFAULT_REGION": "us-east-1", "FSSPEC_S3_ENDPOINT_URL": endpoint}
        local = rgd("whatif", "logs/tenants/rgd", "--out", "local", cwd=logs)
        remote = rgd("whatif", "s3://rgd-archive/tenants", "--out", "remote", cwd=logs, env=env)
        assert remote.returncode == 0, remote.stderr
        assert remote.stdout.replace("remote/", "local/") == local.stdout
    finally:
        server.stop()


def _accounting_totals(log_dir: Path) -> tuple[dict[str, int], int]:
    """The oracle, read by hand from the segment bytes (docs: rgd/usage_log/frame.py's layout):
    per ACCOUNTING frame its incarnation's running totals, in the metadata; the last of each
    incarnation is what it admitted and throttled. Also how many PUBLISHED frames carry counts
    that are already in those totals."""
    import struct

    from rgd.wire.log_entry_pb2 import LogEntryMetadata
    from rgd.wire.usage_report_pb2 import UsageReport

    last: dict[tuple[str, int], LogEntryMetadata] = {}
    published = 0
    for path in sorted([*log_dir.rglob("*.seg"), *log_dir.rglob("*.open")]):
        data, at = path.read_bytes(), 0
        while at + 8 <= len(data):
            magic, meta_len = struct.unpack_from(">4sI", data, at)
            assert magic == b"\xabRGL", (path, at)
            meta = LogEntryMetadata.FromString(data[at + 8:at + 8 + meta_len])
            (payload_len,) = struct.unpack_from(">I", data, at + 8 + meta_len)
            payload = data[at + 12 + meta_len:at + 12 + meta_len + payload_len]
            at += 16 + meta_len + payload_len
            if meta.kind == LogEntryMetadata.ACCOUNTING:
                key = (meta.daemon_id, UsageReport.FromString(payload).incarnation)
                if key not in last or meta.cumulative_admitted_messages >= last[key].cumulative_admitted_messages:
                    last[key] = meta
            elif meta.kind == LogEntryMetadata.PUBLISHED:
                assert meta.accounted  # a log with accounting frames marks its reports
                published += any(g.HasField("publish") and g.publish.admitted_messages
                                 for g in UsageReport.FromString(payload).groups)
    fields = ("admitted_messages", "admitted_bytes", "throttled_messages", "throttled_bytes")
    return {f: sum(getattr(m, f"cumulative_{f}") for m in last.values()) for f in fields}, published


def test_a_log_with_accounting_frames_replays_exactly_their_totals(logs: Path) -> None:
    """The simulator's logs carry ACCOUNTING frames (rgd's own log writer): the replay's input is
    their counts, each once; the published reports beside them (which repeat some of them) add
    nothing, and nothing is filled in for suppressed groups."""
    from rgd.whatif.logged import read_ticks
    from rgd.whatif.offered import ADMITTED_BYTES, ADMITTED_MESSAGES, THROTTLED_BYTES, THROTTLED_MESSAGES, rebuild

    log_dir = logs / "logs" / "tenants" / "rgd"
    expected, published_with_counts = _accounting_totals(log_dir)
    assert expected["admitted_messages"] > 0 and expected["throttled_messages"] > 0
    assert published_with_counts > 0  # counted twice, the totals would be off
    ticks, stats = read_ticks(str(log_dir))
    assert stats.accounting_frames == stats.reports > 0
    load = rebuild(ticks)
    assert load.suppressed_entries == 0
    rows = {"admitted_messages": ADMITTED_MESSAGES, "admitted_bytes": ADMITTED_BYTES,
            "throttled_messages": THROTTLED_MESSAGES, "throttled_bytes": THROTTLED_BYTES}
    for name, row in rows.items():
        assert int(sum(r[row] for r in load.reported.values())) == expected[name], name  # integers, exactly
        spread = sum(load.total(g, k, row) for g in load.groups for k in load.kinds(g))
        assert spread == pytest.approx(expected[name], rel=1e-12, abs=1e-6), name  # spread over seconds
    # ... and what `rgd whatif` writes says so.
    proc = rgd("whatif", "logs/tenants/rgd", "--out", "exact", cwd=logs)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads((logs / "exact" / "whatif.json").read_text())
    assert doc["accounting_frames"] == stats.accounting_frames and doc["suppressed_entries_filled"] == 0
    logged = [g["logged"] for g in doc["groups"].values()]
    assert sum(g["admitted_messages"] for g in logged) == pytest.approx(expected["admitted_messages"], abs=1e-6)
