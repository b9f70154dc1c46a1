#!/usr/bin/env bash
# System packages the test suite needs beyond Python: a JDK 17 (Spark runs on its JRE;
# javac builds the Java client, clients/java), Chromium (renders the HTML report),
# redis-server and wrk (benchmark smoke test), iproute2 (`ip`: the network namespaces of the
# partition test, tests/support/netns.py).
# Installs only what is missing; needs root (CI runs as root).
set -euo pipefail
need=()
# the JDK brings the JRE with it: one package whether java, javac or both are missing
if ! command -v java >/dev/null || ! command -v javac >/dev/null; then need+=(openjdk-17-jdk-headless); fi
command -v chromium >/dev/null || need+=(chromium)
command -v redis-server >/dev/null || need+=(redis-server)
command -v wrk >/dev/null || need+=(wrk)
command -v ip >/dev/null || need+=(iproute2)
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" != 0 ]; then SUDO=sudo; else SUDO=; fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}"
fi
