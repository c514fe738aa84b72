"""The catalog's readings: each variant says what it needs from NVML, how its DCGM value is computed and
when it is gone for good. The sampler, the MIG reader and the doctor only ask (exporter/nvml/sampler.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from exporter.metrics.catalog import CATALOG, MIB, FieldKey, FieldSpec, FromFieldRate
from exporter.nvml.queries import QUERIES
from exporter.snapshot import DeviceIdentity, SamplerStatus


@dataclass
class Cycle:
    """One cycle's NVML answers, in NVML units (the ``CycleValues`` the sampler hands over)."""

    queries: dict[str, dict[str, float]] = field(default_factory=dict)
    fields: dict[FieldKey, float] = field(default_factory=dict)
    rates: dict[tuple[int, ...], float] = field(default_factory=dict)
    gpm_values: dict[int, float] = field(default_factory=dict)
    gpm_supported: bool | None = None

    def query_item(self, query: str, item: str) -> float | None:
        return self.queries.get(query, {}).get(item)

    def field(self, key: FieldKey) -> float | None:
        return self.fields.get(key)

    def rate(self, read: FromFieldRate) -> float | None:
        return self.rates.get(read.field_ids)

    def gpm(self, metric_id: int) -> float | None:
        return self.gpm_values.get(metric_id)


@dataclass
class Unsupported:
    """What a GPU refused for good (the ``Unsupported`` view of the sampler's per-GPU state)."""

    gpm_supported: bool | None = None
    queries: set[str] = field(default_factory=set)
    fields: set[FieldKey] = field(default_factory=set)
    gpm_metrics: set[int] = field(default_factory=set)

    def query_unsupported(self, query: str) -> bool:
        return query in self.queries

    def field_unsupported(self, key: FieldKey) -> bool:
        return key in self.fields

    def gpm_metric_unsupported(self, metric_id: int) -> bool:
        return metric_id in self.gpm_metrics


def spec(name: str) -> FieldSpec:
    found = CATALOG.lookup(name)
    assert found is not None, name
    return found


def test_every_served_row_names_where_its_value_comes_from() -> None:
    """A served row without an NVML source, a producing component or a label would never have a value."""
    for row in CATALOG.fields:
        read = row.read
        if not row.served:
            assert not (read.queries or read.field_keys or read.gpm_metric is not None), row.name
            continue
        sources = [bool(read.queries), bool(read.field_keys), read.gpm_metric is not None,
                   read.produced_by is not None, row.is_label]
        assert sum(sources) == 1, row.name
        assert all(name in QUERIES for name in read.queries), row.name


def test_query_rows_convert_nvml_units_to_dcgm_units() -> None:
    cycle = Cycle(queries={"power_usage": {"milliwatts": 632584}, "memory": {"used": 10 * MIB + 5}})
    assert spec("DCGM_FI_DEV_POWER_USAGE").read.value(cycle) == 632.584
    assert spec("DCGM_FI_DEV_FB_USED").read.value(cycle) == 10  # DCGM's INT64 MiB: truncated
    assert spec("DCGM_FI_DEV_GPU_TEMP").read.value(cycle) is None  # not read this cycle: omitted


def test_field_value_rows_read_their_entry_of_the_batched_call() -> None:
    violation = spec("DCGM_FI_DEV_GPU_POWER_THROTTLE_SECONDS_TOTAL").read
    assert violation.field_keys == ((74, 0),)
    assert violation.value(Cycle(fields={(74, 0): 2_500_000_000})) == 2.5  # ns -> s


def test_gpm_rows_use_gpm_or_their_field_rate_fallback_and_nothing_before_the_probe() -> None:
    pcie = spec("DCGM_FI_PROF_PCIE_TX_BYTES").read
    metric = pcie.gpm_metric
    assert metric is not None and pcie.fallback_keys
    fallback_ids = tuple(field_id for field_id, _ in pcie.fallback_keys)
    assert pcie.value(Cycle(gpm_supported=True, gpm_values={metric: 2.0})) == 2 * MIB  # MiB/s -> bytes/s
    assert pcie.value(Cycle(gpm_supported=False, rates={fallback_ids: 1234.9})) == 1234
    assert pcie.value(Cycle(gpm_supported=None, gpm_values={metric: 2.0}, rates={fallback_ids: 1.0})) is None
    sm_active = spec("DCGM_FI_PROF_SM_ACTIVE").read
    assert sm_active.value(Cycle(gpm_supported=False)) is None  # no GPM, no fallback: omitted


def test_a_row_is_missing_for_good_only_when_its_own_source_is_refused() -> None:
    pcie = spec("DCGM_FI_PROF_PCIE_TX_BYTES").read
    sm_active = spec("DCGM_FI_PROF_SM_ACTIVE").read
    no_gpm = Unsupported(gpm_supported=False)
    assert sm_active.missing(no_gpm)
    assert not pcie.missing(no_gpm)  # served from the field-value fallback
    assert pcie.missing(Unsupported(gpm_supported=False, fields=set(pcie.fallback_keys[:1])))
    assert sm_active.missing(Unsupported(gpm_supported=True, gpm_metrics={sm_active.gpm_metric or -1}))
    assert spec("DCGM_FI_DEV_FB_USED").read.missing(Unsupported(queries={"memory"}))
    assert not spec("DCGM_FI_DEV_GPU_TEMP").read.missing(Unsupported(queries={"memory"}))
    assert not spec("DCGM_FI_DEV_XID_ERRORS").read.missing(Unsupported(gpm_supported=False, queries=set(QUERIES)))


@pytest.mark.parametrize(("name", "expected"), [("DCGM_FI_DRIVER_VERSION", "550.54.15"),
                                                ("DCGM_FI_DEV_SERIAL", "1321"), ("DCGM_FI_DEV_GPU_TEMP", "")])
def test_label_rows_take_their_value_from_the_identity_or_the_status(name: str, expected: str) -> None:
    identity = DeviceIdentity(index=0, uuid="GPU-1", pci_bus_id="00000000:01:00.0", minor=0, model="H100",
                              serial="1321")
    status = SamplerStatus(nvml_up=True, driver_version="550.54.15")
    assert spec(name).read.label(identity, status) == expected
    assert spec("DCGM_FI_DRIVER_VERSION").read.label(identity, None) == ""  # no status yet (doctor before a cycle)
