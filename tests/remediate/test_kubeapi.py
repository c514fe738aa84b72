"""The write path's retry policy: transient failures retried with jittered backoff, the rest raised at once."""

from __future__ import annotations

import json
import random
import threading
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from exporter.backoff import BackoffPolicy
from exporter.remediate.kubeapi import ApiConflictError, ApiError, KubeApi, classify


class Response:
    def __init__(self, data: bytes) -> None:
        self.data = data


class ScriptedCore:
    """Answers ``read_node`` from a script of exceptions and bodies."""

    def __init__(self, *script: Any) -> None:
        self.script = list(script)
        self.calls = 0

    def read_node(self, name: str, **_: Any) -> Response:
        self.calls += 1
        step = self.script.pop(0)
        if isinstance(step, BaseException):
            raise step
        return Response(step)


def api_exception(status: int, message: str = "") -> ApiException:
    error = ApiException(status=status, reason="Reason")
    error.body = json.dumps({"message": message}).encode() if message else None
    return error


def kube(core: ScriptedCore, attempts: int = 4) -> KubeApi:
    return KubeApi(core, BackoffPolicy(initial_s=0.001, max_s=0.002), attempts=attempts,
                   random_fraction=random.Random(1).random)


def test_transient_failures_are_retried_until_an_answer() -> None:
    core = ScriptedCore(api_exception(503), api_exception(429), ConnectionResetError("reset"), b'{"kind": "Node"}')
    assert kube(core).get_node("n") == {"kind": "Node"}
    assert core.calls == 4


def test_retries_stop_after_the_attempts_with_the_last_reason() -> None:
    core = ScriptedCore(*(api_exception(503, "etcd is slow") for _ in range(3)))
    with pytest.raises(ApiError, match=r"read node: giving up after 3 attempts: etcd is slow") as caught:
        kube(core, attempts=3).get_node("n")
    assert caught.value.status == 503 and core.calls == 3


@pytest.mark.parametrize(("status", "kind"), [(409, ApiConflictError), (403, ApiError), (404, ApiError),
                                              (422, ApiError)])
def test_other_answers_are_raised_at_once(status: int, kind: type[ApiError]) -> None:
    core = ScriptedCore(api_exception(status, "nodes is forbidden"))
    with pytest.raises(kind) as caught:
        kube(core).get_node("n")
    assert caught.value.status == status and core.calls == 1
    assert "nodes is forbidden" in str(caught.value)


def test_a_stop_request_ends_the_waiting() -> None:
    stop = threading.Event()
    stop.set()
    core = ScriptedCore(api_exception(503), b"{}")
    with pytest.raises(ApiError, match="stopped while retrying"):
        KubeApi(core, BackoffPolicy(initial_s=10, max_s=10), stop=stop).get_node("n")


class RecordedWaits(threading.Event):
    """A stop event that is never set and records how long each retry would wait."""

    def __init__(self) -> None:
        super().__init__()
        self.waits: list[float] = []

    def wait(self, timeout: float | None = None) -> bool:
        self.waits.append(float(timeout or 0.0))
        return False


def test_waits_follow_the_shared_backoff_windows_and_honour_retry_after() -> None:
    """One attempt per window (1, 2, 4, 8, 8 s: the shared policy's full jitter, here at its middle), and a
    429's Retry-After pushes the window behind it, as for every retrying client of the package."""
    throttled = api_exception(429, "too many requests")
    throttled.headers = {"Retry-After": "30"}
    core = ScriptedCore(api_exception(503), api_exception(503), throttled, api_exception(503), b"{}")
    waits = RecordedWaits()
    now = [100.0]

    def clock() -> float:
        return now[0]

    api = KubeApi(core, BackoffPolicy(initial_s=1, max_s=8), waits, attempts=6, random_fraction=lambda: 0.5,
                  clock=clock)
    assert api.get_node("n") == {}
    # window 1 [100, 101), window 2 [101, 103), window 3 starts at the Retry-After: [130, 134), window 4 [134, 142)
    assert waits.waits == [0.5, 2.0, 32.0, 38.0]


def test_anything_unexpected_becomes_an_error_without_a_status() -> None:
    assert classify(ValueError("boom")).status == 0
    core = ScriptedCore(b"<html>")
    with pytest.raises(ApiError, match="not JSON"):
        kube(core).get_node("n")
    assert core.calls == 1
