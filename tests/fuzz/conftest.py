"""Hypothesis settings for the fuzz suites: no example database in the repository, no per-example
deadline (this machine is shared and slow; each suite bounds time itself where it matters), and
under CI a fixed seed, so that a run that passed once passes again on the same code."""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

settings.register_profile(
    "fuzz",
    database=None,
    deadline=None,
    max_examples=150,
    derandomize=os.environ.get("CI") == "true",
    suppress_health_check=(HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much),
)
settings.load_profile("fuzz")
