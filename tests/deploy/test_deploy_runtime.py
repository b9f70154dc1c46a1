"""SLOW (a minute or two; downloads rgd's dependencies from PyPI into a fresh venv,
through pip's cache): the daemon image's recipe, replayed without Docker.

There is no Docker engine on CI, so this test does what `docker build` would for
the daemon target, from the Dockerfile itself:
  - the build context as .dockerignore filters it,
  - the builder stage's COPY lines and its RUN (scripts/install-runtime.sh wheel),
  - the daemon stage's RUN (scripts/install-runtime.sh install) into a fresh venv,
  - the daemon stage's ENV, WORKDIR, ENTRYPOINT + CMD and HEALTHCHECK,
with every absolute container path mapped under a temporary "image root". Then
the daemon runs (with the ConfigMap's config file; the embedded pulsar-lite broker
stands in for Pulsar on loopback): /healthz and /readyz answer 200, the HEALTHCHECK
command passes, SIGTERM makes it exit 0 within the DaemonSet's grace period, and
nothing was written outside the state volume and /tmp.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import yaml

from rgd.transport.embedded_broker import free_port
from tests.deploy.test_deploy_dockerfile import (
    DOCKERIGNORE,
    ROOT,
    Dockerfile,
    build_context,
    dockerfile,
    dockerignore_rules,
    exec_form,
    run_command,
)

pytestmark = pytest.mark.timeout(900)



class ImageRoot:
    """Absolute paths inside the image, mapped under a host directory."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def path(self, container_path: str) -> Path:
        assert container_path.startswith("/"), container_path
        return self.root / container_path.lstrip("/")

    def arg(self, token: str) -> str:
        return str(self.path(token)) if token.startswith("/") else token

    def env(self, image_env: dict[str, str]) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k in ("LANG", "LC_ALL", "TZ", "PIP_INDEX_URL", "HOME")}
        env["PATH"] = os.environ["PATH"]  # the base image's PATH, before the Dockerfile's ENV
        # pip's cache as the host user has it, whatever HOME the image sets.
        env["PIP_CACHE_DIR"] = os.environ.get("PIP_CACHE_DIR") or str(
            Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "pip")
        for key, value in image_env.items():
            if key == "PATH":
                parts = [os.environ["PATH"] if p in ("$PATH", "${PATH}") else self.arg(p) for p in value.split(":")]
                env[key] = ":".join(parts)
            else:
                env[key] = self.arg(value)
        # The interpreter that plays the base image's python3 (same minor version).
        env["PYTHON"] = sys.executable
        return env


def _copy_instruction(args: str, context: Path, workdir: str, image: ImageRoot) -> None:
    *sources, dest = args.split()
    dest_abs = dest if dest.startswith("/") else f"{workdir.rstrip('/')}/{dest}"
    target = image.path(dest_abs)
    for src in sources:
        s = context / src
        if s.is_dir():
            shutil.copytree(s, target, dirs_exist_ok=True)
        elif dest.endswith("/") or len(sources) > 1:
            target.mkdir(parents=True, exist_ok=True)
            shutil.copy2(s, target / s.name)
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(s, target)


def _run_stage(df: Dockerfile, name: str, image: ImageRoot, context: Path, pip_cache_ok: bool = True) -> None:
    """Replay a stage's WORKDIR, COPY and RUN instructions (shell-form RUNs, mapped paths)."""
    env = image.env(df.env(name))
    if pip_cache_ok:
        env.pop("PIP_NO_CACHE_DIR", None)  # the image keeps no cache; the test reuses pip's
    workdir = "/"
    for ins in df.stage(name).instructions:
        if ins.cmd == "WORKDIR":
            workdir = ins.args
            image.path(workdir).mkdir(parents=True, exist_ok=True)
        elif ins.cmd == "COPY":
            assert not ins.args.startswith("--"), "COPY flags are not replayed"
            _copy_instruction(ins.args, context, workdir, image)
        elif ins.cmd == "RUN":
            argv = [image.arg(t) for t in run_command(ins)]
            proc = subprocess.run(argv, cwd=image.path(workdir), env=env, capture_output=True, text=True, timeout=800)
            assert proc.returncode == 0, f"RUN {ins.args}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"


@pytest.fixture(scope="module")
def daemon_image(tmp_path_factory: pytest.TempPathFactory) -> tuple[Dockerfile, ImageRoot]:
    df = dockerfile()
    tmp = tmp_path_factory.mktemp("image")
    context = tmp / "context"
    for rel in build_context(dockerignore_rules(DOCKERIGNORE.read_text())):
        (context / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / rel, context / rel)
    builder = ImageRoot(tmp / "builder")
    _run_stage(df, "builder", builder, context)
    image = ImageRoot(tmp / "daemon")
    # The daemon stage's RUN bind-mounts the builder's /dist.
    shutil.copytree(builder.path("/dist"), image.path("/dist"))
    # The runtime stage creates the state dir (and the user, which needs root: not replayed).
    image.path("/var/lib/rgd").mkdir(parents=True)
    image.path("/tmp").mkdir(parents=True)
    _run_stage(df, "daemon", image, context)
    shutil.rmtree(image.path("/dist"))  # a bind mount leaves nothing behind
    return df, image


