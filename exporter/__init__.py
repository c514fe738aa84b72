"""gpu-pod-exporter: NVIDIA GPU metrics with DCGM-compatible names, attributed to Kubernetes pods."""

__version__ = "0.1.0"
