#!/usr/bin/env python3
"""Render a kustomization offline: the part of kustomize that rgd's k8s/ uses.

    python scripts/render_k8s.py k8s/                       # what `kubectl apply -k k8s/` applies
    python scripts/render_k8s.py k8s/overlays/example -o out.yaml

For CI machines without kubectl. It implements, the way kustomize v5 does:
  resources           files (multi-document YAML) and directories with their own kustomization
  namespace           set on every namespaced object
  configMapGenerator  `files` (KEY=PATH or PATH) and `literals`, options.labels/annotations,
                      with name hash suffixes disabled (generatorOptions.disableNameSuffixHash)
  images              newName / newTag / digest on containers and initContainers at any depth
  patches             JSON 6902 (add, remove, replace, move, copy, test) from `path` or
                      inline `patch`, selected by target kind / name / group / version
Anything else (another kustomization field, strategic-merge patches, hash suffixes,
RoleBinding subjects, a patch or image entry that matches nothing) is an error, so
the output never silently differs from `kubectl kustomize`; tests/test_deploy_manifests.py
compares the two wherever kubectl is installed.
"""

from __future__ import annotations

import argparse
import copy
import re
import sys
from pathlib import Path
from typing import Any, Iterable

import yaml

KUSTOMIZATION_FILES = ("kustomization.yaml", "kustomization.yml", "Kustomization")
SUPPORTED_FIELDS = {
    "apiVersion", "kind", "namespace", "resources", "configMapGenerator", "generatorOptions", "images", "patches",
}
CLUSTER_SCOPED = {
    "Namespace", "Node", "PersistentVolume", "StorageClass", "ClusterRole", "ClusterRoleBinding",
    "CustomResourceDefinition", "PriorityClass", "IngressClass", "RuntimeClass", "APIService",
    "MutatingWebhookConfiguration", "ValidatingWebhookConfiguration", "ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding", "CSIDriver", "CSINode", "VolumeAttachment",
}
# kustomize's "legacy" output order: these kinds first, in this order; then the rest by kind.
ORDER_FIRST = [
    "Namespace", "ResourceQuota", "StorageClass", "CustomResourceDefinition", "ServiceAccount",
    "PodSecurityPolicy", "Role", "ClusterRole", "RoleBinding", "ClusterRoleBinding", "ConfigMap", "Secret",
    "Endpoints", "Service", "LimitRange", "PriorityClass", "PersistentVolume", "PersistentVolumeClaim",
    "Deployment", "StatefulSet", "CronJob", "PodDisruptionBudget",
]
ORDER_LAST = ["MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"]


class RenderError(Exception):
    """The kustomization uses something this renderer does not implement, or is wrong."""


# -- loading -----------------------------------------------------------------------------


def kustomization_file(root: Path) -> Path:
    for name in KUSTOMIZATION_FILES:
        if (root / name).is_file():
            return root / name
    raise RenderError(f"{root}: no kustomization.yaml")


def _inside(root: Path, rel: str, what: str) -> Path:
    """kustomize's default load restrictor: files a kustomization reads must lie under its root."""
    path = (root / rel).resolve()
    if path != root.resolve() and root.resolve() not in path.parents:
        raise RenderError(f"{root}: {what} {rel!r} is outside the kustomization root")
    if not path.is_file():
        raise RenderError(f"{root}: {what} {rel!r} does not exist")
    return path


def load_objects(path: Path) -> list[dict[str, Any]]:
    objs = []
    for i, doc in enumerate(yaml.safe_load_all(path.read_text())):
        if doc is None:
            continue
        if not isinstance(doc, dict) or not all(k in doc for k in ("apiVersion", "kind", "metadata")):
            raise RenderError(f"{path}: document {i} is not a Kubernetes object")
        if not isinstance(doc["metadata"], dict) or not doc["metadata"].get("name"):
            raise RenderError(f"{path}: document {i} ({doc['kind']}) has no metadata.name")
        objs.append(doc)
    return objs


def object_id(obj: dict[str, Any]) -> tuple[str, str, str, str]:
    meta = obj["metadata"]
    return obj["apiVersion"], obj["kind"], meta.get("namespace", ""), meta["name"]


# -- generators --------------------------------------------------------------------------


