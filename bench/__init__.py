"""Benchmark harness: gpu-pod-exporter against its peers on the same simulated GPUs.

Run ``python -m bench run --quick`` (a few minutes) or ``--full``; results land in a JSON file and
``python -m bench report`` turns them into ``docs/benchmarks.md`` and its plots. The harness is not a
test suite: it measures, it never asserts a timing.
"""
