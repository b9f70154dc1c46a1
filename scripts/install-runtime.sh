#!/bin/sh
# The one recipe that turns the rgd source into a runnable install. The Dockerfile
# runs it, and tests/deploy/test_deploy_runtime.py runs it too, so the image recipe and
# the test cannot drift apart.
#
#   install-runtime.sh wheel   SRC_DIR WHEEL_DIR          build rgd's wheel (no deps)
#   install-runtime.sh install PREFIX WHEEL_DIR [EXTRAS]  fresh venv at PREFIX with that
#                                                         wheel (+ extras, e.g. "spark")
#                                                         and its dependencies; then pip
#                                                         is removed from the venv and
#                                                         `rgd --version` must answer
#
# Pip options come from the environment (PIP_NO_CACHE_DIR=1 in the image; the
# test leaves pip's cache on so a second run downloads nothing).
set -eu

usage() {
    echo "usage: $0 wheel SRC_DIR WHEEL_DIR | install PREFIX WHEEL_DIR [EXTRAS]" >&2
    exit 2
}

python_bin=${PYTHON:-python3}

case "${1:-}" in
wheel)
    [ $# -eq 3 ] || usage
    "$python_bin" -m pip wheel --no-deps --disable-pip-version-check --wheel-dir "$3" "$2"
    ;;
install)
    [ $# -eq 3 ] || [ $# -eq 4 ] || usage
    prefix=$2
    extras=${4:-}
    set -- "$3"/rgd-*.whl
    if [ $# -ne 1 ] || [ ! -f "$1" ]; then
        echo "install-runtime.sh: expected exactly one rgd-*.whl in the wheel directory, found: $*" >&2
        exit 1
    fi
    wheel=$1
    if [ -n "$extras" ]; then
        wheel="$wheel[$extras]"
    fi
    "$python_bin" -m venv "$prefix"
    # pip byte-compiles what it installs, so a read-only root filesystem never needs to.
    "$prefix/bin/python" -m pip install --disable-pip-version-check "$wheel"
    "$prefix/bin/python" -m pip uninstall --disable-pip-version-check --yes pip
    "$prefix/bin/rgd" --version
    ;;
*)
    usage
    ;;
esac
