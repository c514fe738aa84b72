"""The NVML event watcher against the fake library: registration, the idle path, lost GPUs, re-init, stop."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pytest

from exporter.nvml.client import NvmlClient
from exporter.nvml.events import DeviceEvent, EventWatcher
from exporter.nvml.inventory import Inventory, discover
from tests.support.polling import wait_for

DEADLINE_S = 10.0


class Source:
    """Stands in for the sampler: the inventory the watcher follows, replaceable at will."""

    def __init__(self) -> None:
        self.inventory: Inventory | None = None

    def discover(self) -> Inventory:
        self.inventory = discover(NvmlClient())
        return self.inventory


@pytest.fixture
def source() -> Source:
    return Source()


@pytest.fixture
def events() -> list[DeviceEvent]:
    return []


@pytest.fixture
def watcher(source: Source, events: list[DeviceEvent]) -> Iterator[EventWatcher]:
    watcher = EventWatcher(lambda: source.inventory, events.append, wait_timeout_ms=20, idle_poll_s=0.01,
                           error_backoff_s=0.01)
    yield watcher
    watcher.stop(5)


def xids(events: list[DeviceEvent]) -> list[tuple[int, int]]:
    return [(event.identity.index, event.data) for event in events if event.is_xid]


def settled(watcher: EventWatcher, fake: Any, waits: int = 10) -> None:
    """Wait until the watcher has made ``waits`` more timed-out waits on one set without rebuilding it."""
    state = {"registrations": watcher.registrations, "waits": fake.calls["nvmlEventSetWait_v2"]}

    def quiet() -> bool:
        if watcher.registrations != state["registrations"]:
            state.update(registrations=watcher.registrations, waits=fake.calls["nvmlEventSetWait_v2"])
            return False
        return fake.calls["nvmlEventSetWait_v2"] - state["waits"] >= waits

    wait_for(quiet, DEADLINE_S, f"{waits} waits on one event set")


def registered(watcher: EventWatcher, gpus: tuple[int, ...]) -> None:
    wait_for(lambda: watcher.registered_gpus == gpus, DEADLINE_S, f"registration of GPUs {gpus}")


def test_it_waits_for_an_inventory_then_registers_every_gpu(nvml: Any, source: Source,
                                                            watcher: EventWatcher) -> None:
    nvml("gpu_count: 3\n")
    watcher.start()
    assert watcher.registered_gpus == ()
    source.discover()
    registered(watcher, (0, 1, 2))


def test_timeouts_are_the_quiet_idle_path(nvml: Any, source: Source, watcher: EventWatcher,
                                          events: list[DeviceEvent], caplog: pytest.LogCaptureFixture) -> None:
    fake = nvml("gpu_count: 2\n")
    source.discover()
    with caplog.at_level(logging.INFO, logger="gpu_pod_exporter.events"):
        watcher.start()
        wait_for(lambda: fake.calls["nvmlEventSetWait_v2"] >= 5, DEADLINE_S, "several timed-out waits")
    assert watcher.running and events == [] and watcher.registrations == 1
    assert [record.getMessage() for record in caplog.records] == ["receiving NVML events"]


def test_an_xid_storm_is_delivered_event_by_event(nvml: Any, source: Source, watcher: EventWatcher,
                                                  events: list[DeviceEvent]) -> None:
    fake = nvml("gpu_count: 2\n")
    source.discover()
    watcher.start()
    registered(watcher, (0, 1))
    fake.inject_xid(0, 31, count=60)
    fake.inject_xid(1, 13, count=40)
    wait_for(lambda: len(events) >= 100, DEADLINE_S, "100 events")
    assert sorted(set(xids(events))) == [(0, 31), (1, 13)]
    assert xids(events).count((0, 31)) == 60 and xids(events).count((1, 13)) == 40


def test_mig_instance_ids_come_with_the_event(nvml: Any, source: Source, watcher: EventWatcher,
                                              events: list[DeviceEvent]) -> None:
    fake = nvml("gpu_count: 1\n")
    source.discover()
    watcher.start()
    registered(watcher, (0,))
    fake.inject_xid(0, 94, gi=3, ci=1)
    fake.inject_xid(0, 13)
    wait_for(lambda: len(events) == 2, DEADLINE_S, "two events")
    assert [(e.gpu_instance_id, e.compute_instance_id) for e in events] == [(3, 1), (None, None)]


@pytest.mark.parametrize("symbol", ["nvmlDeviceRegisterEvents", "nvmlDeviceGetSupportedEventTypes"])
def test_a_gpu_without_event_support_is_skipped_and_logged_once(
        nvml: Any, source: Source, watcher: EventWatcher, events: list[DeviceEvent],
        caplog: pytest.LogCaptureFixture, symbol: str) -> None:
    fake = nvml("gpu_count: 3\n")
    fake.inject_error(symbol, "NotSupported", gpu=1)
    source.discover()
    with caplog.at_level(logging.WARNING, logger="gpu_pod_exporter.events"):
        watcher.start()
        registered(watcher, (0, 2))
        source.discover()  # a new inventory registers again: GPU 1 is skipped again, not logged again
        wait_for(lambda: watcher.registrations == 2, DEADLINE_S, "the second registration")
    fake.inject_xid(1, 13)
    fake.inject_xid(2, 31)
    wait_for(lambda: events, DEADLINE_S, "the event on GPU 2")
    assert xids(events) == [(2, 31)]
    skipped = [record for record in caplog.records if "does not support NVML events" in record.getMessage()]
    assert len(skipped) == 1 and skipped[0].fields["gpu"] == 1  # type: ignore[attr-defined]


def test_unknown_from_registration_rebuilds_the_set_without_that_gpu(nvml: Any, source: Source,
                                                                   watcher: EventWatcher) -> None:
    fake = nvml("gpu_count: 3\n")
    fake.inject_error("nvmlDeviceRegisterEvents", "Unknown", gpu=1)
    source.discover()
    watcher.start()
    registered(watcher, (0, 2))
    assert fake.open_event_sets == 1  # the set left undefined by Unknown was freed


def test_a_gpu_lost_during_the_wait_does_not_stop_the_others(nvml: Any, source: Source, watcher: EventWatcher,
                                                             events: list[DeviceEvent]) -> None:
    fake = nvml("gpu_count: 2\n")
    source.discover()
    watcher.start()
    registered(watcher, (0, 1))
    fake.inject_xid(1, 79)
    fake.lose_gpu(1)
    fake.inject_xid(0, 13)
    wait_for(lambda: len(events) == 2, DEADLINE_S, "Xid 79 on GPU 1 and Xid 13 on GPU 0")
    assert xids(events) == [(1, 79), (0, 13)]
    fake.inject_xid(0, 31)
    wait_for(lambda: len(events) == 3, DEADLINE_S, "a later Xid on GPU 0")
    assert watcher.running


def test_a_repeating_gpu_lost_rebuilds_the_set_without_the_lost_gpu(nvml: Any, source: Source,
                                                                    watcher: EventWatcher,
                                                                    events: list[DeviceEvent]) -> None:
    fake = nvml("gpu_count: 2\n")
    source.discover()
    watcher.start()
    registered(watcher, (0, 1))
    fake.lose_gpu(1)
    fake.inject_error("nvmlEventSetWait_v2", "GpuIsLost")  # this driver keeps saying so
    registered(watcher, (0,))
    fake.clear_errors()
    fake.inject_xid(0, 13)
    wait_for(lambda: events, DEADLINE_S, "an event on the remaining GPU")
    assert xids(events) == [(0, 13)]


def test_a_lost_gpu_that_comes_back_is_registered_again_and_delivers_its_xids(
        nvml: Any, source: Source, events: list[DeviceEvent]) -> None:
    fake = nvml("gpu_count: 2\n")
    source.discover()
    now = [0.0]  # the watcher's clock: GPUs left out are tried again only when the test moves it on
    watcher = EventWatcher(lambda: source.inventory, events.append, wait_timeout_ms=20, idle_poll_s=0.01,
                           error_backoff_s=0.01, reregister_s=30.0, clock=lambda: now[0])
    watcher.start()
    try:
        registered(watcher, (0, 1))
        fake.lose_gpu(1)
        fake.inject_error("nvmlEventSetWait_v2", "GpuIsLost")
        registered(watcher, (0,))
        fake.clear_errors()
        settled(watcher, fake)
        registrations_while_lost = watcher.registrations
        now[0] += 31.0
        settled(watcher, fake)  # still lost: tried again once, left out again
        assert watcher.registered_gpus == (0,) and watcher.registrations == registrations_while_lost + 1
        fake.restore_gpu(1)  # reset: the same handle answers again, its old registration is gone
        settled(watcher, fake)
        assert watcher.registered_gpus == (0,)  # not before the interval has passed
        now[0] += 31.0
        registered(watcher, (0, 1))
        fake.inject_xid(1, 79)
        fake.inject_xid(0, 13)
        wait_for(lambda: len(events) == 2, DEADLINE_S, "Xids of the returned GPU and of the other one")
        assert sorted(xids(events)) == [(0, 13), (1, 79)]
        rebuilt = watcher.registrations
        now[0] += 31.0
        settled(watcher, fake)
        assert watcher.registrations == rebuilt  # every GPU is registered: no more rebuilds
    finally:
        watcher.stop(5)


def test_a_gpu_that_does_not_support_events_is_not_tried_again(nvml: Any, source: Source,
                                                               events: list[DeviceEvent]) -> None:
    fake = nvml("gpu_count: 2\n")
    fake.inject_error("nvmlDeviceRegisterEvents", "NotSupported", gpu=1)
    source.discover()
    watcher = EventWatcher(lambda: source.inventory, events.append, wait_timeout_ms=20, idle_poll_s=0.01,
                           error_backoff_s=0.01, reregister_s=0.01)
    watcher.start()
    try:
        registered(watcher, (0,))
        settled(watcher, fake)
        assert watcher.registrations == 1 and fake.calls["nvmlDeviceRegisterEvents"] == 2
    finally:
        watcher.stop(5)


def test_after_nvml_reinit_it_registers_on_the_new_inventory(nvml: Any, source: Source, watcher: EventWatcher,
                                                             events: list[DeviceEvent]) -> None:
    fake = nvml("gpu_count: 2\n")
    first = source.discover()
    watcher.start()
    registered(watcher, (0, 1))
    fake.inject_error("*", "DriverNotLoaded")  # the driver goes away under the wait
    wait_for(lambda: watcher.registered_gpus == (), DEADLINE_S, "the set to be dropped")
    source.inventory = None  # the sampler noticed and re-initialises
    fake.clear_errors()
    second = source.discover()
    assert second is not first
    wait_for(lambda: watcher.registrations == 2 and watcher.registered_gpus == (0, 1), DEADLINE_S,
             "registration on the new inventory")
    fake.inject_xid(1, 48)
    wait_for(lambda: events, DEADLINE_S, "an event after re-initialisation")
    assert xids(events) == [(1, 48)]
    assert events[0].identity == second.devices[1].identity


def test_when_the_sampler_keeps_its_inventory_it_retries_the_same_one(nvml: Any, source: Source,
                                                                      watcher: EventWatcher) -> None:
    fake = nvml("gpu_count: 1\n")
    source.discover()
    watcher.start()
    registered(watcher, (0,))
    fake.inject_error("nvmlEventSetWait_v2", "DriverNotLoaded")
    wait_for(lambda: watcher.registered_gpus == (), DEADLINE_S, "the set to be dropped")
    fake.clear_errors()
    registered(watcher, (0,))
    assert watcher.registrations >= 2  # the same inventory was registered again


def test_stop_ends_the_thread_and_frees_the_set(nvml: Any, source: Source, events: list[DeviceEvent]) -> None:
    fake = nvml("gpu_count: 2\n")
    source.discover()
    watcher = EventWatcher(lambda: source.inventory, events.append)  # the production wait timeout
    watcher.start()
    registered(watcher, (0, 1))
    assert fake.open_event_sets == 1
    assert watcher.stop() is True
    assert not watcher.running and fake.open_event_sets == 0


def test_a_set_prepared_before_the_thread_runs_keeps_the_xids_raised_meanwhile(
        nvml: Any, source: Source, watcher: EventWatcher, events: list[DeviceEvent]) -> None:
    """The sampler registers right after NVML init (``prepare``), before the watcher's thread runs: Xids
    raised in between are queued in that set and delivered once the thread waits on it."""
    fake = nvml("gpu_count: 2\n")
    watcher.prepare(source.discover())
    fake.inject_xid(1, 79)  # the rest of start-up is still running: nobody waits yet
    watcher.start()
    wait_for(lambda: xids(events) == [(1, 79)], DEADLINE_S, "the Xid raised before the thread ran")
    assert watcher.registrations == 1 and fake.open_event_sets == 1  # the prepared set was adopted, not rebuilt


def test_a_prepared_set_that_nobody_waits_on_is_freed_at_stop(nvml: Any, source: Source,
                                                              watcher: EventWatcher) -> None:
    fake = nvml("gpu_count: 2\n")
    watcher.prepare(source.discover())
    assert fake.open_event_sets == 1
    assert watcher.stop(5) is True
    assert fake.open_event_sets == 0
    watcher.prepare(source.discover())  # a late re-initialisation after stop builds nothing
    assert fake.open_event_sets == 0
