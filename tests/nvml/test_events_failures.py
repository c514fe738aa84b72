"""The event watcher's failure handling as an operator meets it: log lines (message and JSON fields),
retry pacing, make-before-break rebuilds and a clean stop.

Written from the survivors of mutation testing (docs/testing.md). The watcher runs in its own thread on
the fake library; its clock is the test's, and "nothing happened meanwhile" is observed over a counted
number of turns of the watcher's loop (each turn asks for the inventory once), never by sleeping.
"""

from __future__ import annotations

import ctypes
import logging
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import pynvml
import pytest

from exporter.nvml.client import NvmlClient
from exporter.nvml.events import DeviceEvent, EventWatcher
from exporter.nvml.inventory import Inventory, discover
from tests.support.polling import wait_for

from .fake_sampling import Records, captured_logs

DEADLINE_S = 10.0
Event = tuple[str, str, dict[str, Any]]


@dataclass
class Rig:
    fake: Any
    watcher: EventWatcher
    logs: Records
    now: list[float]
    received: list[DeviceEvent] = field(default_factory=list)
    inventory: Inventory | None = None
    turns: int = 0

    def follow(self) -> Inventory | None:
        self.turns += 1
        return self.inventory

    def discover(self) -> Inventory:
        self.inventory = discover(NvmlClient())
        return self.inventory

    def idle_turns(self, count: int = 20) -> None:
        """Let the watcher's loop turn ``count`` more times (a deadline, not a sleep)."""
        target = self.turns + count
        wait_for(lambda: self.turns >= target, DEADLINE_S, f"{count} turns of the watcher's loop")

    def start_without_gpu_1(self) -> None:
        """Start on two GPUs while GPU 1 refuses registration for a reason that can pass (tried again later)."""
        self.fake.inject_error("nvmlDeviceRegisterEvents", "Timeout", gpu=1)
        self.discover()
        self.watcher.start()
        self.registered((0,))

    def start(self, gpus: tuple[int, ...] = (0, 1)) -> None:
        """Start on the scenario's GPUs and wait until ``gpus`` are registered."""
        self.discover()
        self.watcher.start()
        self.registered(gpus)

    def registered(self, gpus: tuple[int, ...]) -> None:
        wait_for(lambda: self.watcher.registered_gpus == gpus, DEADLINE_S, f"registration of GPUs {gpus}")

    def xids(self) -> list[tuple[int, int]]:
        return [(event.identity.index, event.data) for event in self.received if event.is_xid]

    def events(self, level: int = logging.DEBUG) -> list[Event]:
        """The watcher's own lines as the JSON log format writes them: level, message and fields."""
        return [(record.levelname, record.getMessage(), dict(getattr(record, "fields", {})))
                for record in self.logs.records
                if record.levelno >= level and record.name == "gpu_pod_exporter.events"]


@contextmanager
def watching(nvml: Callable[..., Any], scenario: str = "gpu_count: 2\n", *, on_event: Callable[[DeviceEvent], None]
             | None = None, reregister_s: float = 30.0, wait_timeout_ms: int = 20,
             crashes: bool = False) -> Iterator[Rig]:
    """The watcher on the fake; unless ``crashes``, its loop must never fail (the supervisor would hide it)."""
    fake = nvml(scenario)
    now = [0.0]
    with captured_logs("gpu_pod_exporter") as logs:
        rig = Rig(fake, None, logs, now)  # type: ignore[arg-type]
        rig.watcher = EventWatcher(rig.follow, on_event or rig.received.append, wait_timeout_ms=wait_timeout_ms,
                                   idle_poll_s=0.01, error_backoff_s=0.01, reregister_s=reregister_s,
                                   clock=lambda: now[0])
        try:
            yield rig
        finally:
            fake.release_hangs()
            rig.watcher.stop(5)
    restarts = [record for record in logs.records if record.name == "gpu_pod_exporter.supervisor"]
    assert crashes or restarts == [], [record.getMessage() for record in restarts]


def test_the_watcher_thread_is_named_a_daemon_and_stops_cleanly(nvml: Any) -> None:
    with watching(nvml) as rig:
        assert rig.watcher.stop() is True  # never started: nothing to wait for
        rig.start()
        [thread] = [thread for thread in threading.enumerate() if thread.name == "nvml-events"]
        assert thread.daemon
        assert rig.watcher.stop() is True and rig.fake.open_event_sets == 0


