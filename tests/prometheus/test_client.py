"""The Prometheus client against a scripted HTTP server: chunking, shrinking, retries, auth, prefixes.

The server answers like Prometheus, Thanos or Mimir do (status codes and JSON bodies from their
HTTP API); each test scripts the answers and then checks what the client sent and returned.
"""

from __future__ import annotations

import json
import urllib.parse
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import pytest

from exporter.prometheus.client import Connection, PrometheusClient, PrometheusError, redacted_url, split_url
from tests.support.http import QuietHandler, serving
from tests.support.ports import free_port


@dataclass
class Request:
    method: str
    path: str
    headers: dict[str, str]
    params: dict[str, list[str]]


@dataclass
class Answer:
    status: int
    body: dict[str, Any]
    headers: dict[str, str] = field(default_factory=dict)


Script = Callable[[Request], Answer]


@contextmanager
def server(script: Script) -> Iterator[tuple[str, list[Request]]]:
    requests: list[Request] = []

    class Handler(QuietHandler):
        def handle_any(self) -> None:
            parts = urllib.parse.urlsplit(self.path)
            params = urllib.parse.parse_qs(parts.query)
            if self.command == "POST":
                length = int(self.headers.get("Content-Length", "0"))
                params.update(urllib.parse.parse_qs(self.rfile.read(length).decode()))
            request = Request(self.command, parts.path, dict(self.headers.items()), params)
            requests.append(request)
            answer = script(request)
            self.answer(answer.status, json.dumps(answer.body).encode(), "application/json", answer.headers)

        do_GET = handle_any
        do_POST = handle_any

    with serving(Handler) as http:
        yield f"http://127.0.0.1:{http.server_address[1]}", requests


def matrix(request: Request, series: int = 1) -> Answer:
    """A range-query answer: ``series`` series, value = timestamp, at every requested point."""
    start, end, step = (float(request.params[k][0]) for k in ("start", "end", "step"))
    points = round((end - start) / step) + 1
    result = [{"metric": {"team": f"t{i}"}, "values": [[start + k * step, str(start + k * step)]
                                                       for k in range(points)]} for i in range(series)]
    return Answer(200, {"status": "success", "data": {"resultType": "matrix", "result": result}})


def points_of(request: Request) -> int:
    start, end, step = (float(request.params[k][0]) for k in ("start", "end", "step"))
    return round((end - start) / step) + 1


def client(url: str, **kwargs: Any) -> tuple[PrometheusClient, list[float]]:
    sleeps: list[float] = []
    connection_kwargs = {k: kwargs.pop(k) for k in list(kwargs) if k in Connection.__dataclass_fields__}
    return PrometheusClient(Connection(url, **connection_kwargs), sleep=sleeps.append, jitter=lambda: 0.5,
                            clock=lambda: sum(sleeps), **kwargs), sleeps


def test_a_month_at_one_minute_is_cut_under_11000_points_and_merged_without_gaps_or_overlap() -> None:
    with server(matrix) as (url, requests):
        prometheus, _ = client(url)
        first, step = 1_700_000_000.0, 60.0
        last = first + 43_199 * step  # 30 days of minutes: 43,200 points
        [series] = prometheus.query_range("up", first, last, step)
    assert all(points_of(r) <= 11_000 for r in requests)
    assert len(requests) == 4
    times = [t for t, _ in series.points]
    assert times == [first + k * step for k in range(43_200)]
    assert all(r.method == "POST" and r.path == "/api/v1/query_range" for r in requests)
    assert requests[0].params["query"] == ["up"] and requests[0].params["partial_response"] == ["false"]


