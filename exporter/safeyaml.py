"""YAML for a user's files with bounds: nesting, aliases, tags, numbers, and error messages that
never quote the input.

PyYAML's ``SafeLoader`` constructs no Python objects from tags, but it is not bounded: its
composer recurses once per nesting level (10,000 ``[`` end in ``RecursionError``), an alias bomb
(``a: &a [x, x]``, ``b: &b [*a, *a]``, ...) is small on disk but exponential once a value is
walked or printed, a 5,000-digit integer makes ``int()`` raise ``ValueError``, and its error
messages quote the input (``found undefined alias 'MyS3cretPassw0rd'``), which puts whatever
the user typed there, a password included, into the log.

``compose(text)`` checks the event stream first (the parser is iterative, so this is safe on any
input), then composes:

* nesting deeper than ``MAX_DEPTH`` is refused;
* aliases are refused unless the caller allows them (the scenario format uses merge keys); when
  allowed, the document's size with every alias expanded must stay under ``MAX_EXPANDED_NODES``;
* only YAML's standard tags are accepted (``!!python/...`` and custom tags are refused);
* a plain scalar of more than ``MAX_NUMBER_DIGITS`` characters that would be a number is refused.

``construct(node)`` builds the Python value with the safe constructor, turning anything it raises
into the same error. Every error is ``YamlInputError`` with a line number and a message that
names what is wrong, never the offending text.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Collection
from typing import Any

import yaml
from yaml.constructor import SafeConstructor

MAX_DEPTH = 64
MAX_EXPANDED_NODES = 200_000
MAX_NUMBER_DIGITS = 40

_STANDARD_TAGS = frozenset(f"tag:yaml.org,2002:{name}" for name in (
    "str", "int", "float", "bool", "null", "map", "seq", "merge", "timestamp", "binary", "omap", "pairs", "set"))
_NUMBER = re.compile(r"^[-+]?(\.?[0-9]|0[box])[0-9a-fA-F_:.eExob+-]*$")
_QUOTED = re.compile(r"'[^']*'|\"[^\"]*\"")


class YamlInputError(Exception):
    """``line`` (1-based) or None, and a message that quotes none of the input."""

    def __init__(self, line: int | None, message: str) -> None:
        super().__init__(message)
        self.line = line
        self.message = message


def describe_error(exc: yaml.YAMLError) -> tuple[int | None, str]:
    """Line and message of a PyYAML error, with every quoted piece of the input left out."""
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    line = mark.line + 1 if mark is not None else None
    problem = str(getattr(exc, "problem", None) or "syntax error")
    # Quoted punctuation (',' or ']') helps and cannot be a secret; a quoted word (an alias or tag name,
    # an escape sequence) might be one.
    return line, "not valid YAML: " + _QUOTED.sub(lambda m: m.group(0) if not any(ch.isalnum() for ch in m.group(0))
                                                  else "'...'", problem)


def compose(text: str, *, allow_aliases: bool = False) -> yaml.Node | None:
    """The document's root node (None for an empty document), within the bounds above."""
    depth = 0
    try:
        for event in yaml.parse(text, Loader=yaml.SafeLoader):
            line = event.start_mark.line + 1 if event.start_mark is not None else None
            if isinstance(event, yaml.AliasEvent) and not allow_aliases:
                raise YamlInputError(line, "YAML aliases (*name) are not accepted in this file; write the value out")
            if isinstance(event, yaml.SequenceStartEvent | yaml.MappingStartEvent):
                depth += 1
                if depth > MAX_DEPTH:
                    raise YamlInputError(line, f"nested deeper than {MAX_DEPTH} levels")
            elif isinstance(event, yaml.SequenceEndEvent | yaml.MappingEndEvent):
                depth -= 1
            tag = getattr(event, "tag", None)
            if tag is not None and tag != "!" and _expand_tag(tag) not in _STANDARD_TAGS:
                raise YamlInputError(line, "unsupported YAML tag (only the standard ones, like !!str, are accepted)")
            if isinstance(event, yaml.ScalarEvent) and event.implicit[0] and len(event.value) > MAX_NUMBER_DIGITS \
                    and _NUMBER.match(event.value):
                raise YamlInputError(line, f"a number longer than {MAX_NUMBER_DIGITS} characters")
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as exc:
        raise YamlInputError(*describe_error(exc)) from None
    except (ValueError, OverflowError):  # PyYAML's scanner calls chr() on a "\\U..." escape as written
        raise YamlInputError(_escape_line(text), "a \\x, \\u or \\U escape names no character") from None
    except RecursionError:  # pragma: no cover - MAX_DEPTH keeps the composer far from the limit
        raise YamlInputError(None, f"nested deeper than {MAX_DEPTH} levels") from None
    if root is not None and allow_aliases:
        expanded = expanded_size(root)
        if expanded > MAX_EXPANDED_NODES:
            raise YamlInputError(root.start_mark.line + 1, f"aliases expand to more than {MAX_EXPANDED_NODES} "
                                 "values, or refer to themselves")
    return root