def test_stop_gives_up_on_a_wait_stuck_inside_nvml_and_leaves_the_set_alone(nvml: Any) -> None:
    with watching(nvml) as rig:
        rig.start()
        waits = rig.fake.calls["nvmlEventSetWait_v2"]
        rig.fake.hang("nvmlEventSetWait_v2", 60.0)
        wait_for(lambda: rig.fake.calls["nvmlEventSetWait_v2"] > waits, DEADLINE_S, "a wait begun after the hang")
        assert rig.watcher.stop() is False  # one wait timeout plus a second, then it gives up
        assert rig.fake.open_event_sets == 1  # never freed under a waiter
        rig.fake.release_hangs()
        assert rig.watcher.stop(5) is True and rig.fake.open_event_sets == 0


def test_registration_is_logged_with_the_gpus_and_when_none_accepts_it(nvml: Any) -> None:
    with watching(nvml, "gpu_count: 3\n") as rig:
        rig.start((0, 1, 2))
        rig.fake.inject_error("nvmlDeviceRegisterEvents", "NotSupported")
        rig.discover()  # a new inventory: no GPU accepts events now
        wait_for(lambda: rig.watcher.registrations == 1 and rig.watcher.registered_gpus == (), DEADLINE_S,
                 "the new inventory tried")
        rig.idle_turns()
        assert rig.fake.open_event_sets == 0  # the empty set is not kept
        rig.fake.clear_errors()
        rig.now[0] += 1.0  # the next attempt is due
        rig.registered((0, 1, 2))
    messages = [(level, message, fields) for level, message, fields in rig.events(logging.INFO)
                if "does not support NVML events" not in message]
    assert messages == [
        ("INFO", "receiving NVML events", {"gpus": "0,1,2"}),
        ("WARNING", "no GPU accepts NVML event registration; Xid metrics stay at 0", {}),
        ("INFO", "receiving NVML events", {"gpus": "0,1,2"}),
    ]


def test_each_registration_failure_is_logged_once_per_gpu_with_its_error(nvml: Any) -> None:
    with watching(nvml, "gpu_count: 6\n") as rig:
        for gpu, error in ((1, "Unknown"), (2, "NotSupported"), (3, "Timeout"), (4, "Unknown"), (5, "NotSupported")):
            rig.fake.inject_error("nvmlDeviceRegisterEvents", error, gpu=gpu)
        rig.start((0,))
        creates = rig.fake.calls["nvmlEventSetCreate"]
        rig.now[0] += 30.0  # GPU 3 may answer now; it still fails: not said again
        rig.idle_turns()
        assert rig.fake.calls["nvmlEventSetCreate"] > creates
    assert creates == 3  # each set left undefined by Unknown was replaced by a new one
    assert rig.fake.open_event_sets == 0
    unknown = "event registration failed with Unknown; the set is rebuilt without this GPU"
    unsupported = "GPU does not support NVML events; it is skipped, its Xid metrics stay at 0"
    assert rig.events(logging.WARNING) == [  # once per GPU, although GPUs 2 and 3 were tried three times
        ("WARNING", unknown, {"gpu": 1, "error": "NVMLError_Unknown: Unknown Error"}),
        ("WARNING", unsupported, {"gpu": 2, "error": "NVMLError_NotSupported: Not Supported"}),
        ("WARNING", "cannot register this GPU for NVML events; it is skipped and tried again later",
         {"gpu": 3, "error": "NVMLError_Timeout: Timeout"}),
        ("WARNING", unknown, {"gpu": 4, "error": "NVMLError_Unknown: Unknown Error"}),
        ("WARNING", unsupported, {"gpu": 5, "error": "NVMLError_NotSupported: Not Supported"}),
    ]


