"""`gpu-pod-exporter top`: a terminal view of GPUs and the pods on them (never imported by the exporter)."""
