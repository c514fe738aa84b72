"""Every reading of the default counters, as the exporter serves it, against nvidia-smi on the same GPU.

The exporter runs as shipped (``python -m exporter``, built-in default CSV, real NVML) and is scraped
twice; nvidia-smi is asked between the two scrapes. A reading passes when nvidia-smi's value lies
within the stated tolerance of the interval the two scrapes span (both tools sample a moving
GPU at slightly different moments and over different windows). A reading nvidia-smi reports as
``N/A``/``[Not Supported]`` must be absent from /metrics: never a sentinel, never a zero.

Rows nvidia-smi has no counterpart for get a sanity check instead, stated in ``SANITY``.
``test_every_default_row_has_an_oracle_or_a_sanity_check`` (no GPU needed) keeps both tables
complete when the default CSV changes. The comparison is written to ``readings.json`` in the
output directory (docs/real-gpu.md records it).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from exporter.metrics.counters import load_counters
from tests.gpu.nvidia_smi import Answer, query_gpu, query_remapped_rows
from tests.support.exporter_process import ExporterProcess, parse_samples
from tests.support.polling import wait_for


@dataclass(frozen=True)
class Oracle:
    """nvidia-smi's field for a DCGM row, in the same unit; allowed difference max(absolute, relative x value)."""

    field: str
    absolute: float
    relative: float = 0.0
    query: str = "gpu"  # "gpu" (--query-gpu, by index) or "remapped-rows" (by PCI bus id)
    why: str = ""

    def tolerance(self, value: float) -> float:
        return max(self.absolute, self.relative * abs(value))

    def doc_row(self, metric: str) -> str:
        """This oracle's row in docs/real-gpu.md (a test keeps the two equal)."""
        flag = "--query-gpu" if self.query == "gpu" else "--query-remapped-rows"
        tolerance = "exact" if not self.absolute and not self.relative else f"±{self.absolute:g}" + (
            f" or ±{self.relative * 100:g} %" if self.relative else "")
        return f"| `{metric}` | `{flag}={self.field}` | {tolerance} | {self.why} |"


ORACLES: dict[str, Oracle] = {
    "DCGM_FI_DEV_SM_CLOCK": Oracle("clocks.sm", 60, 0.05, why="MHz; boost moves between samples"),
    "DCGM_FI_DEV_MEM_CLOCK": Oracle("clocks.mem", 20, 0.02, why="MHz; fixed per P-state"),
    "DCGM_FI_DEV_MEMORY_TEMP": Oracle("temperature.memory", 3, why="degrees C"),
    "DCGM_FI_DEV_GPU_TEMP": Oracle("temperature.gpu", 3, why="degrees C"),
    "DCGM_FI_DEV_POWER_USAGE": Oracle("power.draw", 15, 0.10, why="W; both are averages over different windows"),
    "DCGM_FI_DEV_GPU_UTIL": Oracle("utilization.gpu", 20, why="percent over the driver's sample period"),
    "DCGM_FI_DEV_MEM_COPY_UTIL": Oracle("utilization.memory", 20, why="percent"),
    "DCGM_FI_DEV_ENC_UTIL": Oracle("utilization.encoder", 20, why="percent"),
    "DCGM_FI_DEV_DEC_UTIL": Oracle("utilization.decoder", 20, why="percent"),
    "DCGM_FI_DEV_FB_FREE": Oracle("memory.free", 128, why="MiB; allocations come and go"),
    "DCGM_FI_DEV_FB_USED": Oracle("memory.used", 128, why="MiB; memory info v2: used excludes reserved"),
    "DCGM_FI_DEV_FB_RESERVED": Oracle("memory.reserved", 16, why="MiB; fixed while the driver is loaded"),
    "DCGM_FI_DEV_PCIE_REPLAY_COUNTER": Oracle("pcie.replay_counter", 10, why="count; may tick between samples"),
    "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS": Oracle("remapped_rows.correctable", 0, query="remapped-rows",
                                                              why="rows, as the driver counts them"),
    "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS": Oracle("remapped_rows.uncorrectable", 0, query="remapped-rows",
                                                              why="rows, as the driver counts them"),
    "DCGM_FI_DEV_ROW_REMAP_FAILURE": Oracle("remapped_rows.failure", 0, query="remapped-rows",
                                                              why="0/1, as the driver counts them"),
    # The rows the default adds for the shipped alerts and dashboards.
    "DCGM_FI_DEV_ROW_REMAP_PENDING": Oracle("remapped_rows.pending", 0, query="remapped-rows",
                                            why="0/1, as the driver counts them"),
    "DCGM_FI_DEV_RETIRED_PENDING": Oracle("retired_pages.pending", 0,
                                          why="Yes/No; N/A on Ampere and newer, so absent there"),
    "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL": Oracle("ecc.errors.corrected.volatile.total", 5,
                                            why="count since driver load; may tick between samples"),
    "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": Oracle("ecc.errors.uncorrected.volatile.total", 0, why="count since driver load"),
    "DCGM_FI_DEV_ECC_SBE_AGG_TOTAL": Oracle("ecc.errors.corrected.aggregate.total", 5,
                                            why="count over the GPU's life; may tick between samples"),
    "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL": Oracle("ecc.errors.uncorrected.aggregate.total", 0,
                                            why="count over the GPU's life"),
    "DCGM_FI_DEV_POWER_MGMT_LIMIT": Oracle("power.limit", 1, why="W; the software power limit"),
}
# Identity labels on every series: compared exactly.
MIN_CYCLES = 3
LABEL_ORACLES = {"UUID": "uuid", "pci_bus_id": "pci.bus_id", "modelName": "name",
                 "DCGM_FI_DRIVER_VERSION": "driver_version"}