@pytest.mark.parametrize("error", ["Timeout", "Unknown", "NotSupported"])
def test_a_gpu_whose_registration_works_again_is_said_again_when_it_fails_anew(nvml: Any, error: str) -> None:
    with watching(nvml) as rig:
        rig.fake.inject_error("nvmlDeviceRegisterEvents", error, gpu=1)
        rig.start((0,))
        rig.fake.clear_errors()
        rig.discover()  # a new inventory (NVML re-initialised): GPU 1 registers now
        rig.registered((0, 1))
        rig.fake.inject_error("nvmlDeviceRegisterEvents", error, gpu=1)
        rig.discover()
        wait_for(lambda: rig.watcher.registrations == 3, DEADLINE_S, "registration on the third inventory")
    failures = [(message, fields) for _level, message, fields in rig.events(logging.WARNING)]
    assert len(failures) == 2 and failures[0] == failures[1] and failures[0][1]["gpu"] == 1
    assert [fields for _level, message, fields in rig.events(logging.INFO) if message == "receiving NVML events"] == [
        {"gpus": "0"}, {"gpus": "0,1"}, {"gpus": "0"}]


@pytest.mark.parametrize(("first", "then"), [("NotSupported", "NoPermission"), ("Timeout", "InsufficientPower")])
def test_a_gpu_refused_for_another_reason_is_said_again(nvml: Any, first: str, then: str) -> None:
    with watching(nvml) as rig:
        rig.fake.inject_error("nvmlDeviceRegisterEvents", first, gpu=1)
        rig.start((0,))
        rig.fake.clear_errors()
        rig.fake.inject_error("nvmlDeviceRegisterEvents", then, gpu=1)
        rig.discover()
        wait_for(lambda: rig.watcher.registrations == 2, DEADLINE_S, "registration on the new inventory")
    errors = [fields["error"].split(":")[0] for _level, _message, fields in rig.events(logging.WARNING)]
    assert errors == [f"NVMLError_{first}", f"NVMLError_{then}"]


def test_a_set_whose_registration_finds_nvml_gone_is_freed(nvml: Any) -> None:
    with watching(nvml) as rig:
        rig.fake.inject_error("nvmlDeviceRegisterEvents", "DriverNotLoaded")
        rig.discover()
        rig.watcher.start()
        wait_for(lambda: rig.fake.calls["nvmlEventSetFree"] >= 1, DEADLINE_S, "the set given up")
        rig.idle_turns()
        assert rig.fake.open_event_sets == 0 and rig.watcher.registered_gpus == ()


def test_a_gpu_without_xid_events_is_said_once(nvml: Any) -> None:
    with watching(nvml) as rig:
        rig.watcher = EventWatcher(rig.follow, rig.received.append, requested=pynvml.nvmlEventTypePState,
                                   wait_timeout_ms=20, idle_poll_s=0.01, error_backoff_s=0.01,
                                   clock=lambda: rig.now[0])
        rig.start()
        rig.discover()
        wait_for(lambda: rig.watcher.registrations == 2, DEADLINE_S, "the second registration")
        supported = [pynvml.nvmlDeviceGetSupportedEventTypes(pynvml.nvmlDeviceGetHandleByIndex(gpu)) for gpu in (0, 1)]
    assert [(level, message, fields) for level, message, fields in rig.events(logging.INFO)
            if "Xid" in message] == [
        ("INFO", "GPU does not report Xid events through NVML; its Xid metrics stay at 0",
         {"gpu": gpu, "supported": f"0x{supported[gpu]:x}"}) for gpu in (0, 1)]  # once per GPU


def test_a_board_without_ecc_events_still_delivers_its_xids(nvml: Any) -> None:
    """Only the event types a GPU supports are asked for: asking for more makes NVML refuse them all."""
    with watching(nvml, "gpu_defaults: {model: RTX-4090}\n") as rig:
        rig.start((0,))
        rig.fake.inject_xid(0, 13)
        wait_for(lambda: rig.received, DEADLINE_S, "the Xid")
    assert rig.xids() == [(0, 13)]


