"""Talking to Prometheus: the one HTTP API client (``client``) and the one way to write a PromQL
string literal (``promql``), shared by ``report``, ``doctor`` and ``top``."""
