"""The hub: what a source can register, in which order it runs, and what it may call back."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pytest

from exporter.hub import Hub, LabelSets, LabelTransform, SamplerSettings, with_label_sources
from exporter.metrics.catalog import CATALOG
from exporter.metrics.counters import load_counters, parse_counters
from exporter.metrics.render import RenderContext, RenderOptions
from exporter.snapshot import DeviceIdentity, DeviceReading, SamplerStatus, Snapshot

GPU0 = DeviceIdentity(index=0, uuid="GPU-aaaa", pci_bus_id="00000000:18:00.0", minor=0, model="NVIDIA H100")
SNAPSHOT = Snapshot(devices=(DeviceReading(identity=GPU0, values={"DCGM_FI_DEV_GPU_TEMP": 50}),),
                    status=SamplerStatus(nvml_up=True))


def _hub() -> Hub:
    return Hub(load_counters(None), SamplerSettings(1.0, None, 60.0), RenderOptions(hostname="n"))


def _adding(name: str, values: Sequence[str]) -> LabelTransform:
    def add(_identity: DeviceIdentity, _gpu_instance_id: int | None, label_sets: LabelSets) -> LabelSets:
        return [{**labels, name: value} for labels in label_sets for value in values]

    return add


def _label_sets(ctx: RenderContext) -> Sequence[Mapping[str, str]]:
    return ctx.workloads(GPU0, None)


def test_label_sources_transform_each_series_in_install_order_and_none_leaves_it() -> None:
    ctx = RenderContext(snapshot=SNAPSHOT, counters=load_counters(None), options=RenderOptions(hostname="n"))
    sources = [lambda: _adding("rack", ["r1"]), lambda: None, lambda: _adding("job", ["a", "b"])]
    assert _label_sets(with_label_sources(ctx, sources)) == [{"rack": "r1", "job": "a"}, {"rack": "r1", "job": "b"}]
    assert with_label_sources(ctx, [lambda: None]) is ctx  # nothing to add: the render's context as it was


def test_the_attribution_runs_before_the_label_sources_and_there_is_one() -> None:
    hub = _hub()
    hub.add_label_source(lambda: _adding("job", ["a"]))
    hub.set_attribution(lambda ctx: RenderContext(snapshot=ctx.snapshot, counters=ctx.counters, options=ctx.options,
                                                  workloads=lambda _identity, _gi: [{"pod": "p"}]))
    assert _label_sets(hub.render_context()) == [{"pod": "p", "job": "a"}]
    with pytest.raises(ValueError, match="add_label_source"):
        hub.set_attribution(lambda ctx: ctx)


def test_services_start_by_phase_in_install_order_and_stop_in_reverse() -> None:
    hub = _hub()
    calls: list[str] = []
    for name, before_nvml in (("cluster", False), ("fake-gpus", True), ("kubernetes", False)):
        hub.add_service(lambda name=name: calls.append(f"start {name}"),  # type: ignore[misc]
                        lambda name=name: calls.append(f"stop {name}"), before_nvml=before_nvml)  # type: ignore[misc]
    for start, _stop in (*hub.services(before_nvml=True), *hub.services(before_nvml=False)):
        start()
    for stop in hub.stops():
        stop()
    assert calls == ["start fake-gpus", "start cluster", "start kubernetes",
                     "stop kubernetes", "stop fake-gpus", "stop cluster"]


def test_published_snapshots_reach_the_consumers_and_invalidate_the_cache() -> None:
    hub = _hub()
    seen: list[Snapshot] = []
    hub.on_snapshot(seen.append)
    hub.publish_snapshot(SNAPSHOT)
    assert seen == [SNAPSHOT] and hub.cache._dirty.is_set()


def test_new_counters_are_rendered_at_once_and_required_readings_stay_sampled() -> None:
    hub = _hub()
    health = CATALOG.lookup("DCGM_FI_DEV_XID_ERRORS")
    assert health is not None
    hub.require_readings([health])
    counters = parse_counters("DCGM_FI_DEV_POWER_USAGE, gauge, power\n", "test.csv")
    hub.set_counters(counters)
    assert hub.counters is counters and hub.render_context().counters is counters
    plan = hub.sampler._next_plan
    assert plan is not None
    assert [spec.name for spec in plan.specs] == ["DCGM_FI_DEV_POWER_USAGE"]
    assert health in plan.dependencies  # the health gauge's reading survives the new CSV