def test_wait_failures_are_logged_once_per_reason_and_the_watcher_carries_on(nvml: Any) -> None:
    with watching(nvml) as rig:
        rig.start()
        waits = rig.fake.calls["nvmlEventSetWait_v2"]
        rig.fake.inject_error("nvmlEventSetWait_v2", "InsufficientPower")
        wait_for(lambda: rig.fake.calls["nvmlEventSetWait_v2"] > waits + 3, DEADLINE_S, "failing waits")
        rig.fake.clear_errors()
        rig.fake.inject_error("nvmlEventSetWait_v2", "IrqIssue")
        waits = rig.fake.calls["nvmlEventSetWait_v2"]
        wait_for(lambda: rig.fake.calls["nvmlEventSetWait_v2"] > waits + 3, DEADLINE_S, "failing waits")
        rig.fake.clear_errors()
        rig.fake.inject_xid(1, 48)
        wait_for(lambda: rig.received, DEADLINE_S, "an event after the failures")
    assert rig.xids() == [(1, 48)]
    assert rig.events(logging.WARNING) == [
        ("WARNING", "waiting for NVML events failed; retrying", {"error": error}) for error in (
            "NVMLError_InsufficientPower: Insufficient External Power",
            "NVMLError_IrqIssue: Interrupt Request Issue")]


def test_nvml_going_away_under_the_wait_is_said_once_and_retried_after_a_pause(nvml: Any) -> None:
    with watching(nvml, "gpu_count: 1\n") as rig:
        rig.start((0,))
        creates = rig.fake.calls["nvmlEventSetCreate"]
        rig.fake.inject_error("nvmlEventSetWait_v2", "DriverNotLoaded")
        wait_for(lambda: rig.watcher.registered_gpus == (), DEADLINE_S, "the set dropped")
        rig.idle_turns()
        assert rig.fake.calls["nvmlEventSetCreate"] == creates  # not before the pause has passed
        rig.fake.clear_errors()
        rig.fake.inject_error("nvmlEventSetWait_v2", "Uninitialized")  # and a different reason next time
        rig.now[0] = 0.01  # exactly one pause later
        wait_for(lambda: rig.watcher.registrations == 2 and rig.watcher.registered_gpus == (), DEADLINE_S,
                 "registered again, then dropped again")
        rig.fake.clear_errors()
        rig.now[0] = 1.0
        rig.registered((0,))
    assert [(level, message, fields) for level, message, fields in rig.events(logging.WARNING)] == [
        ("WARNING", "NVML went away under the event watcher; waiting for it to come back", {"error": error})
        for error in ("NVMLError_DriverNotLoaded: Driver Not Loaded", "NVMLError_Uninitialized: Uninitialized")]


def test_a_new_inventory_is_registered_at_once_even_during_a_retry_pause(nvml: Any) -> None:
    with watching(nvml, "gpu_count: 1\n") as rig:
        rig.start((0,))
        rig.fake.inject_error("nvmlEventSetWait_v2", "DriverNotLoaded")
        wait_for(lambda: rig.watcher.registered_gpus == (), DEADLINE_S, "the set dropped")
        rig.fake.clear_errors()
        rig.discover()  # the sampler re-initialised NVML: new handles, while the clock stands still
        rig.registered((0,))


def test_event_set_creation_failures_back_off_doubling_and_are_said_once_per_episode(nvml: Any) -> None:
    with watching(nvml, "gpu_count: 1\n") as rig:
        rig.fake.inject_error("nvmlEventSetCreate", "InsufficientResources")
        rig.discover()
        rig.watcher.start()
        wait_for(lambda: rig.fake.calls["nvmlEventSetCreate"] == 1, DEADLINE_S, "the first attempt, at once")
        rig.idle_turns(2)  # the attempt is over (its pause is reckoned from the clock at its end)
        at, pause = 0.0, 0.01
        for _ in range(4):  # pauses of 10, 20, 40 and 80 ms
            at, pause = at + pause, pause * 2  # (the watcher's own float arithmetic)
            rig.now[0] = at - 0.001
            rig.idle_turns()
            before = rig.fake.calls["nvmlEventSetCreate"]
            rig.now[0] = at
            wait_for(lambda b=before: rig.fake.calls["nvmlEventSetCreate"] > b, DEADLINE_S, f"an attempt at {at}")
            rig.idle_turns(2)
            assert rig.fake.calls["nvmlEventSetCreate"] == before + 1  # none before the pause was over
        rig.fake.clear_errors()
        rig.now[0] = 1.0
        rig.registered((0,))
        rig.fake.inject_error("nvmlEventSetCreate", "InsufficientResources")
        rig.discover()  # a new inventory, and creating its set fails again: a new episode
        wait_for(lambda: rig.fake.calls["nvmlEventSetCreate"] > 6, DEADLINE_S, "the next attempt")
        rig.idle_turns()
    failed = ("WARNING", "cannot create an NVML event set; Xid events are not received",
              {"error": "NVMLError_InsufficientResources: InsufficientResources"})
    assert rig.events(logging.WARNING) == [failed, failed]


