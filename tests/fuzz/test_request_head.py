"""The HTTP request head: any bytes yield a RequestHead or a HeadError with the status to answer."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from exporter.web.request import MAX_HEAD_BYTES, HeadError, RequestHead, parse_head
from tests.fuzz.inputs import within

token = st.text(alphabet="!#$%&'*+-.^_`|~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz", min_size=1,
                max_size=12)
header = st.tuples(st.one_of(token, st.text(max_size=12)), st.text(max_size=60)).map(
    lambda pair: f"{pair[0]}: {pair[1]}")
request_line = st.tuples(st.one_of(st.sampled_from(["GET", "HEAD", "POST", "BREW"]), st.text(max_size=8)),
                         st.one_of(st.sampled_from(["/metrics", "/health", "*", "http://h/metrics?x"]),
                                   st.text(max_size=40)),
                         st.one_of(st.sampled_from(["HTTP/1.0", "HTTP/1.1", "HTTP/2.0", "HTTP/1"]),
                                   st.text(max_size=10))).map(" ".join)
heads = st.one_of(
    st.tuples(request_line, st.lists(header, max_size=8)).map(
        lambda parts: ("\r\n".join([parts[0], *parts[1]]) + "\r\n\r\n").encode("utf-8", "surrogatepass")),
    st.binary(max_size=300),
    st.just(b"GET / HTTP/1.1\r\n" + b"X: y\r\n" * 200 + b"\r\n"),
    st.just(b"GET /" + b"a" * (MAX_HEAD_BYTES + 10) + b" HTTP/1.1\r\n\r\n"),
)


@given(heads)
def test_any_head_is_parsed_or_refused_with_a_status(raw: bytes) -> None:
    try:
        head = within(2, lambda: parse_head(raw))
    except HeadError as exc:
        assert exc.status in (400, 414, 431, 505)
        assert "\n" not in exc.message
        return
    assert isinstance(head, RequestHead)
    assert head.version[0] == 1 and head.path
    for name, value in head.headers.items():
        assert name == name.lower() and "\r" not in value and "\n" not in value


def test_what_prometheus_sends_is_understood() -> None:
    head = parse_head(b"GET /metrics HTTP/1.1\r\nHost: node:9400\r\nAccept: application/openmetrics-text\r\n"
                      b"Accept-Encoding: gzip\r\nAuthorization: Basic dTpw\r\n\r\n")
    assert (head.method, head.path, head.version) == ("GET", "/metrics", (1, 1))
    assert head.headers.get("authorization") == "Basic dTpw" and head.headers.get("ACCEPT-ENCODING") == "gzip"
