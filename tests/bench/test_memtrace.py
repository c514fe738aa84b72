"""bench.memtrace: resident memory by mapping, allocation sites, and the section it writes."""

import os

from bench import memtrace

MIB = 2**20


def test_mappings_name_this_process_heap_and_libraries_with_their_resident_size():
    resident = dict((name, kib) for kib, name in memtrace.mappings(os.getpid()))
    assert resident["[anonymous]"] > 0 or resident.get("[heap]", 0) > 0
    assert any(name.startswith("libc") for name in resident)  # a shared library, by its file name only
    assert all(not name.startswith("/") for name in resident)
    sizes = [kib for kib, _ in memtrace.mappings(os.getpid())]
    assert sizes == sorted(sizes, reverse=True)


def test_sites_are_shown_relative_to_the_repository_site_packages_or_stdlib():
    assert memtrace._short("/work/x/.venv/lib/python3.11/site-packages/grpc/_channel.py") == "grpc/_channel.py"
    assert memtrace._short("/work/wt/exporter/nvml/peaks.py") == "exporter/nvml/peaks.py"
    assert memtrace._short("/usr/lib/python3.11/asyncio/events.py") == "stdlib/asyncio/events.py"
    assert memtrace._short("<frozen importlib._bootstrap>") == "<frozen importlib._bootstrap>"


def test_the_report_puts_the_plain_run_beside_the_traced_one():
    run = {"gpus": 64, "pods": 110, "rss_idle_bytes": 70 * MIB, "peak_rss_bytes": 75 * MIB, "threads": 17,
           "loaded_by_mapping_kib": [(34 * 1024, "[anonymous]"), (10 * 1024, "cygrpc.so")]}
    traced = {**run, "rss_idle_bytes": 130 * MIB, "peak_rss_bytes": 160 * MIB,
              "traced_high_before_load_bytes": 22 * MIB, "traced_high_bytes": 23 * MIB,
              "traced_sites_at_high": [{"where": "<frozen importlib._bootstrap_external>:729",
                                        "bytes": 8 * MIB, "blocks": 76734}]}
    text = memtrace.report_text({"started": "2026-12-03T19:30:00Z", "commit": "abc1234", "plain": run,
                                 "traced": traced})
    assert "| RSS peak (VmHWM), MiB | 75.0 | 160.0 |" in text
    assert "| traced Python heap, highest before the load, MiB | n/a | 22.0 |" in text
    assert "| `[anonymous]` | 34.0 |" in text
    assert "| `<frozen importlib._bootstrap_external>:729` | 8.00 | 76,734 |" in text

