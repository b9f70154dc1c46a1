"""Build and run the Java client (clients/java) with the JDK alone: `javac`, then `java -cp`.

Why no Maven or Gradle: the library has no dependencies, and the machines that build rgd
cannot reach Maven Central; javac over the source trees is the whole build. The tests
(tests/integration/test_java_client.py) and the benchmark (bench/bench_java_client.py)
build through here, so both compile the same way.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

__all__ = ["JAVA_DIR", "SOURCE_SETS", "JavaMissing", "compile_java_client", "java_command", "sources"]

JAVA_DIR = Path(__file__).resolve().parents[2] / "clients" / "java"
# main: the library; test: its unit tests and the conformance runner; bench: the load generator
SOURCE_SETS = ("main", "test", "bench")
JAVA_RELEASE = "17"


class JavaMissing(RuntimeError):
    """No JDK on PATH."""


def _tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        raise JavaMissing(f"{name} is not on PATH: install a JDK 17+ (scripts/system-deps.sh installs "
                          "openjdk-17-jdk-headless)")
    return path


def sources(source_sets: tuple[str, ...] = SOURCE_SETS, extra: tuple[Path, ...] = ()) -> list[Path]:
    found = [p for s in source_sets for p in sorted((JAVA_DIR / "src" / s / "java").rglob("*.java"))]
    return found + list(extra)


def compile_java_client(out: Path, source_sets: tuple[str, ...] = SOURCE_SETS, extra: tuple[Path, ...] = (),
                        timeout: float = 300.0) -> Path:
    """Compile the source sets (and `extra` files) into `out` for Java 17, every lint warning an
    error; returns `out`. Raises RuntimeError with javac's report when it fails."""
    out.mkdir(parents=True, exist_ok=True)
    cmd = [_tool("javac"), "--release", JAVA_RELEASE, "-encoding", "UTF-8", "-Xlint:all", "-Werror",
           "-d", str(out), *map(str, sources(source_sets, extra))]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        raise RuntimeError(f"javac failed ({proc.returncode}):\n{proc.stdout}{proc.stderr}")
    return out


def java_command(classes: Path, main: str, *args: str, heap_mb: int = 256) -> list[str]:
    """The command line that runs `main` from the compiled `classes` (bounded heap)."""
    return [_tool("java"), f"-Xmx{heap_mb}m", "-cp", str(classes), main, *args]
