"""dcgm-exporter as upstream ships it: the corpus of its releases' interfaces (upstream/README.md)."""