@dataclass(frozen=True)
class Sanity:
    why: str
    check: Callable[[float, float, dict[str, float]], bool]  # (first scrape, second scrape, other readings)


def _energy_never_decreases(first: float, second: float, other: dict[str, float]) -> bool:
    return second >= first >= 0


def _ratio(first: float, second: float, other: dict[str, float]) -> bool:
    return min(first, second) >= 0 and max(first, second) <= 1


def _pcie_rate(first: float, second: float, other: dict[str, float]) -> bool:
    return min(first, second) >= 0 and max(first, second) < 256e9  # PCIe 6 x16 is below 256 GB/s


def _not_negative(first: float, second: float, other: dict[str, float]) -> bool:
    return min(first, second) >= 0


def _reasons_bitmask(first: float, second: float, other: dict[str, float]) -> bool:
    return all(value >= 0 and value == int(value) and value < 2**64 for value in (first, second))


def _slowdown_threshold(first: float, second: float, other: dict[str, float]) -> bool:
    return first == second and 60 <= first <= 130


SANITY: dict[str, Sanity] = {
    "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": Sanity("mJ since driver load; no nvidia-smi field: never decreases",
                                                   _energy_never_decreases),
    "DCGM_FI_DEV_XID_ERRORS": Sanity("the last Xid (0 when none); nvidia-smi shows Xids only in logs", _not_negative),
    "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL": Sanity("a rate of NVLink counters; nvidia-smi nvlink counts differently",
                                                 _not_negative),
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE": Sanity("GPM ratio 0..1; no nvidia-smi field", _ratio),
    "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": Sanity("GPM ratio 0..1; no nvidia-smi field", _ratio),
    "DCGM_FI_PROF_DRAM_ACTIVE": Sanity("GPM ratio 0..1; no nvidia-smi field", _ratio),
    "DCGM_FI_PROF_PCIE_TX_BYTES": Sanity("bytes/s, below the PCIe limit; no nvidia-smi field", _pcie_rate),
    "DCGM_FI_PROF_PCIE_RX_BYTES": Sanity("bytes/s, below the PCIe limit; no nvidia-smi field", _pcie_rate),
    "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS": Sanity("an integer bitmask; nvidia-smi prints clocks_event_reasons.active "
                                                 "in hex", _reasons_bitmask),
    "DCGM_FI_DEV_POWER_VIOLATION": Sanity("ns throttled since driver load; nvidia-smi counts it in us under "
                                          "another name: never decreases", _energy_never_decreases),
    "DCGM_FI_DEV_THERMAL_VIOLATION": Sanity("ns throttled since driver load; nvidia-smi counts it in us under "
                                            "another name: never decreases", _energy_never_decreases),
    "DCGM_FI_DEV_SYNC_BOOST_VIOLATION": Sanity("ns throttled since driver load; nvidia-smi counts it in us under "
                                               "another name: never decreases", _energy_never_decreases),
    "DCGM_FI_DEV_SLOWDOWN_TEMP": Sanity("degrees C, a fixed threshold (nvidia-smi -q only): 60..130, unchanged",
                                        _slowdown_threshold),
    "DCGM_EXP_XID_ERRORS_TOTAL": Sanity("Xids since the exporter started, from NVML events: never decreases",
                                        _energy_never_decreases),
    "DCGM_EXP_XID_ERRORS_COUNT": Sanity("Xids within the -x window, from NVML events", _not_negative),
    "DCGM_EXP_CLOCK_EVENTS_TOTAL": Sanity("clock-event episodes since the exporter started: never decreases",
                                          _energy_never_decreases),
}


DOCS = Path(__file__).resolve().parents[2] / "docs" / "real-gpu.md"


def test_the_docs_state_every_tolerance() -> None:
    text = DOCS.read_text(encoding="utf-8")
    for metric, oracle in ORACLES.items():
        assert oracle.doc_row(metric) in text, oracle.doc_row(metric)
    for metric, sanity in SANITY.items():
        assert f"| `{metric}` | - | {sanity.why} |" in text, metric


