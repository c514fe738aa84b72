# syntax=docker/dockerfile:1.7
#
# gpu-pod-exporter image: a pure-Python exporter, so the final stage holds the base's interpreter, one
# virtual environment (/opt/gpu-pod-exporter) with the exporter and its hash-pinned dependencies, the
# upstream dcgm-exporter counter files under /etc/dcgm-exporter/ and the image's SBOM - nothing else
# (no compiler, no build tools, no pip). NVML (libnvidia-ml.so.1) is NOT in the image: the NVIDIA
# container runtime (or CDI) injects the host driver's copy at start, selected by NVIDIA_VISIBLE_DEVICES
# and NVIDIA_DRIVER_CAPABILITIES.
#
#   docker build -t gpu-pod-exporter:0.1.0 --build-arg REVISION=$(git rev-parse HEAD) .
#   docker run --rm --gpus all -p 9400:9400 gpu-pod-exporter:0.1.0
#   scripts/build-image            # the same build without Docker (buildah), see docs/install.md
#
# PYTHON_IMAGE may be any Debian-based image with Python 3.11 and its venv module (python3 -m venv
# must work): the official python:3.11-slim-bookworm (default), or debian:bookworm with python3-venv
# (and python3-pip or not). Nothing here relies on the official image's layout (pip on PATH, /usr/local),
# and nothing asks pip to change the files of a Debian-managed Python (PEP 668).

ARG PYTHON_IMAGE=python:3.11-slim-bookworm

# --- builder: the virtual environment that the runtime stage copies ----------------------------------
FROM ${PYTHON_IMAGE} AS builder
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_ROOT_USER_ACTION=ignore \
    PYTHONDONTWRITEBYTECODE=1
WORKDIR /src
# Dependencies first, so a code change does not reinstall them. Both files are hash-pinned
# (`scripts/build-image lock` regenerates them); --require-hashes makes pip refuse anything unpinned
# or altered, and --only-binary keeps compilers out (every pinned package publishes wheels).
COPY requirements/image.txt requirements/image-build.txt ./requirements/
RUN python3 -m venv /opt/build \
 && /opt/build/bin/python -m pip install --require-hashes --only-binary=:all: -r requirements/image-build.txt \
 && python3 -m venv --without-pip /opt/gpu-pod-exporter \
 && /opt/build/bin/python -m pip --python /opt/gpu-pod-exporter/bin/python install \
        --require-hashes --only-binary=:all: -r requirements/image.txt
