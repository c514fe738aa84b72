"""The fake's NVML event API, driven through pynvml's real wrappers: sets, registration, waits, Xids."""

from __future__ import annotations

import threading
from typing import Any

import pynvml
import pytest

from simulator.scenario import ScenarioError, load_scenario
from tests.simulator.conftest import FixedClock, scenario_from

XID = pynvml.nvmlEventTypeXidCriticalError
NOT_MIG = 0xFFFFFFFF


def handle_of(index: int) -> Any:
    return pynvml.nvmlDeviceGetHandleByIndex(index)


def address(handle: Any) -> int | None:
    return pynvml.cast(handle, pynvml.c_void_p).value


def registered_set(*gpus: int, types: int = XID) -> Any:
    event_set = pynvml.nvmlEventSetCreate()
    for index in gpus:
        pynvml.nvmlDeviceRegisterEvents(handle_of(index), types, event_set)
    return event_set


class Waiter(threading.Thread):
    """Runs one nvmlEventSetWait_v2 in a thread and keeps what it returned or raised."""

    def __init__(self, event_set: Any, timeout_ms: int) -> None:
        super().__init__(daemon=True)
        self.event_set = event_set
        self.timeout_ms = timeout_ms
        self.result: Any = None
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self.result = pynvml.nvmlEventSetWait_v2(self.event_set, self.timeout_ms)
        except pynvml.NVMLError as exc:
            self.error = exc


def test_an_idle_wait_times_out_as_nvml_does(nvml: Any) -> None:
    nvml("gpu_count: 2\n")
    event_set = registered_set(0, 1)
    with pytest.raises(pynvml.NVMLError_Timeout):
        pynvml.nvmlEventSetWait_v2(event_set, 10)
    pynvml.nvmlEventSetFree(event_set)


def test_an_injected_xid_wakes_a_blocked_wait_with_the_event_data(nvml: Any) -> None:
    fake = nvml("gpu_count: 2\n")
    event_set = registered_set(0, 1)
    waiter = Waiter(event_set, 30_000)
    waiter.start()
    fake.inject_xid(1, 79)
    waiter.join(20)
    assert not waiter.is_alive() and waiter.error is None
    data = waiter.result
    assert address(data.device) == address(handle_of(1))
    assert (data.eventType, data.eventData) == (XID, 79)
    assert (data.gpuInstanceId, data.computeInstanceId) == (NOT_MIG, NOT_MIG)
    pynvml.nvmlEventSetFree(event_set)


def test_mig_attribution_and_bursts_are_delivered_one_event_per_wait(nvml: Any) -> None:
    fake = nvml("gpu_count: 1\n")
    event_set = registered_set(0)
    fake.inject_xid(0, 94, count=3, gi=2, ci=0)
    seen = [pynvml.nvmlEventSetWait_v2(event_set, 10) for _ in range(3)]
    assert [(d.eventData, d.gpuInstanceId, d.computeInstanceId) for d in seen] == [(94, 2, 0)] * 3
    with pytest.raises(pynvml.NVMLError_Timeout):
        pynvml.nvmlEventSetWait_v2(event_set, 10)


def test_scenario_xids_arrive_when_due_and_only_for_sets_registered_before(nvml: Any, clock: FixedClock) -> None:
    nvml("gpu_count: 2\nxid_events:\n  - {gpu: 0, xid: 13, at: 1s}\n  - {gpu: 0, xid: 31, at: 3s}\n"
         "  - {gpu: 1, xid: 48, at: 3s}\n")
    clock.t = 2.0  # registered after the first event: it is not delivered (nvml.h: recording starts now)
    event_set = registered_set(0)  # GPU 1 is not registered: its Xid 48 is not delivered either
    with pytest.raises(pynvml.NVMLError_Timeout):
        pynvml.nvmlEventSetWait_v2(event_set, 10)
    clock.t = 3.0
    data = pynvml.nvmlEventSetWait_v2(event_set, 10)
    assert data.eventData == 31
    with pytest.raises(pynvml.NVMLError_Timeout):
        pynvml.nvmlEventSetWait_v2(event_set, 10)


def test_a_wait_notices_a_scenario_xid_that_falls_due_while_it_blocks(nvml: Any, clock: FixedClock) -> None:
    nvml("gpu_count: 1\nxid_events:\n  - {gpu: 0, xid: 62, at: 5s}\n")
    event_set = registered_set(0)
    waiter = Waiter(event_set, 30_000)
    waiter.start()
    clock.t = 5.0
    waiter.join(20)
    assert not waiter.is_alive() and waiter.result.eventData == 62


