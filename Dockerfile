# syntax=docker/dockerfile:1.7
#
# rgd images, two targets from one file:
#   docker build -t rgd:0.1.0 .                            the daemon (default, last stage)
#   docker build --target report -t rgd-report:0.1.0 .    the Spark fairness report
#
# linux/amd64 only: the pulsar-lite wheel (rgd's embedded one-machine broker, a
# hard dependency) ships an x86-64 binary only.
#
# Both images run as uid/gid 10001 with a read-only root filesystem: the daemon
# writes only under /var/lib/rgd (mount a volume there) and /tmp.
#
# Base image: the official Python 3.11.14 slim image on Debian 12 (bookworm),
# pinned by tag and by the digest of its multi-architecture index. To move to
# a newer patch release, change both, taking the digest from
#   docker buildx imagetools inspect python:3.11.<patch>-slim-bookworm
ARG PYTHON_IMAGE=python:3.11.14-slim-bookworm@sha256:65a93d69fa75478d554f4ad27c85c1e69fa184956261b4301ebaf6dbb0a3543d

# ---- builder: the rgd wheel (build tooling stays in this stage) ------------------------
FROM ${PYTHON_IMAGE} AS builder
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
COPY pyproject.toml README.md ./
# rgd only: sim/ and bench/ are development tools, not part of either image
COPY rgd ./rgd
COPY scripts/install-runtime.sh /dist/install-runtime.sh
RUN sh /dist/install-runtime.sh wheel /src /dist

# ---- runtime: what both final images share ----------------------------------------------
FROM ${PYTHON_IMAGE} AS runtime
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    HOME=/tmp \
    PATH=/opt/rgd/bin:$PATH
RUN groupadd --system --gid 10001 rgd \
    && useradd --system --uid 10001 --gid 10001 --home-dir /nonexistent --no-create-home \
        --shell /usr/sbin/nologin rgd \
    && mkdir -p /var/lib/rgd \
    && chown 10001:10001 /var/lib/rgd

# ---- report: rgd report over archived usage logs (Java 17 + PySpark) -------------------
FROM runtime AS report
# openjdk's post-install script needs the man directory the slim image leaves out.
RUN mkdir -p /usr/share/man/man1 \
    && apt-get update \
    && apt-get install -y --no-install-recommends 'openjdk-17-jre-headless=17.0.*' \
    && rm -rf /var/lib/apt/lists/*
RUN --mount=type=bind,from=builder,source=/dist,target=/dist \
    sh /dist/install-runtime.sh install /opt/rgd /dist spark
USER 10001:10001
# Spark writes its scratch space, the Ivy cache and spark-warehouse/ under the
# working directory and $HOME, numba its compiled-function cache under
# NUMBA_CACHE_DIR: all in /tmp (mount an emptyDir there).
ENV NUMBA_CACHE_DIR=/tmp/numba-cache
WORKDIR /tmp
ENTRYPOINT ["rgd", "report"]
CMD ["--help"]

# ---- daemon (default target) ------------------------------------------------------------
FROM runtime AS daemon
RUN --mount=type=bind,from=builder,source=/dist,target=/dist \
    sh /dist/install-runtime.sh install /opt/rgd /dist
# A pod IP must be reachable, so listen on every interface. Admin writes from
# beyond loopback are still refused until admin tokens are configured
# (RGD_ADMIN_TOKEN or RGD_ADMIN_TOKENS_FILE). The health check asks the first TCP
# address of RGD_LISTEN (the Kubernetes manifests add a unix socket after it).
ENV RGD_LISTEN=0.0.0.0:8080 \
    RGD_DATA_DIR=/var/lib/rgd/data \
    RGD_LOG_DIR=/var/lib/rgd/log
USER 10001:10001
WORKDIR /var/lib/rgd
EXPOSE 8080
HEALTHCHECK --interval=15s --timeout=5s --start-period=30s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request; from rgd.config.settings import parse_listen; port = next(a.port for a in parse_listen(os.environ.get('RGD_LISTEN', '0.0.0.0:8080')) if not a.is_unix); urllib.request.urlopen('http://127.0.0.1:' + str(port) + '/healthz', timeout=3).close()"]
ENTRYPOINT ["rgd"]
CMD ["run"]