def test_every_default_row_has_an_oracle_or_a_sanity_check() -> None:
    counters = load_counters(None)
    metrics = {row.spec.name for row in counters.metrics}
    labels = {row.spec.name for row in counters.labels}
    assert metrics == set(ORACLES) | set(SANITY), "default CSV changed: state how tests/gpu checks each row"
    assert not set(ORACLES) & set(SANITY)
    assert labels <= set(LABEL_ORACLES)


Scrape = dict[int, dict[str, float]]  # gpu index -> metric -> value
Labels = dict[int, dict[str, str]]


def _scrape(exporter: ExporterProcess) -> tuple[Scrape, Labels]:
    values: Scrape = {}
    labels: Labels = {}
    for name, sample_labels, value in parse_samples(exporter.metrics()):
        if not name.startswith("DCGM_") or "gpu" not in sample_labels or "GPU_I_ID" in sample_labels:
            continue
        index = int(sample_labels["gpu"])
        values.setdefault(index, {})[name] = value
        labels.setdefault(index, {}).update(sample_labels)
    return values, labels


def _answers(oracle: Oracle, bus_ids: dict[int, str]) -> dict[int, Answer] | None:
    if oracle.query == "gpu":
        return query_gpu(oracle.field)
    by_bus = query_remapped_rows(oracle.field)
    if by_bus is None:
        return None
    return {index: by_bus[bus.upper()] for index, bus in bus_ids.items() if bus.upper() in by_bus}


@pytest.mark.gpu
def test_default_readings_match_nvidia_smi(gpu_count: int, output_dir: Path) -> None:
    exporter = ExporterProcess([])
    try:
        exporter.wait_healthy(deadline_s=120)
        # Rates and GPM metrics need a previous sample: wait for a few complete sampling cycles.
        wait_for(lambda: _cycles(exporter) >= MIN_CYCLES or None, 60, f"{MIN_CYCLES} sampling cycles", interval_s=0.2)
        first, labels = _scrape(exporter)
        oracle_answers = {name: _answers(oracle, {i: labels[i]["pci_bus_id"] for i in labels})
                          for name, oracle in ORACLES.items()}
        label_answers = {label: query_gpu(field) for label, field in LABEL_ORACLES.items()}
        second, _ = _scrape(exporter)
    finally:
        exporter.stop()
    assert sorted(first) == list(range(gpu_count)), "the exporter must serve every GPU NVML sees"
    problems: list[str] = []
    record: list[dict[str, object]] = []
    for index in sorted(first):
        for name, oracle in ORACLES.items():
            answers = oracle_answers[name]
            ours = [scrape[index].get(name) for scrape in (first, second)]
            entry: dict[str, object] = {"gpu": index, "metric": name, "nvidia_smi_field": oracle.field,
                                        "exporter": ours}
            record.append(entry)
            if answers is None:
                entry["nvidia_smi"] = "field unknown to this nvidia-smi"
                continue
            answer = answers.get(index)
            entry["nvidia_smi"] = answer.text if answer else None
            if answer is None or not answer.supported:
                if any(value is not None for value in ours):
                    problems.append(f"gpu {index} {name}: nvidia-smi says {answer.text if answer else '-'} "
                                    f"but the exporter serves {ours}")
                continue
            if None in ours:
                problems.append(f"gpu {index} {name}: nvidia-smi reads {answer.text} but the exporter has {ours}")
                continue
            expected = answer.number()
            low, high = min(ours), max(ours)  # type: ignore[type-var]
            tolerance = oracle.tolerance(expected)
            entry["tolerance"] = tolerance
            if not low - tolerance <= expected <= high + tolerance:
                problems.append(f"gpu {index} {name}: exporter {low}..{high}, nvidia-smi {expected} "
                                f"(tolerance {tolerance:g}: {oracle.why})")
        for label, answers in label_answers.items():
            if answers is None or index not in answers:
                continue
            ours_label = labels[index].get(label)
            theirs = answers[index].text
            if label == "pci_bus_id":
                ours_label, theirs = (ours_label or "").upper(), theirs.upper()
            if ours_label != theirs:
                problems.append(f"gpu {index} label {label}: exporter {ours_label!r}, nvidia-smi {theirs!r}")
        for name, sanity in SANITY.items():
            pair = [scrape[index].get(name) for scrape in (first, second)]
            record.append({"gpu": index, "metric": name, "exporter": pair, "sanity": sanity.why})
            if None in pair:
                continue  # not served on this GPU: the doctor test says whether that is "not supported"
            if not sanity.check(pair[0], pair[1], second[index]):  # type: ignore[arg-type]
                problems.append(f"gpu {index} {name}: {pair} fails its sanity check ({sanity.why})")
    (output_dir / "readings.json").write_text(json.dumps(record, indent=2, default=str), encoding="utf-8")
    assert not problems, "\n".join(problems)



def _cycles(exporter: ExporterProcess) -> float:
    return next((value for name, _, value in parse_samples(exporter.metrics())
                 if name == "gpu_pod_exporter_sampling_cycles_total"), 0.0)
