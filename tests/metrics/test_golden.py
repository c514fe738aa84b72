"""Golden file: the full exposition for a fixed scenario at a fixed time, byte for byte.

Regenerate after an intended change with ``UPDATE_GOLDEN=1 python -m pytest tests/metrics/test_golden.py``
and review the diff: every changed line is a change users will see.
"""

from __future__ import annotations

import os
import platform
import subprocess
import sys
from pathlib import Path

import pytest

from exporter.composition import health_settings
from exporter.config import Config
from exporter.health.wiring import HealthTelemetry
from exporter.health.xid import XidSource
from exporter.hub import Hub, SamplerSettings
from exporter.metrics.counters import load_counters
from exporter.metrics.exposition import encode_text
from exporter.metrics.render import DEFAULT_BUILDERS, RenderContext, RenderOptions, render
from exporter.nvml.sampler import Sampler
from simulator.fakenvml import installed

REPO = Path(__file__).resolve().parents[2]
GOLDEN = REPO / "tests" / "golden" / "default-scenario.prom"
ALL_ROWS = Path(__file__).resolve().parent.parent / "fixtures" / "health-counters.csv"
WALL_EPOCH = 1_700_000_000.0


def render_default_scenario(monkeypatch: pytest.MonkeyPatch) -> bytes:
    """The default CSV plus every optional row, the health telemetry, one Xid: all families we render."""
    monkeypatch.setattr(platform, "python_version", lambda: "3.11.x")
    now = [119.0]
    counters = load_counters(str(ALL_ROWS))
    hub = Hub(counters, SamplerSettings(1.0, None, 60.0), RenderOptions(hostname="gpu-node-1"))
    health = HealthTelemetry(health_settings(Config()), counters, clock=lambda: now[0])
    health.install(hub)
    with installed("default", lambda: now[0], wall_epoch=WALL_EPOCH):
        sampler = Sampler(counters.field_specs(), 1.0, clock=lambda: now[0], wall_clock=lambda: WALL_EPOCH + now[0],
                          dependencies=hub.readings, on_snapshot=hub.publish_snapshot)
        assert sampler.initialise()
        sampler.run_cycle()
        now[0] = 120.0
        snapshot = sampler.run_cycle()
    health.ledger.record(XidSource(snapshot.devices[2].identity.uuid), 13)
    ctx = RenderContext(snapshot=snapshot, counters=counters, options=RenderOptions(hostname="gpu-node-1"))
    return encode_text(render(ctx, (*DEFAULT_BUILDERS, *hub.families)))


def test_full_exposition_matches_the_golden_file(monkeypatch: pytest.MonkeyPatch) -> None:
    body = render_default_scenario(monkeypatch)
    if os.environ.get("UPDATE_GOLDEN"):
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail("UPDATE_GOLDEN is set under CI=true: the golden test would compare the render with itself")
        GOLDEN.write_bytes(body)
    assert GOLDEN.exists(), "golden file missing: run with UPDATE_GOLDEN=1"
    expected = GOLDEN.read_text(encoding="utf-8").splitlines()
    actual = body.decode("utf-8").splitlines()
    assert actual == expected


RENDER_IN_A_FRESH_INTERPRETER = """
import sys
import pytest
from tests.metrics.test_golden import render_default_scenario
with pytest.MonkeyPatch.context() as monkeypatch:
    sys.stdout.buffer.write(render_default_scenario(monkeypatch))
"""


@pytest.mark.parametrize("hash_seed", ["0", "4242"])
def test_a_fresh_interpreter_renders_the_same_bytes(hash_seed: str) -> None:
    """Set and dict orders change with the string hash seed: the exposition must not."""
    result = subprocess.run([sys.executable, "-c", RENDER_IN_A_FRESH_INTERPRETER], capture_output=True, check=True,
                            cwd=REPO, env={**os.environ, "PYTHONHASHSEED": hash_seed}, timeout=120)
    assert result.stdout == GOLDEN.read_bytes()
