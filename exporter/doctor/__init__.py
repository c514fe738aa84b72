"""``gpu-pod-exporter doctor``: the node says what works, what does not, and how to fix it.

A subcommand, not part of the exporter: it reads the same flags, environment and config file,
then checks every part the running exporter depends on (NVML and each GPU, the kubelet's
PodResources socket, the Kubernetes API and its RBAC, process attribution, the HTTP listener and,
when asked, the Prometheus that scrapes the node) with the exporter's own clients, and prints one
row per check with a verdict and a one-line fix. Nothing here is imported by the exporter itself.
"""
