# syntax=docker/dockerfile:1.7
#
# gpu-pod-exporter image: a pure-Python exporter, so the final stage holds the interpreter, the
# exporter's wheel and its dependencies, and nothing else (no compiler, no build tools, no pip).
# NVML (libnvidia-ml.so.1) is NOT in the image: the NVIDIA container runtime (or CDI) injects the
# host driver's copy at start, selected by NVIDIA_VISIBLE_DEVICES / NVIDIA_DRIVER_CAPABILITIES.
#
#   docker build -t gpu-pod-exporter:0.1.0 --build-arg REVISION=$(git rev-parse HEAD) .
#   docker run --rm --gpus all -p 9400:9400 gpu-pod-exporter:0.1.0

ARG PYTHON_IMAGE=python:3.11-slim-bookworm

# --- builder: the exporter's wheel plus wheels of every dependency -------------------------------
FROM ${PYTHON_IMAGE} AS builder
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1
WORKDIR /src
# README.m[d]: copied when present (pyproject's readme) without failing when it is not.
COPY pyproject.toml README.m[d] ./
COPY etc ./etc
COPY exporter ./exporter
# All dependencies publish manylinux wheels, so nothing is compiled; were one to need it, only this
# stage would ever see a compiler.
RUN pip wheel --wheel-dir /wheels .

# --- runtime ----------------------------------------------------------------------------------------
FROM ${PYTHON_IMAGE}
ARG VERSION=0.1.0
ARG REVISION=unknown
LABEL org.opencontainers.image.title="gpu-pod-exporter" \
      org.opencontainers.image.description="Prometheus exporter for NVIDIA GPUs: NVML readings with DCGM-compatible names, attributed to Kubernetes pods, namespaces, containers and teams." \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.source="https://github.com/gpu-pod-exporter/gpu-pod-exporter" \
      org.opencontainers.image.url="https://github.com/gpu-pod-exporter/gpu-pod-exporter" \
      org.opencontainers.image.documentation="https://github.com/gpu-pod-exporter/gpu-pod-exporter/blob/main/docs/install.md" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.vendor="gpu-pod-exporter developers" \
      org.opencontainers.image.base.name="docker.io/library/python:3.11-slim-bookworm"

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    NVIDIA_VISIBLE_DEVICES=all \
    NVIDIA_DRIVER_CAPABILITIES=utility

# Install from the builder's wheels only (--no-index: nothing is fetched in this stage), then drop
# the installers. The wheels come in through a bind mount, so they never land in a layer.
RUN --mount=type=bind,from=builder,source=/wheels,target=/wheels \
    pip install --no-cache-dir --no-index --find-links=/wheels gpu-pod-exporter \
 && pip uninstall --yes pip setuptools wheel \
 && groupadd --system --gid 10001 gpu-pod-exporter \
 && useradd --system --uid 10001 --gid 10001 --no-create-home --home-dir /nonexistent \
        --shell /usr/sbin/nologin gpu-pod-exporter

# Numeric, so Kubernetes can verify runAsNonRoot without reading /etc/passwd. The Helm chart runs
# the container as UID 0 (capabilities dropped) only when pod attribution needs the kubelet's
# root-only pod-resources socket.
USER 10001:10001
EXPOSE 9400
# No HEALTHCHECK: Kubernetes ignores it and its probes use /health and / directly.
ENTRYPOINT ["gpu-pod-exporter"]