# README.m[d]: copied when present (pyproject's readme) without failing when it is not.
COPY pyproject.toml README.m[d] ./
COPY etc ./etc
COPY exporter ./exporter
# The simulator (`--simulate`, `doctor --simulate`): its own package in the same wheel.
COPY simulator ./simulator
# The exporter itself: its wheel, built with the pinned backend, installed offline (--no-index) on
# top of the locked dependencies; `pip check` fails the build if the lock does not satisfy it. The
# upstream counter files are copied with symlinks resolved (they may point into the package data).
# The SBOM lists every package of the runtime environment, reproducibly (no timestamp, no random id).
RUN /opt/build/bin/python -m pip wheel --no-deps --no-build-isolation --wheel-dir /wheels . \
 && /opt/build/bin/python -m pip --python /opt/gpu-pod-exporter/bin/python install --no-index /wheels/*.whl \
 && /opt/build/bin/python -m pip --python /opt/gpu-pod-exporter/bin/python check \
 && mkdir -p /out/etc/dcgm-exporter /out/sbom \
 && for csv in default-counters.csv dcp-metrics-included.csv; do \
        cp -L "etc/dcgm-exporter/$csv" /out/etc/dcgm-exporter/ || exit 1; \
    done \
 && /opt/build/bin/cyclonedx-py environment --output-reproducible --output-format JSON --pyproject pyproject.toml \
        --output-file /out/sbom/gpu-pod-exporter.cdx.json /opt/gpu-pod-exporter/bin/python

# --- runtime -----------------------------------------------------------------------------------------
FROM ${PYTHON_IMAGE}
ARG VERSION=0.1.0
ARG REVISION=unknown
ARG PYTHON_IMAGE
LABEL org.opencontainers.image.title="gpu-pod-exporter" \
      org.opencontainers.image.description="Prometheus exporter for NVIDIA GPUs: NVML readings with DCGM-compatible names, attributed to Kubernetes pods, namespaces, containers and teams." \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.source="https://github.com/gpu-pod-exporter/gpu-pod-exporter" \
      org.opencontainers.image.url="https://github.com/gpu-pod-exporter/gpu-pod-exporter" \
      org.opencontainers.image.documentation="https://github.com/gpu-pod-exporter/gpu-pod-exporter/blob/main/docs/install.md" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.vendor="gpu-pod-exporter developers" \
      org.opencontainers.image.base.name="${PYTHON_IMAGE}"

ENV PATH=/opt/gpu-pod-exporter/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    NVIDIA_VISIBLE_DEVICES=all \
    NVIDIA_DRIVER_CAPABILITIES=utility

# The base's own installers go, each removed by the tool that installed it, then the unprivileged user
# the image runs as. Three kinds of base:
# * Debian's own python3 (debian:bookworm + python3-venv, with or without python3-pip) is "externally
#   managed" (PEP 668: an EXTERNALLY-MANAGED file beside its standard library): its pip, setuptools and
#   wheel are Debian packages, which pip refuses to uninstall. Forcing it (--break-system-packages)
#   would delete files dpkg still lists as installed; apt-get purges the packages instead, keeping
#   dpkg's records true (no download: a purge reads only the local package database);
# * the official python image's interpreter (/usr/local) is not externally managed: its pip, setuptools
#   and wheel were installed by pip, and pip uninstalls them;
# * a base without pip has nothing to remove.
# Whatever the base, the image then has no working `python3 -m pip`, checked here so a new kind of
# base fails the build instead of shipping an installer.
RUN if python3 -c 'import sys, sysconfig, pathlib; \
sys.exit(not (pathlib.Path(sysconfig.get_path("stdlib")) / "EXTERNALLY-MANAGED").exists())'; then \
        installers="$(dpkg-query --show --showformat='${db:Status-Abbrev}${Package}\n' \
            python3-pip python3-setuptools python3-wheel 2>/dev/null | sed -n 's/^ii *//p')"; \
        if [ -n "$installers" ]; then \
            DEBIAN_FRONTEND=noninteractive apt-get purge --yes --quiet $installers >/dev/null || exit 1; \
        fi; \
    elif python3 -m pip --version >/dev/null 2>&1; then \
        python3 -m pip uninstall --yes --root-user-action=ignore pip setuptools wheel || exit 1; \
    fi \
 && if python3 -m pip --version >/dev/null 2>&1; then echo "the base's pip is still there" >&2; exit 1; fi \
 && groupadd --system --gid 10001 gpu-pod-exporter \
 && useradd --system --uid 10001 --gid 10001 --no-create-home --home-dir /nonexistent \
        --shell /usr/sbin/nologin gpu-pod-exporter
COPY --from=builder /opt/gpu-pod-exporter /opt/gpu-pod-exporter
COPY --from=builder /out/etc/dcgm-exporter/ /etc/dcgm-exporter/
COPY --from=builder /out/sbom/ /usr/share/doc/gpu-pod-exporter/

# Numeric, so Kubernetes can verify runAsNonRoot without reading /etc/passwd. The Helm chart runs
# the container as UID 0 (capabilities dropped) only when pod attribution needs the kubelet's
# root-only pod-resources socket.
USER 10001:10001
EXPOSE 9400
# No HEALTHCHECK: Kubernetes ignores it and its probes use /health and / directly.
ENTRYPOINT ["gpu-pod-exporter"]