def _split_kv(entry: str, what: str) -> tuple[str, str]:
    key, sep, value = entry.partition("=")
    if not sep or not key:
        raise RenderError(f"{what}: {entry!r} is not KEY=VALUE")
    return key, value


def generate_configmaps(root: Path, k: dict[str, Any]) -> list[dict[str, Any]]:
    options = k.get("generatorOptions") or {}
    unknown = set(options) - {"disableNameSuffixHash", "labels", "annotations"}
    if unknown:
        raise RenderError(f"{root}: generatorOptions.{sorted(unknown)[0]} is not supported")
    out = []
    for gen in k.get("configMapGenerator") or []:
        name = gen.get("name")
        unknown = set(gen) - {"name", "files", "literals", "options", "behavior"}
        if unknown or not name:
            raise RenderError(f"{root}: configMapGenerator {name!r}: unsupported fields {sorted(unknown) or ['(no name)']}")
        if gen.get("behavior", "create") != "create":
            raise RenderError(f"{root}: configMapGenerator {name}: behavior {gen['behavior']!r} is not supported")
        own = gen.get("options") or {}
        unknown = set(own) - {"disableNameSuffixHash", "labels", "annotations"}
        if unknown:
            raise RenderError(f"{root}: configMapGenerator {name}: options.{sorted(unknown)[0]} is not supported")
        if not own.get("disableNameSuffixHash", options.get("disableNameSuffixHash", False)):
            raise RenderError(f"{root}: configMapGenerator {name}: name hash suffixes are not implemented "
                              "(set generatorOptions.disableNameSuffixHash: true)")
        data: dict[str, str] = {}
        for entry in gen.get("files") or []:
            key, sep, rel = entry.partition("=")
            if not sep:
                key, rel = Path(entry).name, entry
            try:
                data[key] = _inside(root, rel, "file").read_text(encoding="utf-8")
            except UnicodeDecodeError as exc:
                raise RenderError(f"{root}: {rel}: binary files (binaryData) are not supported") from exc
        for entry in gen.get("literals") or []:
            key, value = _split_kv(entry, f"{root}: configMapGenerator {name} literal")
            data[key] = value
        meta: dict[str, Any] = {"name": name}
        for field in ("labels", "annotations"):
            merged = {**(options.get(field) or {}), **(own.get(field) or {})}
            if merged:
                meta[field] = {str(a): str(b) for a, b in merged.items()}
        out.append({"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": data})
    return out


# -- transformers ------------------------------------------------------------------------


def apply_namespace(objs: list[dict[str, Any]], namespace: str) -> None:
    for obj in objs:
        kind = obj["kind"]
        if kind in ("RoleBinding", "ClusterRoleBinding"):
            raise RenderError(f"{kind} {obj['metadata']['name']}: namespacing binding subjects is not implemented")
        if kind == "Namespace":
            if obj["metadata"]["name"] != namespace:
                raise RenderError(f"Namespace {obj['metadata']['name']} differs from the kustomization's "
                                  f"namespace {namespace}: renaming it is not implemented")
            continue
        if kind not in CLUSTER_SCOPED:
            obj["metadata"]["namespace"] = namespace


def _parse_image(image: str) -> tuple[str, str, str]:
    """'repo/name:tag@sha256:...' -> (name, tag, digest)."""
    name, _, digest = image.partition("@")
    tag = ""
    slash = name.rfind("/")
    colon = name.rfind(":")
    if colon > slash:
        name, tag = name[:colon], name[colon + 1:]
    return name, tag, digest


def _containers(node: Any) -> Iterable[dict[str, Any]]:
    if isinstance(node, dict):
        for key, value in node.items():
            if key in ("containers", "initContainers") and isinstance(value, list):
                yield from (c for c in value if isinstance(c, dict))
            else:
                yield from _containers(value)
    elif isinstance(node, list):
        for item in node:
            yield from _containers(item)


