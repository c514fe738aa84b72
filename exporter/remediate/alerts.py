"""The Alertmanager webhook payload (version 4), parsed strictly into frozen values.

Alertmanager posts one JSON object per notification of an alert group: ``status``, ``alerts[]``
(each with ``status``, ``labels``, ``annotations``, ``startsAt``, ``endsAt``, ``fingerprint``),
``groupKey``, ``truncatedAlerts`` and ``version: "4"``. Alertmanager re-sends a group on its
``repeat_interval`` and retries failed deliveries, so the same alert arrives many times: an
alert occurrence is identified by ``fingerprint`` + ``startsAt`` (``Alert.occurrence``), which is
what the remediator keys idempotency on.

Anything that is not such a payload raises ``PayloadError`` with a message a sender can act on
(the receiver answers 400 with it); nothing here touches the cluster.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from types import MappingProxyType
from typing import Any

SUPPORTED_VERSION = "4"
# Alertmanager writes Go's zero time for an alert that has not ended.
_GO_ZERO_YEAR = 1


class PayloadError(ValueError):
    """The request body is not an Alertmanager v4 webhook payload; the message says why."""


@dataclass(frozen=True)
class Alert:
    """One alert of a notification."""

    status: str  # "firing" or "resolved"
    labels: Mapping[str, str]
    annotations: Mapping[str, str]
    starts_at: datetime
    ends_at: datetime | None  # None while firing with no known end
    fingerprint: str
    generator_url: str = ""

    @property
    def name(self) -> str:
        return self.labels.get("alertname", "")

    @property
    def firing(self) -> bool:
        return self.status == "firing"

    @property
    def occurrence(self) -> str:
        """Identity of this occurrence of the alert: the same on every re-send, new when it fires again."""
        return f"{self.fingerprint}@{self.starts_at.astimezone(UTC).isoformat()}"


@dataclass(frozen=True)
class Notification:
    """One webhook delivery."""

    receiver: str
    status: str
    alerts: tuple[Alert, ...]
    group_key: str
    truncated_alerts: int
    external_url: str = ""


def parse_notification(body: bytes) -> Notification:
    """Parse a webhook body; raises ``PayloadError``."""
    try:
        document = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise PayloadError(f"body is not JSON: {exc}") from None
    if not isinstance(document, dict):
        raise PayloadError("body must be a JSON object (an Alertmanager webhook payload)")
    version = document.get("version")
    if version != SUPPORTED_VERSION:
        raise PayloadError(f"version: expected \"4\" (Alertmanager webhook payload), got {version!r}")
    alerts = document.get("alerts")
    if not isinstance(alerts, list):
        raise PayloadError("alerts: expected a list")
    parsed = tuple(_alert(item, f"alerts[{index}]") for index, item in enumerate(alerts))
    truncated = document.get("truncatedAlerts", 0)
    if not isinstance(truncated, int) or isinstance(truncated, bool) or truncated < 0:
        raise PayloadError(f"truncatedAlerts: expected a count, got {truncated!r}")
    return Notification(
        receiver=_text(document, "receiver", "receiver"),
        status=_status(document, "status"),
        alerts=parsed,
        group_key=_text(document, "groupKey", "groupKey"),
        truncated_alerts=truncated,
        external_url=_text(document, "externalURL", "externalURL"),
    )


def _alert(item: Any, where: str) -> Alert:
    if not isinstance(item, dict):
        raise PayloadError(f"{where}: expected an object")
    labels = _string_map(item.get("labels"), f"{where}.labels")
    annotations = _string_map(item.get("annotations", {}), f"{where}.annotations")
    starts_at = _time(item.get("startsAt"), f"{where}.startsAt")
    if starts_at is None:
        raise PayloadError(f"{where}.startsAt: missing")
    fingerprint = item.get("fingerprint") or _fingerprint(labels)
    if not isinstance(fingerprint, str):
        raise PayloadError(f"{where}.fingerprint: expected a string")
    return Alert(
        status=_status(item, "status", where),
        labels=labels,
        annotations=annotations,
        starts_at=starts_at,
        ends_at=_time(item.get("endsAt"), f"{where}.endsAt"),
        fingerprint=fingerprint,
        generator_url=_text(item, "generatorURL", f"{where}.generatorURL"),
    )


def _fingerprint(labels: Mapping[str, str]) -> str:
    """A stable stand-in when a sender leaves ``fingerprint`` out (Alertmanager always sends one)."""
    canonical = "\0".join(f"{key}\0{value}" for key, value in sorted(labels.items()))
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()[:16]


def _status(document: Mapping[str, Any], key: str, where: str = "") -> str:
    value = document.get(key)
    if value not in ("firing", "resolved"):
        raise PayloadError(f"{where + '.' if where else ''}{key}: expected \"firing\" or \"resolved\", got {value!r}")
    return str(value)


def _text(document: Mapping[str, Any], key: str, where: str) -> str:
    value = document.get(key, "")
    if value is None:
        return ""
    if not isinstance(value, str):
        raise PayloadError(f"{where}: expected a string, got {value!r}")
    return value


def _string_map(value: Any, where: str) -> Mapping[str, str]:
    if value is None:
        return MappingProxyType({})
    if not isinstance(value, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
        raise PayloadError(f"{where}: expected an object of string values")
    return MappingProxyType(dict(value))


def _time(value: Any, where: str) -> datetime | None:
    if value in (None, ""):
        return None
    if not isinstance(value, str):
        raise PayloadError(f"{where}: expected an RFC 3339 time, got {value!r}")
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        raise PayloadError(f"{where}: expected an RFC 3339 time, got {value!r}") from None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return None if parsed.year == _GO_ZERO_YEAR else parsed