def _expand_tag(tag: str) -> str:
    return "tag:yaml.org,2002:" + tag[2:] if tag.startswith("!!") else tag


def expanded_size(root: yaml.Node) -> int:
    """How many nodes the document has with every alias expanded (counted, not built).

    A recursive alias (``&x [*x]``, which PyYAML composes into a cycle) is infinite: it counts as
    more than the bound.
    """
    sizes: dict[int, int] = {}
    entered: set[int] = set()
    # Iterative post-order walk: children before parents, each distinct node once.
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, children_done = stack.pop()
        key = id(node)
        if key in sizes:
            continue
        children = _children(node)
        if children_done or not children:
            sizes[key] = min(MAX_EXPANDED_NODES + 1, 1 + sum(sizes.get(id(child), 0) for child in children))
            continue
        if key in entered:
            return MAX_EXPANDED_NODES + 1  # reached again before its children were done: a cycle
        entered.add(key)
        stack.append((node, True))
        for child in children:
            if id(child) in entered and id(child) not in sizes:
                return MAX_EXPANDED_NODES + 1
            if id(child) not in sizes:
                stack.append((child, False))
    return sizes[id(root)]


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [item for pair in node.value for item in pair]
    return []


def _escape_line(text: str) -> int | None:
    """The first line with a \\U escape beyond Unicode (what makes the scanner's chr() fail), if any."""
    for number, line in enumerate(text.splitlines(), start=1):
        for match in re.finditer(r"\\U([0-9A-Fa-f]{8})", line):
            if int(match.group(1), 16) > 0x10FFFF:
                return number
    return None


def construct(node: yaml.Node) -> Any:
    """The Python value of ``node`` (safe constructor); raises ``YamlInputError``, never anything else."""
    try:
        return SafeConstructor().construct_object(node, deep=True)
    except yaml.YAMLError as exc:
        raise YamlInputError(*describe_error(exc)) from None
    except (ValueError, OverflowError, TypeError, RecursionError):
        raise YamlInputError(node.start_mark.line + 1, "a value YAML cannot represent here "
                             "(a number out of range, a malformed date or base64, an unhashable key)") from None


LISTED_KEYS_MAX = 12


def unknown_key(name: str, known: Collection[str], more: str = "") -> str:
    """The message for a key a file format does not have, the same in every file we read.

    Why one shape: a short list of keys helps most when shown whole; a long one (the scenario's 80
    NVML function names, the config file's 60 options) would make the one error line unreadable,
    so then only the closest names are offered, and ``more`` says where the rest are.
    """
    names = sorted(known)
    if len(names) <= LISTED_KEYS_MAX:
        return f"unknown key (known keys: {', '.join(names)})"
    close = difflib.get_close_matches(name, names, n=3)
    hint = f"did you mean {' or '.join(close)}?" if close else f"none of the {len(names)} known keys is close"
    return f"unknown key ({hint}{'; ' + more if more else ''})"
