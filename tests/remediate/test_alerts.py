"""The webhook payload: Alertmanager's v4 JSON in, frozen values out; anything else is refused by name."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest

from exporter.remediate.alerts import PayloadError, parse_notification


def payload(**overrides: Any) -> dict[str, Any]:
    """A notification as Alertmanager 0.25 sends it (fields and formats copied from a real delivery)."""
    alert = {"status": "firing", "labels": {"alertname": "GpuXidFatal", "Hostname": "node-a", "UUID": "GPU-1",
                                            "gpu": "3", "xid": "79"},
             "annotations": {"summary": "Fatal Xid 79"}, "startsAt": "2024-05-01T10:00:00.123456789Z",
             "endsAt": "0001-01-01T00:00:00Z", "generatorURL": "http://prometheus/graph", "fingerprint": "3f1c2b"}
    body = {"receiver": "remediate", "status": "firing", "alerts": [alert], "groupLabels": {"alertname": "GpuXidFatal"},
            "commonLabels": {}, "commonAnnotations": {}, "externalURL": "http://alertmanager:9093", "version": "4",
            "groupKey": '{}:{alertname="GpuXidFatal"}', "truncatedAlerts": 0}
    body.update(overrides)
    return body


def parse(body: dict[str, Any]) -> Any:
    return parse_notification(json.dumps(body).encode())


def test_an_alertmanager_notification_parses_with_nanosecond_times_and_go_zero_end() -> None:
    notification = parse(payload())
    [alert] = notification.alerts
    assert (notification.status, notification.receiver, notification.truncated_alerts) == ("firing", "remediate", 0)
    assert alert.name == "GpuXidFatal" and alert.firing
    assert alert.starts_at == datetime(2024, 5, 1, 10, 0, 0, 123456, tzinfo=UTC)
    assert alert.ends_at is None  # Go's zero time: not ended
    assert alert.occurrence == "3f1c2b@2024-05-01T10:00:00.123456+00:00"


def test_the_same_alert_firing_again_is_a_new_occurrence() -> None:
    first = parse(payload()).alerts[0]
    again = parse(payload(alerts=[{**payload()["alerts"][0], "startsAt": "2024-05-01T11:00:00Z"}])).alerts[0]
    assert first.fingerprint == again.fingerprint and first.occurrence != again.occurrence


def test_a_missing_fingerprint_is_derived_from_the_labels() -> None:
    alert = {**payload()["alerts"][0]}
    del alert["fingerprint"]
    one = parse(payload(alerts=[alert])).alerts[0]
    assert one.fingerprint and one.fingerprint == parse(payload(alerts=[alert])).alerts[0].fingerprint


@pytest.mark.parametrize(("body", "message"), [
    (b"{not json", "body is not JSON"),
    (b"[]", "body must be a JSON object"),
    (json.dumps(payload(version="3")).encode(), 'version: expected "4"'),
    (json.dumps(payload(alerts={})).encode(), "alerts: expected a list"),
    (json.dumps(payload(status="pending")).encode(), 'status: expected "firing" or "resolved"'),
    (json.dumps(payload(alerts=[{**payload()["alerts"][0], "startsAt": "yesterday"}])).encode(),
     "alerts[0].startsAt: expected an RFC 3339 time"),
    (json.dumps(payload(alerts=[{**payload()["alerts"][0], "labels": {"gpu": 3}}])).encode(),
     "alerts[0].labels: expected an object of string values"),
    (json.dumps(payload(alerts=[{**payload()["alerts"][0], "status": None}])).encode(), "alerts[0].status"),
    (json.dumps(payload(truncatedAlerts=-1)).encode(), "truncatedAlerts: expected a count"),
])
def test_what_is_not_a_v4_payload_is_refused_with_the_reason(body: bytes, message: str) -> None:
    with pytest.raises(PayloadError, match=message.replace("[", r"\[").replace("]", r"\]")):
        parse_notification(body)