def test_an_event_set_that_cannot_be_created_for_another_reason_is_said_again(nvml: Any) -> None:
    with watching(nvml, "gpu_count: 1\n") as rig:
        rig.fake.inject_error("nvmlEventSetCreate", "InsufficientResources")
        rig.discover()
        rig.watcher.start()
        wait_for(lambda: rig.fake.calls["nvmlEventSetCreate"] == 1, DEADLINE_S, "the first attempt")
        rig.idle_turns(2)
        rig.fake.clear_errors()
        rig.fake.inject_error("nvmlEventSetCreate", "Memory")
        rig.now[0] = 1.0
        wait_for(lambda: rig.fake.calls["nvmlEventSetCreate"] == 2, DEADLINE_S, "the next attempt")
        rig.idle_turns(2)
    assert [fields["error"].split(":")[0] for _level, _message, fields in rig.events(logging.WARNING)] == [
        "NVMLError_InsufficientResources", "NVMLError_Memory"]


def test_a_rebuild_registers_the_new_set_before_it_drains_and_frees_the_old_one(nvml: Any) -> None:
    """Make before break: an Xid that arrives while the new set is being created is not lost."""
    with watching(nvml) as rig:
        rig.start_without_gpu_1()
        rig.fake.clear_errors()
        rig.fake.set_latency("nvmlEventSetCreate", 0.5)
        rig.now[0] = 30.0  # GPU 1 is tried again: a new set replaces the current one

        def creating() -> bool:
            call = rig.watcher.nvml.in_flight()
            return call is not None and call.function == "nvmlEventSetCreate"

        wait_for(creating, DEADLINE_S, "the new event set being created")
        rig.fake.inject_xid(0, 31)
        rig.registered((0, 1))
        wait_for(lambda: rig.received, DEADLINE_S, "the Xid that arrived during the rebuild")
        assert rig.xids() == [(0, 31)]
        wait_for(lambda: rig.fake.open_event_sets == 1, DEADLINE_S, "the old set freed")


def test_a_lone_gpu_that_is_lost_and_back_delivers_again(nvml: Any) -> None:
    with watching(nvml, "gpu_count: 1\n") as rig:
        rig.start((0,))
        rig.fake.lose_gpu(0)
        rig.fake.inject_error("nvmlEventSetWait_v2", "GpuIsLost")
        wait_for(lambda: rig.watcher.registered_gpus == (), DEADLINE_S, "the rebuild without the lost GPU")
        rig.fake.clear_errors()
        rig.fake.restore_gpu(0)
        rig.now[0] = 1.0
        rig.registered((0,))
        rig.fake.inject_xid(0, 79)
        wait_for(lambda: rig.received, DEADLINE_S, "the Xid after the GPU came back")
        assert rig.watcher.running and rig.xids() == [(0, 79)]
    lost = [fields for level, message, fields in rig.events(logging.WARNING)
            if message == "a registered GPU is lost; events of the other GPUs keep arriving"]
    assert lost == [{"error": "NVMLError_GpuIsLost: GPU is lost"}]


def test_a_gpu_lost_for_another_reason_is_said_again(nvml: Any) -> None:
    with watching(nvml) as rig:
        rig.start()
        waits = rig.fake.calls["nvmlEventSetWait_v2"]
        rig.fake.inject_error("nvmlEventSetWait_v2", "GpuIsLost")
        wait_for(lambda: rig.fake.calls["nvmlEventSetWait_v2"] > waits, DEADLINE_S, "a lost answer")
        rig.fake.clear_errors()
        rig.fake.inject_error("nvmlEventSetWait_v2", "ResetRequired")
        waits = rig.fake.calls["nvmlEventSetWait_v2"]
        wait_for(lambda: rig.fake.calls["nvmlEventSetWait_v2"] > waits, DEADLINE_S, "another lost answer")
        rig.fake.clear_errors()
        rig.idle_turns()
    lost = [fields["error"] for _level, message, fields in rig.events(logging.WARNING)
            if message == "a registered GPU is lost; events of the other GPUs keep arriving"]
    assert lost == ["NVMLError_GpuIsLost: GPU is lost", "NVMLError_ResetRequired: GPU requires restart"]


