"""The limits: per-node cooldown, at most N nodes changed per rolling hour, at most X % of GPU nodes tainted."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from exporter.remediate.breaker import Breaker
from exporter.remediate.policy import Limits

T0 = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)


def check(breaker: Breaker, node: str, at: datetime, *, restricting: bool = True, last: datetime | None = None,
          tainted_after: int = 1, gpu_nodes: int = 100) -> tuple[bool, str]:
    verdict = breaker.check(node, at, restricting=restricting, last_transition=last, tainted_after=tainted_after,
                            gpu_nodes=gpu_nodes)
    return verdict.allowed, verdict.limit


def test_at_most_n_distinct_nodes_change_in_a_rolling_hour() -> None:
    breaker = Breaker(Limits(max_nodes_per_hour=2))
    for minute, node in enumerate(("a", "b")):
        assert check(breaker, node, T0 + timedelta(minutes=minute)) == (True, "")
        breaker.record(node, T0 + timedelta(minutes=minute))
    assert check(breaker, "c", T0 + timedelta(minutes=5)) == (False, "max_nodes_per_hour")
    assert check(breaker, "a", T0 + timedelta(minutes=5), restricting=False) == (True, "")  # counted once already
    verdict = breaker.check("c", T0 + timedelta(minutes=5), restricting=True, last_transition=None, tainted_after=1,
                            gpu_nodes=100)
    assert verdict.retry_at == T0 + timedelta(hours=1)
    assert "2 nodes changed in the last hour (limit max_nodes_per_hour=2)" in verdict.reason
    assert check(breaker, "c", T0 + timedelta(minutes=60)) == (True, "")  # "a" left the window


def test_a_node_changes_again_only_after_the_cooldown() -> None:
    breaker = Breaker(Limits(cooldown_s=600))
    verdict = breaker.check("a", T0 + timedelta(minutes=9), restricting=False, last_transition=T0, tainted_after=0,
                            gpu_nodes=10)
    assert (verdict.allowed, verdict.limit, verdict.retry_at) == (False, "cooldown", T0 + timedelta(minutes=10))
    assert check(breaker, "a", T0 + timedelta(minutes=10), last=T0) == (True, "")


def test_at_most_a_share_of_gpu_nodes_is_tainted_and_one_node_always_can_be() -> None:
    breaker = Breaker(Limits(max_tainted_percent=10))
    assert check(breaker, "a", T0, tainted_after=2, gpu_nodes=20) == (True, "")
    assert check(breaker, "a", T0, tainted_after=3, gpu_nodes=20) == (False, "max_tainted_percent")
    assert check(breaker, "a", T0, tainted_after=1, gpu_nodes=3) == (True, "")  # 10 % of 3 rounds to 0: still one
    assert check(breaker, "a", T0, tainted_after=2, gpu_nodes=3) == (False, "max_tainted_percent")
    assert check(breaker, "a", T0, restricting=False, tainted_after=9, gpu_nodes=3) == (True, "")  # untaints pass