def test_a_lost_gpu_answers_gpu_is_lost_once_and_the_others_keep_delivering(nvml: Any) -> None:
    fake = nvml("gpu_count: 2\n")
    event_set = registered_set(0, 1)
    lost_handle = handle_of(1)
    fake.inject_xid(1, 79)
    fake.lose_gpu(1)
    assert pynvml.nvmlEventSetWait_v2(event_set, 10).eventData == 79  # what happened before the loss
    with pytest.raises(pynvml.NVMLError_GpuIsLost):
        pynvml.nvmlEventSetWait_v2(event_set, 10)
    fake.inject_xid(0, 13)
    assert pynvml.nvmlEventSetWait_v2(event_set, 10).eventData == 13
    with pytest.raises(pynvml.NVMLError_GpuIsLost):  # registering the lost GPU again fails
        pynvml.nvmlDeviceRegisterEvents(lost_handle, XID, pynvml.nvmlEventSetCreate())


def test_registering_an_unsupported_type_registers_nothing(nvml: Any) -> None:
    fake = nvml("gpu_count: 1\ngpu_defaults: {model: RTX-4090}\n")
    supported = pynvml.nvmlDeviceGetSupportedEventTypes(handle_of(0))
    assert supported & XID and not supported & pynvml.nvmlEventTypeDoubleBitEccError  # no ECC on GeForce
    event_set = pynvml.nvmlEventSetCreate()
    with pytest.raises(pynvml.NVMLError_NotSupported):
        pynvml.nvmlDeviceRegisterEvents(handle_of(0), XID | pynvml.nvmlEventTypeDoubleBitEccError, event_set)
    fake.inject_xid(0, 13)
    with pytest.raises(pynvml.NVMLError_Timeout):
        pynvml.nvmlEventSetWait_v2(event_set, 10)


def test_a_blocked_wait_does_not_hold_the_driver_lock(nvml: Any) -> None:
    nvml("gpu_count: 1\n")
    event_set = registered_set(0)
    waiter = Waiter(event_set, 60_000)
    waiter.start()
    other = threading.Thread(target=pynvml.nvmlDeviceGetUUID, args=(handle_of(0),), daemon=True)
    other.start()
    other.join(20)
    assert not other.is_alive(), "an NVML call queued behind the event wait"
    assert waiter.is_alive()


def test_release_waits_ends_a_blocked_wait_with_timeout(nvml: Any) -> None:
    fake = nvml("gpu_count: 1\n")
    waiter = Waiter(registered_set(0), 60_000)
    waiter.start()
    fake.release_waits()
    waiter.join(20)
    assert not waiter.is_alive() and isinstance(waiter.error, pynvml.NVMLError_Timeout)


def test_free_closes_the_set(nvml: Any) -> None:
    fake = nvml("gpu_count: 1\n")
    event_set = registered_set(0)
    assert fake.open_event_sets == 1
    pynvml.nvmlEventSetFree(event_set)
    assert fake.open_event_sets == 0
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        pynvml.nvmlEventSetWait_v2(event_set, 10)
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        pynvml.nvmlEventSetFree(event_set)


def test_event_calls_before_init_are_uninitialized(nvml: Any) -> None:
    nvml("gpu_count: 1\n", init=False)
    with pytest.raises(pynvml.NVMLError_Uninitialized):
        pynvml.nvmlEventSetCreate()


def test_the_xid_storm_scenario_has_100_events_within_one_second_on_two_gpus() -> None:
    scenario = load_scenario("xid-storm")
    events = scenario.xid_events
    assert len(events) == 100
    assert {event.gpu for event in events} == {0, 1}
    assert max(event.at for event in events) - min(event.at for event in events) < 1.0


def test_the_gpu_lost_scenario_raises_xid_79_before_gpu_3_is_lost() -> None:
    scenario = load_scenario("gpu-lost")
    [xid] = scenario.xid_events
    [lost] = scenario.lost
    assert (xid.gpu, xid.xid, lost.gpu) == (3, 79, 3) and xid.at < lost.at


@pytest.mark.parametrize(("text", "message"), [
    ("xid_events:\n  - {gpu: 0}\n", "x.yaml:3: xid_events[0]: an Xid event needs 'xid'"),
    ("xid_events:\n  - {gpu: 4, xid: 13}\n", "xid_events[0].gpu: GPU index 4 out of range"),
    ("xid_events:\n  - {gpu: [0, 9], xid: 13}\n", "xid_events[0].gpu[1]: GPU index 9 out of range"),
    ("xid_events:\n  - {gpu: 0, xid: 0}\n", "xid_events[0].xid: 0 is below the minimum 1"),
    ("xid_events:\n  - {gpu: 0, xid: 13, count: 0}\n", "xid_events[0].count: 0 is below the minimum 1"),
    ("xid_events:\n  - {gpu: 0, xid: 13, burst: 3}\n", "xid_events[0].burst: unknown key"),
    ("xid_events:\n  - {gpu: 0, xid: 13, compute_instance: 0}\n", "'compute_instance' needs 'gpu_instance'"),
])
def test_xid_event_mistakes_name_file_line_and_key(text: str, message: str) -> None:
    with pytest.raises(ScenarioError) as caught:
        scenario_from("gpu_count: 4\n" + text, "x")
    assert message in str(caught.value)
