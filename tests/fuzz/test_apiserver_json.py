"""API server JSON: any bytes are an object the watch keeps, or an error the watch loop reports.

The list/watch loop turns ValueError, TypeError, AttributeError and KeyError from parsing into
"malformed answer" (one log line per change, relist after a pause); anything else it reports as a
failure too, but only these are expected from parsing.
"""

from __future__ import annotations

import contextlib
import json
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from exporter.kube.metadata import namespace_from_json, pod_from_json
from tests.fuzz.inputs import within

MALFORMED = (ValueError, TypeError, AttributeError, KeyError, RecursionError)

json_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), st.text(max_size=20)),
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=10), inner, max_size=4)),
    max_leaves=20)


def pod_like(value: Any) -> st.SearchStrategy[Any]:
    return st.fixed_dictionaries({}, optional={
        "metadata": st.one_of(json_values, st.fixed_dictionaries({}, optional={
            "name": json_values, "namespace": json_values, "uid": json_values,
            "labels": st.one_of(json_values, st.dictionaries(st.text(max_size=10), json_values, max_size=3))})),
        "status": st.one_of(json_values, st.fixed_dictionaries({}, optional={
            "phase": json_values,
            "containerStatuses": st.one_of(json_values, st.lists(st.one_of(json_values, st.fixed_dictionaries(
                {}, optional={"name": json_values, "containerID": json_values})), max_size=3)),
        })),
    })


objects = st.one_of(json_values, pod_like(None))
lines = st.one_of(objects.map(lambda value: json.dumps(value).encode()), st.binary(max_size=200),
                  st.just(b"[" * 100_000), st.just(b'{"a": ' + b"9" * 5000 + b"}"))


def parse(line: bytes) -> None:
    value = json.loads(line)
    pod_from_json(value)


@given(lines)
def test_any_answer_is_parsed_or_reported_as_malformed(line: bytes) -> None:
    with contextlib.suppress(MALFORMED):
        within(10, lambda: parse(line))


@given(objects)
def test_any_object_is_a_pod_or_namespace_or_malformed(value: Any) -> None:
    for read in (pod_from_json, namespace_from_json):
        try:
            result = read(value)
        except MALFORMED:
            continue
        assert result.name
