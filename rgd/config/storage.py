"""Where usage logs and reports live: a local path or an fsspec URI (s3://, gs://, hdfs://, ...).

The daemon's `--archive-uri` and `rgd report` both go through fsspec, so one
URI names the same place for the writer and the reader. fsspec only knows
how to reach object stores when their filesystem package is installed
(s3fs, gcsfs), which rgd leaves to optional extras (`rgd[s3]`, `rgd[gcs]`)
so a daemon that archives to a directory pulls in no cloud SDK. Without it
fsspec fails deep inside the first copy; `filesystem` and `check_uri` fail
at once instead, naming the package and the extra.

Settings for a store come the fsspec way: its usual credential chain
(AWS_*, GOOGLE_APPLICATION_CREDENTIALS, ...) and `FSSPEC_<SCHEME>_<OPTION>`
environment variables, e.g. FSSPEC_S3_ENDPOINT_URL for an S3-compatible
server. fsspec is imported lazily: `rgd.fairness.ship` imports this module on
executors that may lack it.
"""

from __future__ import annotations

from typing import Any

# URI scheme -> (pip distribution, rgd extra that installs it)
STORE_PACKAGES: dict[str, tuple[str, str]] = {
    "s3": ("s3fs", "s3"), "s3a": ("s3fs", "s3"), "gs": ("gcsfs", "gcs"), "gcs": ("gcsfs", "gcs"),
}


class StorageSetupError(RuntimeError):
    """A URI whose filesystem cannot be used here (package missing or scheme unknown)."""


def scheme(uri: str) -> str:
    """The URI's scheme in lower case; "" for a local path (file:// counts as local)."""
    if "://" not in uri:
        return ""
    s = uri.split("://", 1)[0].lower()
    return "" if s in ("file", "local") else s


def _explain(uri: str, exc: Exception) -> StorageSetupError:
    s = scheme(uri)
    if s in STORE_PACKAGES:
        dist, extra = STORE_PACKAGES[s]
        return StorageSetupError(f"{uri}: {s}:// needs the {dist} package: pip install 'rgd[{extra}]' ({exc})")
    return StorageSetupError(f"{uri}: no usable fsspec filesystem for {s}:// ({exc})")


def check_uri(uri: str) -> None:
    """Raise StorageSetupError unless fsspec can open `uri`'s scheme here (no I/O)."""
    s = scheme(uri)
    if not s:
        return
    import fsspec

    try:
        fsspec.get_filesystem_class(s)
    except (ImportError, ValueError) as exc:
        raise _explain(uri, exc) from exc


def filesystem(uri: str, **storage_options: Any) -> tuple[Any, str]:
    """(fsspec filesystem, path inside it) for a local path or URI; StorageSetupError when it cannot be."""
    import fsspec

    check_uri(uri)
    try:
        fs_and_path: tuple[Any, str] = fsspec.core.url_to_fs(uri, **storage_options)  # fsspec is untyped
        return fs_and_path
    except ImportError as exc:
        raise _explain(uri, exc) from exc


__all__ = ["STORE_PACKAGES", "StorageSetupError", "check_uri", "filesystem", "scheme"]