def _get(url: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=3) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def _snapshot(root: Path, skip: list[Path]) -> dict[str, tuple[int, float]]:
    out = {}
    for p in root.rglob("*"):
        if any(p == s or s in p.parents for s in skip):
            continue
        st = p.lstat()
        out[p.relative_to(root).as_posix()] = (st.st_size, st.st_mtime)
    return out


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _stop_orphaned_broker(state: Path) -> None:
    """After a failed run, stop the embedded broker that this test's daemon started."""
    try:
        pid = int(json.loads(state.read_text())["pid"])
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except (OSError, ValueError, KeyError):
        return
    if b"pulsar-lite" in cmdline and str(state.parent).encode() in cmdline:  # ours, not a reused pid
        os.kill(pid, signal.SIGKILL)


def test_daemon_image_recipe_installs_starts_and_stops(daemon_image: tuple[Dockerfile, ImageRoot]) -> None:
    df, image = daemon_image
    venv = image.path("/opt/rgd")
    assert (venv / "bin" / "rgd").is_file()
    assert not (venv / "bin" / "pip").exists(), "pip must not ship in the runtime venv"
    assert not list(venv.rglob("pyspark")) and not list(venv.rglob("pytest")), "no Spark or dev tools in the daemon"

    # The shipped config file, mounted where the DaemonSet mounts it.
    ds = yaml.safe_load((ROOT / "k8s" / "base" / "daemonset.yaml").read_text())
    pod = ds["spec"]["template"]["spec"]
    container = next(c for c in pod["containers"] if c["name"] == "rgd")
    config_path = next(e["value"] for e in container["env"] if e["name"] == "RGD_CONFIG")
    image.path(config_path).parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(ROOT / "k8s" / "base" / "config" / "rgd.yaml", image.path(config_path))

    image_env = df.env("daemon")
    env = image.env(image_env)
    port = free_port()
    env["RGD_LISTEN"] = f"127.0.0.1:{port}"  # the image's 0.0.0.0, narrowed to loopback for a test
    env["RGD_ID"] = "node-test"
    env["RGD_CONFIG"] = str(image.path(config_path))
    workdir = [i.args for i in df.stage("daemon").all("WORKDIR")][-1]
    argv = exec_form(df.stage("daemon").all("ENTRYPOINT")[-1]) + exec_form(df.stage("daemon").all("CMD")[-1])
    exe = shutil.which(argv[0], path=env["PATH"])
    assert exe == str(venv / "bin" / "rgd"), exe

    writable = [image.path("/var/lib/rgd"), image.path("/tmp")]
    before = _snapshot(image.root, writable)
    healthcheck = exec_form(df.stage("daemon").all("HEALTHCHECK")[0])
    grace = pod["terminationGracePeriodSeconds"]

    log_path = image.root.parent / "rgd-run.log"
    log_file = open(log_path, "w")  # noqa: SIM115 - the daemon's output, closed in the finally below
    proc = subprocess.Popen([exe, *argv[1:]], cwd=image.path(workdir), env=env,
                            stdout=log_file, stderr=subprocess.STDOUT, text=True)
    try:
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        health = ready = None
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                health = _get(base + "/healthz")
                ready = _get(base + "/readyz")
                if health[0] == 200 and ready[0] == 200:
                    break
            except OSError:
                pass
            time.sleep(0.25)
        assert proc.poll() is None, f"rgd exited with {proc.returncode}: {log_path.read_text()[-3000:]}"
        assert health and health[0] == 200, health
        assert ready and ready[0] == 200, ready
        detail = json.loads(ready[1])
        assert detail["ready"] is True and detail["config_file"] == env["RGD_CONFIG"]
        assert "node-test" in detail["members"]
        status, body = _get(base + "/metrics")
        assert status == 200 and b"rgd_broker_connected 1.0" in body
        status, body = _get(base + "/admin/v2/resourcegroups")
        assert status == 200 and set(json.loads(body)) == {"checkout", "standard", "batch", "trial"}

        hc = subprocess.run([shutil.which(healthcheck[0], path=env["PATH"]), *healthcheck[1:]],
                            env=env, capture_output=True, text=True, timeout=10)
        assert hc.returncode == 0, hc.stderr
        assert shutil.which(healthcheck[0], path=env["PATH"]) == str(venv / "bin" / "python")

        broker_state = json.loads((Path(env["RGD_DATA_DIR"]) / "broker.json").read_text())
        proc.send_signal(signal.SIGTERM)
        try:
            code = proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            pytest.fail(f"rgd did not exit within terminationGracePeriodSeconds={grace} after SIGTERM")
        assert code == 0, log_path.read_text()[-3000:]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        log_file.close()
        if proc.returncode != 0:
            _stop_orphaned_broker(Path(env["RGD_DATA_DIR"]) / "broker.json")

    # The embedded broker it started is gone too.
    deadline = time.monotonic() + 10
    while _pid_alive(int(broker_state["pid"])) and time.monotonic() < deadline:
        time.sleep(0.05)
    with pytest.raises(ProcessLookupError):
        os.kill(int(broker_state["pid"]), 0)
    # The health check now fails.
    hc = subprocess.run([shutil.which(healthcheck[0], path=env["PATH"]), *healthcheck[1:]],
                        env=env, capture_output=True, text=True, timeout=10)
    assert hc.returncode != 0
    # Read-only root filesystem: nothing changed outside the state dir and /tmp
    # (no .pyc files written into the venv, nothing in the working directory).
    after = _snapshot(image.root, writable)
    changed = sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))
    assert not changed, f"written outside the state volume and /tmp: {changed[:10]}"
