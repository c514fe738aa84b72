"""What a change of marks does, in words (for Events) and as action counts (for ``/metrics``). Pure."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from exporter.remediate.nodestate import TAINT_KEY, Marks, our_taint


def _taint_action(current: Marks, desired: Marks, obj: Mapping[str, Any]) -> str | None:
    had_taint = our_taint(obj) is not None or current.taint_effect is not None
    if desired.taint_effect and (not had_taint or current.taint_value() != desired.taint_value()
                                 or current.taint_effect != desired.taint_effect):
        return "taint"
    if not desired.taint_effect and had_taint:
        return "untaint"
    return None


def _cordon_action(current: Marks, desired: Marks) -> str | None:
    if desired.cordoned_by_us != current.cordoned_by_us:
        return "cordon" if desired.cordoned_by_us else "uncordon"
    return None


def _flagged(marks: Marks, flag: str) -> set[str]:
    return {uuid for uuid, mark in marks.gpus.items() if getattr(mark, flag)}


def actions(current: Marks, desired: Marks, obj: Mapping[str, Any]) -> list[str]:
    """The metric actions (taint, untaint, cordon, uncordon, annotate, condition) of going to ``desired``."""
    found = [_taint_action(current, desired, obj), _cordon_action(current, desired)]
    found += [flag for flag in ("annotate", "condition") if _flagged(desired, flag) != _flagged(current, flag)]
    return [action for action in found if action is not None]


def _taint_words(desired: Marks, shadow: Marks | None, obj: Mapping[str, Any] | None) -> list[str]:
    if desired.taint_effect:
        return [f"taint {TAINT_KEY}={desired.taint_value()}:{desired.taint_effect}"]
    if (shadow is not None and shadow.taint_effect) or (obj is not None and our_taint(obj)):
        return [f"remove the taint {TAINT_KEY}"]
    return []


def _cordon_words(desired: Marks, shadow: Marks | None) -> list[str]:
    if desired.cordoned_by_us and not (shadow and shadow.cordoned_by_us):
        return ["cordon the node"]
    if shadow is not None and shadow.cordoned_by_us and not desired.cordoned_by_us:
        return ["uncordon the node"]
    return []


def describe(desired: Marks, shadow: Marks | None = None, obj: Mapping[str, Any] | None = None) -> str:
    """``taint ...=3:NoSchedule, mark unhealthy GPU 3 (GPU-..): GpuXidFatal`` (``shadow``: the marks before)."""
    parts = _taint_words(desired, shadow, obj) + _cordon_words(desired, shadow)
    gpus = "; ".join(f"GPU {mark.gpu} ({uuid}): {', '.join(sorted(set(mark.alerts.values())))}"
                     for uuid, mark in sorted(desired.gpus.items()))
    if gpus:
        parts.append(f"mark unhealthy {gpus}")
    cleared = sorted(set(shadow.gpus) - set(desired.gpus)) if shadow is not None else []
    if cleared:
        parts.append(f"clear {', '.join(cleared)} (alerts resolved and the hold passed)")
    return ", ".join(parts) or "no change"
