"""The GPU health verdict: which reason wins when several apply."""

from __future__ import annotations

import pytest

from exporter.health.verdict import REASONS_WORST_FIRST, evaluate
from exporter.snapshot import DeviceIdentity, DeviceReading

GPU = DeviceIdentity(index=0, uuid="GPU-0", pci_bus_id="00000000:8D:00.0", minor=0, model="A100")
FAILURE = "DCGM_FI_DEV_ROW_REMAP_FAILURE"
RETIRED = "DCGM_FI_DEV_RETIRED_PENDING"
REMAP = "DCGM_FI_DEV_ROW_REMAP_PENDING"


def reading(up: bool = True, **flags: int) -> DeviceReading:
    names = {"failure": FAILURE, "retired": RETIRED, "remap": REMAP}
    return DeviceReading(identity=GPU, up=up, values={names[key]: value for key, value in flags.items()})


def test_a_gpu_with_nothing_wrong_is_ok() -> None:
    verdict = evaluate(reading(failure=0, retired=0, remap=0))
    assert (verdict.healthy, verdict.reason, verdict.reasons) == (True, "ok", ())


def test_readings_the_gpu_does_not_support_do_not_count() -> None:
    assert evaluate(reading()).reason == "ok"


@pytest.mark.parametrize(("up", "flags", "fatal", "expected"), [
    (False, {"failure": 1, "retired": 1, "remap": 1}, (79,), "gpu_lost"),
    (True, {"failure": 1, "retired": 1, "remap": 1}, (48,), "row_remap_failure"),
    (True, {"retired": 1, "remap": 1}, (48,), "fatal_xid"),
    (True, {"retired": 1, "remap": 1}, (), "retired_pages_pending"),
    (True, {"remap": 1}, (), "row_remap_pending"),
])
def test_the_worst_current_reason_wins(up: bool, flags: dict[str, int], fatal: tuple[int, ...],
                                       expected: str) -> None:
    verdict = evaluate(reading(up, **flags), fatal)
    assert not verdict.healthy and verdict.reason == expected
    assert verdict.reasons[0] == expected and list(verdict.reasons) == sorted(
        verdict.reasons, key=REASONS_WORST_FIRST.index)


def test_all_current_reasons_are_listed_worst_first() -> None:
    verdict = evaluate(reading(False, failure=1, retired=1, remap=1), (79,))
    assert verdict.reasons == REASONS_WORST_FIRST