def apply_image(objs: list[dict[str, Any]], entry: dict[str, Any], where: str) -> None:
    unknown = set(entry) - {"name", "newName", "newTag", "digest"}
    if unknown or "name" not in entry:
        raise RenderError(f"{where}: images entry {entry!r}: unsupported fields {sorted(unknown) or ['(no name)']}")
    hits = 0
    for obj in objs:
        for container in _containers(obj):
            image = container.get("image")
            if not isinstance(image, str):
                continue
            name, tag, digest = _parse_image(image)
            if name != entry["name"]:
                continue
            hits += 1
            new = str(entry.get("newName", name))
            if entry.get("digest"):
                container["image"] = f"{new}@{entry['digest']}"
            elif entry.get("newTag") is not None:
                container["image"] = f"{new}:{entry['newTag']}"
            else:
                container["image"] = new + (f":{tag}" if tag else "") + (f"@{digest}" if digest else "")
    if not hits:
        raise RenderError(f"{where}: images entry {entry['name']!r} matches no container")


def _pointer(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise RenderError(f"JSON pointer {path!r} must start with '/'")
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def _parent(doc: Any, path: str) -> tuple[Any, str]:
    parts = _pointer(path)
    if not parts:
        raise RenderError("patching the whole document is not supported")
    node = doc
    for part in parts[:-1]:
        node = _child(node, part, path)
    return node, parts[-1]


def _child(node: Any, part: str, path: str) -> Any:
    if isinstance(node, dict):
        if part not in node:
            raise RenderError(f"{path}: {part!r} does not exist")
        return node[part]
    if isinstance(node, list):
        return node[_index(node, part, path)]
    raise RenderError(f"{path}: {part!r} is below a scalar")


def _index(node: list, part: str, path: str, allow_end: bool = False) -> int:
    if part == "-" and allow_end:
        return len(node)
    if not re.fullmatch(r"0|[1-9][0-9]*", part):
        raise RenderError(f"{path}: {part!r} is not an array index")
    i = int(part)
    if i > len(node) or (i == len(node) and not allow_end):
        raise RenderError(f"{path}: index {i} is out of range")
    return i


def _get(doc: Any, path: str) -> Any:
    node = doc
    for part in _pointer(path):
        node = _child(node, part, path)
    return node


def _remove(doc: Any, path: str) -> Any:
    parent, last = _parent(doc, path)
    if isinstance(parent, dict):
        if last not in parent:
            raise RenderError(f"{path}: nothing to remove")
        return parent.pop(last)
    if isinstance(parent, list):
        return parent.pop(_index(parent, last, path))
    raise RenderError(f"{path}: parent is a scalar")


def _add(doc: Any, path: str, value: Any) -> None:
    parent, last = _parent(doc, path)
    if isinstance(parent, dict):
        parent[last] = value
    elif isinstance(parent, list):
        parent.insert(_index(parent, last, path, allow_end=True), value)
    else:
        raise RenderError(f"{path}: parent is a scalar")


def apply_json6902(obj: dict[str, Any], ops: list[Any], where: str) -> dict[str, Any]:
    doc = copy.deepcopy(obj)
    for n, op in enumerate(ops):
        if not isinstance(op, dict) or "op" not in op or "path" not in op:
            raise RenderError(f"{where}: operation {n} needs 'op' and 'path'")
        kind, path = op["op"], op["path"]
        try:
            if kind == "add":
                _add(doc, path, copy.deepcopy(op["value"]))
            elif kind == "remove":
                _remove(doc, path)
            elif kind == "replace":
                _get(doc, path)  # must exist
                _remove(doc, path)
                _add(doc, path, copy.deepcopy(op["value"]))
            elif kind == "move":
                _add(doc, path, _remove(doc, op["from"]))
            elif kind == "copy":
                _add(doc, path, copy.deepcopy(_get(doc, op["from"])))
            elif kind == "test":
                if _get(doc, path) != op["value"]:
                    raise RenderError(f"{path}: test failed: {_get(doc, path)!r} != {op['value']!r}")
            else:
                raise RenderError(f"unknown op {kind!r}")
        except KeyError as exc:
            raise RenderError(f"{where}: operation {n} ({kind}) lacks {exc}") from None
        except RenderError as exc:
            raise RenderError(f"{where}: operation {n} ({kind}): {exc}") from None
    return doc


def _target_matches(obj: dict[str, Any], target: dict[str, Any]) -> bool:
    group, _, version = obj["apiVersion"].rpartition("/")
    checks = {
        "kind": obj["kind"], "name": obj["metadata"]["name"], "group": group, "version": version,
    }
    return all(target[key] == checks[key] for key in target)


def apply_patches(objs: list[dict[str, Any]], root: Path, patches: list[Any]) -> None:
    for n, entry in enumerate(patches):
        where = f"{root}: patches[{n}]"
        if not isinstance(entry, dict) or set(entry) - {"path", "patch", "target"}:
            raise RenderError(f"{where}: only path/patch + target are supported")
        target = entry.get("target") or {}
        unknown = set(target) - {"kind", "name", "group", "version"}
        if unknown or not target:
            raise RenderError(f"{where}: target selectors {sorted(unknown) or ['(none)']} are not supported")
        for key, value in target.items():
            if not re.fullmatch(r"[A-Za-z0-9.\-]*", str(value)):
                raise RenderError(f"{where}: target.{key} {value!r}: regular expressions are not supported")
        if ("path" in entry) == ("patch" in entry):
            raise RenderError(f"{where}: give exactly one of path or patch")
        text = _inside(root, entry["path"], "patch").read_text() if "path" in entry else entry["patch"]
        ops = yaml.safe_load(text)
        if not isinstance(ops, list):
            raise RenderError(f"{where}: only JSON 6902 patches (a list of operations) are supported, "
                              "not strategic-merge patches")
        hits = [i for i, obj in enumerate(objs) if _target_matches(obj, target)]
        if not hits:
            raise RenderError(f"{where}: target {target} matches no object")
        for i in hits:
            objs[i] = apply_json6902(objs[i], ops, where)


# -- the build ---------------------------------------------------------------------------


def build(root: str | Path) -> list[dict[str, Any]]:
    """The objects `kubectl kustomize root` would print, in kustomize's legacy order."""
    root = Path(root)
    kfile = kustomization_file(root)
    k = yaml.safe_load(kfile.read_text()) or {}
    unknown = set(k) - SUPPORTED_FIELDS
    if unknown:
        raise RenderError(f"{kfile}: field {sorted(unknown)[0]!r} is not implemented by this renderer")
    if k.get("kind", "Kustomization") != "Kustomization" or k.get(
        "apiVersion", "kustomize.config.k8s.io/v1beta1"
    ) != "kustomize.config.k8s.io/v1beta1":
        raise RenderError(f"{kfile}: not a kustomize.config.k8s.io/v1beta1 Kustomization")
    objs: list[dict[str, Any]] = []
    for rel in k.get("resources") or []:
        if "://" in rel or rel.startswith("git@"):
            raise RenderError(f"{kfile}: remote resource {rel!r} is not supported")
        path = root / rel
        if path.is_dir():
            objs.extend(build(path))
        else:
            objs.extend(load_objects(_inside(root, rel, "resource")))
    objs.extend(generate_configmaps(root, k))
    if k.get("namespace"):
        apply_namespace(objs, k["namespace"])
    apply_patches(objs, root, k.get("patches") or [])
    for entry in k.get("images") or []:
        apply_image(objs, entry, str(kfile))
    seen: set[tuple[str, str, str, str]] = set()
    for obj in objs:
        oid = object_id(obj)
        if oid in seen:
            raise RenderError(f"{kfile}: {oid} is defined twice")
        seen.add(oid)
    return sorted(objs, key=_order)


def _order(obj: dict[str, Any]) -> tuple:
    kind = obj["kind"]
    if kind in ORDER_FIRST:
        rank = ORDER_FIRST.index(kind)
    elif kind in ORDER_LAST:
        rank = len(ORDER_FIRST) + 1 + ORDER_LAST.index(kind)
    else:
        rank = len(ORDER_FIRST)
    return rank, kind, obj["apiVersion"], obj["metadata"].get("namespace", ""), obj["metadata"]["name"]


def dump(objs: list[dict[str, Any]]) -> str:
    return yaml.safe_dump_all(objs, sort_keys=True, default_flow_style=False, width=1000)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dir", help="directory with a kustomization.yaml")
    parser.add_argument("-o", "--out", help="write here instead of stdout")
    ns = parser.parse_args(argv)
    try:
        text = dump(build(ns.dir))
    except RenderError as exc:
        print(f"render_k8s: {exc}", file=sys.stderr)
        return 1
    if ns.out:
        Path(ns.out).write_text(text)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
