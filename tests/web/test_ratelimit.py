"""The toolkit's rate_limit: a burst, then one request per interval."""

from __future__ import annotations

from exporter.web.ratelimit import TokenBucket


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_burst_then_one_request_per_interval() -> None:
    clock = Clock()
    bucket = TokenBucket(interval_s=0.5, burst=3, clock=clock)
    assert [bucket.allow() for _ in range(4)] == [True, True, True, False]
    clock.now += 0.5
    assert [bucket.allow() for _ in range(2)] == [True, False]
    clock.now += 100
    assert sum(bucket.allow() for _ in range(10)) == 3  # idle time refills up to the burst only
