"""What a write to a Kubernetes object does to it, as kube-apiserver applies it: the three patch types and
the Node validation the fake API server (simulator/fakeapiserver.py) enforces.

* strategic merge patch (``application/strategic-merge-patch+json``): objects merge, lists are replaced
  except those the schema merges by a key (``status.conditions`` and ``status.addresses`` by ``type``
  on a Node), ``null`` deletes a key, ``$`` directives are refused;
* JSON merge patch (``application/merge-patch+json``, RFC 7386): objects merge, lists are replaced;
* JSON patch (``application/json-patch+json``, RFC 6902): ``add``, ``remove``, ``replace``, ``test``.

Pure functions on JSON objects: the server holds the objects and their locks.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

JsonObject = dict[str, Any]
STRATEGIC = "application/strategic-merge-patch+json"
MERGE = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"
# Lists that strategic merge merges by a key instead of replacing (subset of the Node schema).
MERGE_KEYS = {("status", "conditions"): "type", ("status", "addresses"): "type"}


def invalid_node(node: Mapping[str, Any]) -> str:
    seen: set[tuple[str, str]] = set()
    for taint in node.get("spec", {}).get("taints") or []:
        if taint.get("effect") not in ("NoSchedule", "PreferNoSchedule", "NoExecute") or not taint.get("key"):
            return f"spec.taints: invalid taint {taint}"
        value = str(taint.get("value", ""))
        if len(value) > 63 or not all(ch.isalnum() or ch in "-_." for ch in value):
            return f"spec.taints: invalid value {value!r}"
        pair = (taint["key"], taint["effect"])
        if pair in seen:
            return f"spec.taints: duplicate taint {pair}"
        seen.add(pair)
    for key, value in (node.get("metadata", {}).get("annotations") or {}).items():
        if not isinstance(value, str):
            return f"metadata.annotations.{key}: must be a string"
    return ""


def apply_patch(obj: JsonObject, content_type: str, patch: Any) -> JsonObject:
    """``obj`` with ``patch`` applied (a new object); ValueError for a bad or unsupported patch."""
    if content_type == STRATEGIC:
        if not isinstance(patch, dict):
            raise ValueError("a strategic merge patch must be an object")
        merged: JsonObject = _strategic(copy.deepcopy(obj), patch, ())
        return merged
    if content_type == MERGE:
        if not isinstance(patch, dict):
            raise ValueError("a merge patch must be an object")
        result: JsonObject = _merge(copy.deepcopy(obj), patch)
        return result
    if content_type == JSON_PATCH:
        if not isinstance(patch, list):
            raise ValueError("a JSON patch must be a list of operations")
        return _json_patch(copy.deepcopy(obj), patch)
    raise ValueError(f"unsupported patch content type {content_type!r}")


def _merge(target: Any, patch: Any) -> Any:
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = _merge(result.get(key), value)
    return result


def _strategic(target: Any, patch: Any, path: tuple[str, ...]) -> Any:
    if not isinstance(patch, dict):
        if isinstance(patch, list) and path in MERGE_KEYS and isinstance(target, list):
            key = MERGE_KEYS[path]
            merged = [dict(item) for item in target]
            for item in patch:
                existing = next((m for m in merged if m.get(key) == item.get(key)), None)
                if existing is None:
                    merged.append(copy.deepcopy(item))
                else:
                    existing.update(copy.deepcopy(item))
            return merged
        return copy.deepcopy(patch)
    if any(key.startswith("$") for key in patch):
        raise ValueError("unsupported strategic merge directive")
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = _strategic(result.get(key), value, (*path, key))
    return result


def _pointer(path: str) -> list[str]:
    if not path.startswith("/"):
        raise ValueError(f"JSON pointer {path!r} must start with /")
    return [part.replace("~1", "/").replace("~0", "~") for part in path[1:].split("/")]


def _json_patch(obj: JsonObject, operations: list[Any]) -> JsonObject:
    for operation in operations:
        if not isinstance(operation, dict) or operation.get("op") not in ("add", "remove", "replace", "test"):
            raise ValueError(f"unsupported JSON patch operation {operation!r}")
        *parents, last = _pointer(str(operation.get("path", "")))
        container: Any = obj
        for part in parents:
            container = container[int(part)] if isinstance(container, list) else container.setdefault(part, {})
        op = operation["op"]
        if op == "test":
            actual = container[int(last)] if isinstance(container, list) else container.get(last)
            if actual != operation.get("value"):
                raise ValueError(f"test failed at {operation['path']}")
        elif op == "remove":
            if isinstance(container, list):
                container.pop(int(last))
            elif last in container:
                del container[last]
            else:
                raise ValueError(f"nothing to remove at {operation['path']}")
        elif isinstance(container, list):
            index = len(container) if last == "-" else int(last)
            if op == "add":
                container.insert(index, copy.deepcopy(operation.get("value")))
            else:
                container[index] = copy.deepcopy(operation.get("value"))
        else:
            container[last] = copy.deepcopy(operation.get("value"))
    return obj
