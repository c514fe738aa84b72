"""The one client of the Prometheus HTTP API (Prometheus, Thanos Query, Mimir): ``report``, ``doctor``
and ``top`` all ask through it, so authentication, TLS, retries and error messages are the same in each.

Why its own client (on urllib3, already a dependency): a month of one-minute points is 43,200
points per series, and every Prometheus-compatible server refuses a range query over 11,000
points per series; large fleets also hit the server's sample limit (Prometheus'
``--query.max-samples``, Mimir's and Thanos' own limits) or its query timeout. So a range query
is cut into chunks of at most ``max_points`` points, a chunk is kept under ``max_samples``
(series x points, learnt from the previous chunk), and a chunk the server refuses as too large
(422 "too many samples", 400 "exceeded maximum resolution", 503/504 timeouts) is halved and
asked again, down to one point.

The rest is what real back ends do to a client:

* a base URL with a path prefix (Mimir ``http://mimir/prometheus``, a Thanos behind a proxy):
  the API paths are appended to it;
* a tenant (``X-Scope-OrgID`` for Mimir/Cortex/Thanos receive), any extra header, basic auth
  (also from ``user:password@`` in the URL) or a bearer token, a CA file or no verification;
* partial answers: ``warnings`` in an answer are collected and shown in the report; Thanos is
  asked for ``partial_response=false`` unless ``allow_partial`` (a bill should not silently miss
  a store);
* transient failures (connection refused/reset, 429, 502, 503 unavailable) are retried with
  jittered exponential backoff, honouring ``Retry-After``; authentication, a wrong URL and a
  bad query fail at once with the server's own message.

Every error is a ``PrometheusError`` whose text a user can act on, and none shows a secret: the
credentials of a ``user:password@`` URL are cut off before the URL is kept (``split_url``), and
``redacted_url`` is how any URL given by a user is shown.

The same ``Connection`` reaches an exporter's ``/metrics`` (``top --exporter``): ``http_pool`` and
``request_headers`` are the TLS and authentication of both.
"""

from __future__ import annotations

import base64
import json
import random
import time
import urllib.parse
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import urllib3

from exporter.backoff import Backoff, BackoffPolicy, retry_after_seconds

RETRY_BACKOFF = BackoffPolicy(initial_s=0.5, max_s=30.0, retry_after_max_s=60.0)  # a Retry-After waits 60 s at most
PROMETHEUS_MAX_POINTS = 11_000  # Prometheus' hard limit on points per series in one range query
_TOO_LARGE_HINTS = ("too many samples", "maximum resolution", "exceeded the limit", "exceeds the limit",
                    "max number of", "exceeded maximum", "query time range exceeds", "limit exceeded",
                    "too many chunks", "too large", "query timed out", "timeout")


TLS_HINT = "use --ca-file, or --insecure-skip-verify for a test server"
AUTH_HINT = "check --bearer-token-file, --basic-auth-user/--basic-auth-password-file or --tenant"


class PrometheusError(RuntimeError):
    """The server could not be asked, or it refused; the message says which and what to check."""


class _TooLargeError(PrometheusError):
    """The server refused a query for its size or time: a smaller chunk may pass."""


@dataclass(frozen=True)
class Connection:
    """Where and how to reach the Prometheus-compatible API."""

    url: str
    headers: Mapping[str, str] = field(default_factory=dict)
    tenant: str | None = None
    basic_auth: tuple[str, str] | None = None
    bearer_token: str | None = None
    ca_file: str | None = None
    insecure_skip_verify: bool = False
    timeout_s: float = 120.0
    retries: int = 4
    allow_partial: bool = False
    user_agent: str = "gpu-pod-exporter"
    auth_hint: str = AUTH_HINT  # what a 401/403 tells the user to check: the flags of the command asking


@dataclass(frozen=True)
class Series:
    """One series of a range query: its labels and (timestamp, value) points in time order."""

    labels: Mapping[str, str]
    points: tuple[tuple[float, float], ...]


@dataclass
class QueryStats:
    """What the client did, for the report's footer and for tests."""

    requests: int = 0
    retries: int = 0
    shrinks: int = 0
    max_points_per_request: int = 0