def test_a_failing_consumer_is_logged_and_later_events_still_arrive(nvml: Any) -> None:
    received: list[DeviceEvent] = []

    def consumer(event: DeviceEvent) -> None:
        received.append(event)
        if len(received) == 1:
            raise RuntimeError("ledger bug")

    with watching(nvml, on_event=consumer) as rig:
        rig.start()
        rig.fake.inject_xid(0, 13)
        rig.fake.inject_xid(1, 31)
        wait_for(lambda: len(received) == 2, DEADLINE_S, "both events")
    [failure] = [record for record in rig.logs.records if record.levelno == logging.ERROR
                 and record.name == "gpu_pod_exporter.events"]
    assert failure.getMessage() == "event consumer failed"
    assert failure.exc_info is not None and str(failure.exc_info[1]) == "ledger bug"


def test_a_bug_in_the_watcher_frees_its_set_and_the_supervisor_starts_it_again(nvml: Any) -> None:
    with watching(nvml, crashes=True) as rig:
        inventory = rig.discover()
        rig.watcher.start()
        rig.registered((0, 1))
        rig.inventory = "not an inventory"  # type: ignore[assignment]  # a bug in the caller
        wait_for(lambda: rig.fake.open_event_sets == 0, DEADLINE_S, "the set freed on the way out")
        rig.inventory = inventory
        rig.registered((0, 1))
        assert rig.watcher.running and rig.fake.open_event_sets == 1


def test_freeing_a_set_nvml_already_dropped_is_a_debug_line(nvml: Any) -> None:
    with watching(nvml) as rig:
        rig.start()
        rig.fake.inject_error("nvmlEventSetFree", "DriverNotLoaded")
        assert rig.watcher.stop(5)
    assert rig.events()[-1] == ("DEBUG", "freeing the event set failed",
                                {"error": "NVMLError_DriverNotLoaded: Driver Not Loaded"})