def test_max_samples_limits_series_times_points_per_answer() -> None:
    with server(lambda r: matrix(r, series=50)) as (url, requests):
        prometheus, _ = client(url, max_samples=10_000)
        result = prometheus.query_range("x", 0.0, 1999.0, 1.0)
    assert [points_of(r) for r in requests][1:] == [200] * ((2000 - points_of(requests[0])) // 200)
    assert len(result) == 50 and all(len(s.points) == 2000 for s in result)


def test_a_query_refused_as_too_large_is_halved_until_it_passes() -> None:
    def script(request: Request) -> Answer:
        if points_of(request) > 3000:
            return Answer(422, {"status": "error", "errorType": "execution",
                                "error": "query processing would load too many samples into memory in query execution"})
        return matrix(request)

    with server(script) as (url, requests):
        prometheus, _ = client(url)
        [series] = prometheus.query_range("x", 0.0, 9999.0, 1.0)
    assert len(series.points) == 10_000
    assert [points_of(r) for r in requests][:3] == [10_000, 5_000, 2_500]
    assert prometheus.stats.shrinks == 2


@pytest.mark.parametrize(("status", "body"), [
    (400, {"status": "error", "errorType": "bad_data",
           "error": "exceeded maximum resolution of 11,000 points per timeseries. Try decreasing the query "
                    "resolution"}),
    (503, {"status": "error", "errorType": "timeout", "error": "query timed out in expression evaluation"}),
    (422, {"status": "error", "errorType": "execution",
           "error": "expanding series: the query time range exceeds the limit (query length: 721h, limit: 720h)"}),
])
def test_resolution_timeout_and_length_limits_shrink_the_chunk(status: int, body: dict[str, Any]) -> None:
    def script(request: Request) -> Answer:
        return Answer(status, body) if points_of(request) > 100 else matrix(request)

    with server(script) as (url, _):
        prometheus, sleeps = client(url, max_points=400)
        [series] = prometheus.query_range("x", 0.0, 999.0, 1.0)
    assert len(series.points) == 1000
    assert sleeps == []  # shrinking is not a retry: no waiting


def test_a_single_point_still_too_large_is_an_error_that_says_what_to_do() -> None:
    answer = Answer(422, {"status": "error", "errorType": "execution", "error": "too many samples"})
    with server(lambda r: answer) as (url, _):
        prometheus, _ = client(url)
        with pytest.raises(PrometheusError, match=r"even for a single point.*--cluster"):
            prometheus.query_range("x", 0.0, 3.0, 1.0)


def test_unavailable_is_retried_with_jittered_backoff_and_retry_after() -> None:
    answers = [Answer(503, {"status": "error", "errorType": "unavailable", "error": "TSDB not ready"}),
               Answer(429, {}, {"Retry-After": "7"}), Answer(502, {})]

    def script(request: Request) -> Answer:
        return answers.pop(0) if answers else matrix(request)

    with server(script) as (url, requests):
        prometheus, sleeps = client(url)
        prometheus.query_range("x", 0.0, 1.0, 1.0)
    assert len(requests) == 4
    # The shared backoff, its clock the sum of the sleeps, jitter at the middle of each window: window 1 is
    # [0, 0.5); the 429 at 0.25 s puts window 2 (1 s long) behind its Retry-After, [7.25, 8.25); window 3
    # (2 s) follows it: [8.25, 10.25).
    assert sleeps == [0.25, 7.5, 1.5]
    assert prometheus.stats.retries == 3


@pytest.mark.parametrize(("header", "first_sleep"), [
    ("3600", 60.25), ("-5", 0.25), ("Wed, 21 Oct 2015 07:28:00 GMT", 0.25), ("nan", 0.25)])
def test_retry_after_is_read_by_the_one_parser_and_cut_to_a_minute(header: str, first_sleep: float) -> None:
    """An hour's Retry-After (a broken proxy) waits a minute (the window [60, 60.5), jitter at its middle); one
    that is not a number of seconds is ignored and the backoff's own first window, [0, 0.5), paces the retry."""
    answers = [Answer(429, {}, {"Retry-After": header})]

    def script(request: Request) -> Answer:
        return answers.pop(0) if answers else matrix(request)

    with server(script) as (url, _requests):
        prometheus, sleeps = client(url)
        prometheus.query_range("x", 0.0, 1.0, 1.0)
    assert sleeps == [first_sleep]


def test_a_server_that_stays_down_gives_up_after_the_retries() -> None:
    with server(lambda r: Answer(503, {"status": "error", "errorType": "unavailable", "error": "overloaded"})) \
            as (url, requests):
        prometheus, sleeps = client(url, retries=2)
        with pytest.raises(PrometheusError, match=r"HTTP 503 \(overloaded\) \(gave up after 3 attempts\)"):
            prometheus.query_range("x", 0.0, 1.0, 1.0)
    assert len(requests) == 3 and len(sleeps) == 2


def test_nothing_listening_is_retried_then_named() -> None:
    prometheus, sleeps = client(f"http://127.0.0.1:{free_port()}", retries=1)
    with pytest.raises(PrometheusError, match=r"cannot reach http://127\.0\.0\.1:.*gave up after 2 attempts"):
        prometheus.query_range("x", 0.0, 1.0, 1.0)
    assert len(sleeps) == 1


@pytest.mark.parametrize(("status", "message"), [
    (401, "check --bearer-token-file"),
    (403, "check --bearer-token-file"),
    (404, "no Prometheus API here.*Mimir: http://<host>/prometheus"),
    (400, "(?s)rejected the query.*bad_data: parse error.*query: x"),
])
def test_errors_a_retry_cannot_fix_fail_at_once(status: int, message: str) -> None:
    body = {"status": "error", "errorType": "bad_data", "error": "parse error"}
    with server(lambda r: Answer(status, body)) as (url, requests):
        prometheus, sleeps = client(url)
        with pytest.raises(PrometheusError, match=message):
            prometheus.query_range("x", 0.0, 1.0, 1.0)
    assert len(requests) == 1 and sleeps == []


def test_path_prefix_tenant_headers_and_basic_auth_from_the_url() -> None:
    def script(request: Request) -> Answer:
        if "/label/" in request.path:
            return Answer(200, {"status": "success", "data": ["west", "east"]})
        return matrix(request)

    with server(script) as (url, requests):
        base = url.replace("http://", "http://alice:s%40cret@") + "/prometheus/"
        prometheus, _ = client(base, tenant="team-a", headers={"X-Extra": "1"})
        prometheus.query_range("x", 0.0, 1.0, 1.0)
        clusters = prometheus.label_values("cluster", ['up{job="a"}', "DCGM_EXP_GPU_ALLOCATED"], 0.0, 10.0)
    assert clusters == ["east", "west"]
    query, labels = requests
    assert query.path == "/prometheus/api/v1/query_range"
    assert query.headers["X-Scope-OrgID"] == "team-a" and query.headers["X-Extra"] == "1"
    assert query.headers["Authorization"] == "Basic YWxpY2U6c0BjcmV0"  # alice:s@cret
    assert labels.method == "GET" and labels.path == "/prometheus/api/v1/label/cluster/values"
    assert labels.params["match[]"] == ['up{job="a"}', "DCGM_EXP_GPU_ALLOCATED"]
    assert prometheus.base_url.endswith("/prometheus") and "alice" not in prometheus.base_url


def test_bearer_token_and_partial_responses_are_collected_as_warnings() -> None:
    def script(request: Request) -> Answer:
        answer = matrix(request)
        answer.body["warnings"] = ["receiver store-1 unavailable: partial data"]
        return answer

    with server(script) as (url, requests):
        prometheus, _ = client(url, bearer_token="t0k3n", allow_partial=True)
        prometheus.query_range("x", 0.0, 1.0, 1.0)
        prometheus.query_range("y", 0.0, 1.0, 1.0)
    assert requests[0].headers["Authorization"] == "Bearer t0k3n"
    assert requests[0].params["partial_response"] == ["true"]
    assert prometheus.warnings == ["receiver store-1 unavailable: partial data"]


def test_nan_points_are_dropped() -> None:
    def script(request: Request) -> Answer:
        return Answer(200, {"status": "success", "data": {"resultType": "matrix", "result": [
            {"metric": {}, "values": [[0, "1"], [1, "NaN"], [2, "3"]]}]}})

    with server(script) as (url, _):
        prometheus, _ = client(url)
        [series] = prometheus.query_range("x", 0.0, 2.0, 1.0)
    assert series.points == ((0.0, 1.0), (2.0, 3.0))


@pytest.mark.parametrize("url", ["prometheus:9090", "ftp://x", "http://", "http:///path"])
def test_urls_without_scheme_or_host_are_refused(url: str) -> None:
    with pytest.raises(ValueError, match="invalid URL"):
        split_url(url)


@pytest.mark.parametrize(("url", "shown"), [
    ("https://alice:s3cret@thanos:10902/prefix?x=1", "https://alice:***@thanos:10902/prefix?x=1"),
    ("http://alice@prometheus:9090", "http://alice@prometheus:9090"),
    ("http://a%40b:p%3Aw@[::1]:9090", "http://a%40b:***@[::1]:9090"),
    ("http://prometheus:9090", "http://prometheus:9090"),
    ("not a url", "not a url"),
])
def test_a_url_is_shown_without_its_password(url: str, shown: str) -> None:
    assert redacted_url(url) == shown


def test_an_invalid_url_with_a_password_is_named_without_it() -> None:
    with pytest.raises(ValueError, match=r"invalid URL 'ftp://alice:\*\*\*@host'") as error:
        split_url("ftp://alice:s3cret@host")
    assert "s3cret" not in str(error.value)