def split_url(url: str) -> tuple[str, tuple[str, str] | None]:
    """The URL without ``user:password@`` and those credentials (None when there are none)."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in {"http", "https"} or not parts.hostname:
        raise ValueError(f"invalid URL {redacted_url(url)!r}: expected http(s)://host[:port][/path prefix]")
    credentials = None
    netloc = parts.netloc
    if parts.username is not None:
        credentials = (urllib.parse.unquote(parts.username), urllib.parse.unquote(parts.password or ""))
        netloc = netloc.rsplit("@", 1)[1]
    return urllib.parse.urlunsplit((parts.scheme, netloc, parts.path.rstrip("/"), "", "")), credentials


def redacted_url(url: str) -> str:
    """``url`` as it may be shown (titles, errors, logs): a password in it replaced by ``***``."""
    parts = urllib.parse.urlsplit(url)
    if "@" not in parts.netloc:
        return url
    userinfo, _, host = parts.netloc.rpartition("@")
    user = userinfo.split(":", 1)[0]
    shown = f"{user}:***@{host}" if ":" in userinfo else f"{user}@{host}"
    return urllib.parse.urlunsplit((parts.scheme, shown, parts.path, parts.query, parts.fragment))


def request_headers(connection: Connection, url_credentials: tuple[str, str] | None = None) -> dict[str, str]:
    """The headers every request of ``connection`` carries: tenant, extra headers, basic auth or bearer token."""
    headers = {"Accept": "application/json", "User-Agent": connection.user_agent}
    headers.update(connection.headers)
    if connection.tenant:
        headers["X-Scope-OrgID"] = connection.tenant
    credentials = connection.basic_auth or url_credentials
    if credentials is not None:
        token = base64.b64encode(f"{credentials[0]}:{credentials[1]}".encode()).decode("ascii")
        headers["Authorization"] = f"Basic {token}"
    if connection.bearer_token:
        headers["Authorization"] = f"Bearer {connection.bearer_token}"
    return headers


def http_pool(connection: Connection) -> urllib3.PoolManager:
    """A connection pool verifying the server as ``connection`` says (its CA file, or not at all)."""
    if connection.insecure_skip_verify:
        urllib3.disable_warnings(urllib3.exceptions.InsecureRequestWarning)
        return urllib3.PoolManager(cert_reqs="CERT_NONE", maxsize=2)
    if connection.ca_file:
        return urllib3.PoolManager(cert_reqs="CERT_REQUIRED", ca_certs=connection.ca_file, maxsize=2)
    return urllib3.PoolManager(maxsize=2)


class PrometheusClient:
    """Range queries and label values against one Prometheus-compatible API.

    ``sleep``, ``jitter`` and ``clock`` are injectable so that tests of the retry logic take no time.
    Retries are paced by the package's one backoff (``exporter.backoff``: one attempt per window of
    0.5 s doubling to 30 s, full jitter, a ``Retry-After`` moves the window behind it).
    """

    def __init__(self, connection: Connection, *, max_points: int = PROMETHEUS_MAX_POINTS,
                 max_samples: int = 5_000_000, sleep: Callable[[float], None] = time.sleep,
                 jitter: Callable[[], float] = random.random, clock: Callable[[], float] = time.monotonic,
                 pool: urllib3.PoolManager | None = None) -> None:
        if max_points < 1 or max_samples < 1:
            raise ValueError("max_points and max_samples must be at least 1")
        self.base_url, url_credentials = split_url(connection.url)
        self.connection = connection
        self.max_points = min(max_points, PROMETHEUS_MAX_POINTS)
        self.max_samples = max_samples
        self.warnings: list[str] = []
        self.stats = QueryStats()
        self._sleep = sleep
        self._jitter = jitter
        self._clock = clock
        self._headers = request_headers(connection, url_credentials)
        self._pool = pool or http_pool(connection)

    # ----------------------------------------------------------------------------- public API
    def query_range(self, expr: str, first: float, last: float, step: float) -> list[Series]:
        """Points at ``first``, ``first + step``, ... up to ``last`` (both included), chunked.

        Series are merged across chunks by their label set and returned sorted by labels.
        """
        if step <= 0 or last < first:
            raise ValueError("query_range needs step > 0 and last >= first")
        total = round((last - first) / step) + 1
        chunk = self.max_points
        merged: dict[tuple[tuple[str, str], ...], list[tuple[float, float]]] = {}
        index = 0
        while index < total:
            count = min(chunk, total - index)
            start = first + index * step
            end = first + (index + count - 1) * step
            try:
                result = self._range_once(expr, start, end, step)
            except _TooLargeError as error:
                if count == 1:
                    raise PrometheusError(f"{error} (even for a single point: raise the server's limit or "
                                          "narrow the report with --cluster)") from None
                chunk = max(1, count // 2)
                self.stats.shrinks += 1
                continue
            self.stats.max_points_per_request = max(self.stats.max_points_per_request, count)
            for item in result:
                key = tuple(sorted(item.labels.items()))
                merged.setdefault(key, []).extend(item.points)
            if result:
                chunk = max(1, min(chunk, self.max_samples // len(result)))
            index += count
        return [Series(dict(key), tuple(points)) for key, points in sorted(merged.items())]

    def label_values(self, label: str, matchers: Sequence[str], start: float, end: float) -> list[str]:
        """Values of ``label`` on series matching any of ``matchers`` within [start, end]."""
        fields = [("match[]", matcher) for matcher in matchers]
        fields += [("start", _timestamp(start)), ("end", _timestamp(end))]
        data = self._call("GET", f"label/{urllib.parse.quote(label, safe='')}/values", fields,
                          f"label values of {label}")
        return sorted(str(value) for value in data or [])

    def query(self, expr: str, at: float | None = None) -> list[dict[str, Any]]:
        """An instant query's result as the API gives it (``metric`` and ``value`` per item)."""
        fields = [("query", expr)] + ([("time", _timestamp(at))] if at is not None else [])
        data = self._call("POST", "query", fields, expr)
        return list(data.get("result") or ()) if isinstance(data, dict) else []

    def get(self, endpoint: str, **params: str) -> Any:
        """The ``data`` of ``GET /api/v1/<endpoint>`` (``status/buildinfo``, ``targets``, ``rules``, ...)."""
        return self._call("GET", endpoint, list(params.items()), endpoint)

    # --------------------------------------------------------------------------------- internals
    def _range_once(self, expr: str, start: float, end: float, step: float) -> list[Series]:
        fields = [("query", expr), ("start", _timestamp(start)), ("end", _timestamp(end)),
                  ("step", _timestamp(step))]
        data = self._call("POST", "query_range", fields, expr)
        if not isinstance(data, dict) or data.get("resultType") != "matrix":
            raise PrometheusError(f"unexpected answer to a range query (no matrix) for {expr}")
        series = []
        for item in data.get("result", []):
            points = tuple((float(t), float(v)) for t, v in item.get("values", []) if v not in {"NaN", "nan"})
            series.append(Series(dict(item.get("metric", {})), points))
        return series

    def _call(self, method: str, endpoint: str, fields: list[tuple[str, str]], what: str) -> Any:
        fields = [*fields, ("partial_response", "true" if self.connection.allow_partial else "false")]
        url = f"{self.base_url}/api/v1/{endpoint}"
        attempt = 0
        backoff = Backoff(RETRY_BACKOFF, self._jitter)
        while True:
            self.stats.requests += 1
            try:
                response = self._send(method, url, fields)
            except urllib3.exceptions.SSLError as error:
                raise PrometheusError(f"TLS error talking to {self.base_url}: {_reason(error)} ({TLS_HINT})") from None
            except urllib3.exceptions.HTTPError as error:
                failure = f"cannot reach {self.base_url}: {_reason(error)}"
                delay = None
            else:
                body = _json_body(response.data)
                if response.status == 200 and body.get("status") == "success":
                    self._note_warnings(body)
                    return body.get("data")
                failure, delay = self._classify(response, body, url, what)
            if attempt >= self.connection.retries:
                raise PrometheusError(f"{failure} (gave up after {attempt + 1} attempts)")
            attempt += 1
            self.stats.retries += 1
            self._sleep(backoff.failed(self._clock(), delay))

    def _classify(self, response: Any, body: Mapping[str, Any], url: str, what: str) -> tuple[str, float | None]:
        """A retryable failure's message and Retry-After; raises for failures a retry cannot fix."""
        status = int(response.status)
        detail = str(body.get("error") or response.data[:300].decode("utf-8", "replace").strip() or "no body")
        error_type = str(body.get("errorType") or "")
        lowered = detail.lower()
        if status in {401, 403}:
            raise PrometheusError(f"{url}: HTTP {status} ({detail}): {self.connection.auth_hint}")
        if status == 404:
            raise PrometheusError(f"{url}: HTTP 404: no Prometheus API here; give the URL the API lives "
                                  "under (Mimir: http://<host>/prometheus; Thanos Query: its HTTP port)")
        if status in {400, 422} and any(hint in lowered for hint in _TOO_LARGE_HINTS):
            raise _TooLargeError(f"Prometheus refused the query as too large (HTTP {status}: {detail})")
        if status in {503, 504} and (error_type == "timeout" or "timeout" in lowered or "timed out" in lowered
                                     or status == 504):
            raise _TooLargeError(f"the query timed out (HTTP {status}: {detail})")
        if status in {400, 422} or (400 <= status < 500 and status != 429):
            raise PrometheusError(f"Prometheus rejected the query (HTTP {status} {error_type}: {detail})\n"
                                  f"  query: {what}")
        if status == 200:  # a 200 with status "error" is not retried either
            raise PrometheusError(f"Prometheus answered an error: {detail}\n  query: {what}")
        headers = response.headers if response.headers is not None else {}
        return f"{url}: HTTP {status} ({detail})", retry_after_seconds(headers.get("Retry-After"))

    def _note_warnings(self, body: Mapping[str, Any]) -> None:
        for warning in body.get("warnings") or []:
            text = str(warning)
            if text not in self.warnings:
                self.warnings.append(text)

    def _send(self, method: str, url: str, fields: list[tuple[str, str]]) -> Any:
        """One request, form-encoded (POST keeps long PromQL out of URLs and proxy logs)."""
        timeout = urllib3.Timeout(total=self.connection.timeout_s)
        encoded = urllib.parse.urlencode(fields)
        if method == "POST":
            headers = {**self._headers, "Content-Type": "application/x-www-form-urlencoded"}
            return self._pool.request("POST", url, body=encoded, headers=headers, timeout=timeout, retries=False)
        return self._pool.request("GET", f"{url}?{encoded}", headers=self._headers, timeout=timeout, retries=False)


def _timestamp(value: float) -> str:
    return f"{value:.3f}".rstrip("0").rstrip(".")


def _json_body(data: bytes) -> dict[str, Any]:
    try:
        body = json.loads(data)
    except (ValueError, UnicodeDecodeError):
        return {}
    return body if isinstance(body, dict) else {}


def _reason(error: Exception) -> str:
    reason = getattr(error, "reason", None)
    return str(reason or error)