@pytest.mark.parametrize("known", [True, False])
def test_an_event_on_a_handle_not_registered_is_matched_by_uuid_or_dropped_once(nvml: Any, known: bool) -> None:
    """NVIDIA's device plugin does the same: an event's handle may differ from the registered one."""
    with watching(nvml) as rig:
        inventory = rig.discover()
        rig.watcher.start()
        rig.registered((0, 1))
        current = rig.watcher._current  # the registration the watcher delivers from
        assert current is not None
        alias, other = ctypes.c_void_p(0x5EED), ctypes.c_void_p(0xFEED)  # handle values it did not register
        uuid = inventory.devices[1].identity.uuid if known else "GPU-elsewhere"

        class Client(NvmlClient):
            def call(self, function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
                if function is pynvml.nvmlDeviceGetUUID and args[0] in (alias, other):
                    return uuid
                return super().call(function, *args, **kwargs)

        rig.watcher.nvml = Client()
        data = type("Data", (), {"device": alias, "eventType": pynvml.nvmlEventTypeXidCriticalError,
                                 "eventData": 79, "gpuInstanceId": 0xFFFFFFFF, "computeInstanceId": 0xFFFFFFFF})()
        for handle in (alias, alias, other):
            data.device = handle
            rig.watcher._deliver(current, data)  # as the wait loop would
    if known:
        assert rig.xids() == [(1, 79)] * 3
    else:
        assert rig.received == []
        assert [message for _level, message, _fields in rig.events(logging.WARNING)] == [
            "an NVML event names a GPU that is not in the inventory; it is dropped"] * 2  # once per handle


def test_a_periodic_rebuild_that_registers_nothing_is_retried(nvml: Any) -> None:
    with watching(nvml) as rig:
        rig.start_without_gpu_1()
        rig.fake.inject_error("nvmlDeviceRegisterEvents", "Timeout")  # now neither GPU can be registered
        rig.now[0] = 30.0  # GPU 1 is tried again, in a new set: it comes out empty
        wait_for(lambda: rig.watcher.registered_gpus == (), DEADLINE_S, "the empty rebuild")
        rig.idle_turns(2)
        rig.fake.clear_errors()
        rig.now[0] = 31.0
        rig.registered((0, 1))
        assert rig.watcher.running


def test_a_wait_failure_that_comes_back_after_another_one_is_said_again(nvml: Any) -> None:
    """Each kind of failure is said again once something else happened in between."""
    with watching(nvml) as rig:
        rig.start()

        def fail_waits(error: str) -> None:
            waits = rig.fake.calls["nvmlEventSetWait_v2"]
            rig.fake.inject_error("nvmlEventSetWait_v2", error)
            wait_for(lambda: rig.fake.calls["nvmlEventSetWait_v2"] > waits, DEADLINE_S, f"a wait answering {error}")
            rig.fake.clear_errors()
            rig.idle_turns(2)

        for error in ("InsufficientPower", "GpuIsLost", "InsufficientPower", "GpuIsLost"):
            fail_waits(error)
        for step in (1.0, 2.0):
            fail_waits("DriverNotLoaded")  # the set is dropped, registered again after a pause
            rig.now[0] = step
            rig.registered((0, 1))
            fail_waits("InsufficientPower")
    kinds = {"waiting for NVML events failed; retrying": "error", "NVML went away under the event watcher; "
             "waiting for it to come back": "down", "a registered GPU is lost; events of the other GPUs keep "
             "arriving": "lost"}
    assert [kinds[message] for _level, message, _fields in rig.events(logging.WARNING)] == [
        "error", "lost", "error", "lost", "down", "error", "down", "error"]



@pytest.mark.parametrize("made_by", ["a rebuild", "a new inventory"])
@pytest.mark.parametrize(("lost_answers", "rebuilt"), [(1, False), (2, True)])
def test_a_lost_answer_rebuilds_the_set_at_once_only_when_it_repeats(nvml: Any, monkeypatch: pytest.MonkeyPatch,
                                                                     made_by: str, lost_answers: int,
                                                                     rebuilt: bool) -> None:
    """Counted afresh for each new set: one lost answer waits for the next planned rebuild, two in a row
    rebuild at once (without the lost GPU, should its registration now fail)."""
    with watching(nvml) as rig:
        if made_by == "a rebuild":
            rig.start_without_gpu_1()
            rig.fake.clear_errors()
            rig.now[0] = 30.0  # GPU 1 is tried again: a rebuild; the next planned one is 30 s away
            rig.registered((0, 1))
        else:
            rig.start()
            registrations = rig.watcher.registrations
            rig.discover()  # the sampler re-initialised NVML: the old set is dropped, a new one registered
            wait_for(lambda: rig.watcher.registrations > registrations, DEADLINE_S, "the new inventory's set")
        creates = rig.fake.calls["nvmlEventSetCreate"]
        real_wait = pynvml.nvmlEventSetWait_v2
        left = [lost_answers]

        def wait(*args: Any) -> Any:
            if left[0]:
                left[0] -= 1
                raise pynvml.NVMLError(pynvml.NVML_ERROR_GPU_IS_LOST)
            return real_wait(*args)

        monkeypatch.setattr(pynvml, "nvmlEventSetWait_v2", wait)
        rig.idle_turns()
        assert left == [0]
        assert rig.fake.calls["nvmlEventSetCreate"] == creates + rebuilt
        assert rig.watcher.registered_gpus == (0, 1)


def test_a_failure_on_the_way_out_ends_the_watcher_instead_of_restarting_it(nvml: Any,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """stop() while a wait is inside NVML, then the loop fails: it ends, frees its set, and the supervisor
    neither restarts it nor logs a failure (``watching`` checks that no supervisor line was written)."""
    with watching(nvml) as rig:
        rig.start()
        inside, release = threading.Event(), threading.Event()

        def failing_wait(*_args: Any) -> Any:
            inside.set()
            release.wait(DEADLINE_S)
            raise RuntimeError("a bug on the way out")

        monkeypatch.setattr(pynvml, "nvmlEventSetWait_v2", failing_wait)
        assert inside.wait(DEADLINE_S)
        assert rig.watcher.stop(0.0) is False  # still inside the wait
        release.set()
        assert rig.watcher.stop(DEADLINE_S) is True
        assert rig.fake.open_event_sets == 0
