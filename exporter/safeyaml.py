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

``YamlFile`` / ``YamlValue`` walk the composed document for every input format (the config file,
dcgm-exporter's config file, the web config, the remediation policy, the pricing and budget files,
the scenario and its ``kubernetes:`` section): typed accessors that raise the format's own error
naming ``file:line: key.path``, so no format carries a walker of its own.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from typing import Any, Self, TypeVar

import yaml
from yaml.constructor import SafeConstructor

from exporter.inputfile import DEFAULT_MAX_BYTES, InputFileError, read_text

_T = TypeVar("_T")

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
            depth = _checked_event(event, depth, allow_aliases=allow_aliases)
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


def _checked_event(event: yaml.Event, depth: int, *, allow_aliases: bool) -> int:
    """The nesting depth after ``event``; ``YamlInputError`` if the event crosses one of the bounds above
    (an alias where none is accepted, too deep, a non-standard tag, a number too long to convert cheaply)."""
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
    return depth


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


# ---------------------------------------------------------------------------------------------
# Walking a composed document: the one typed reader every input format uses.

ErrorFactory = Callable[[str, "int | None", str, str], Exception]
"""``(file, line or None, key path, message) -> the format's own exception`` (its ``str()`` is one line)."""


def located(kind: Callable[[str], Exception]) -> ErrorFactory:
    """The error factory of an exception made from one ``file:line: key: message`` string."""

    def make(source: str, line: int | None, key: str, message: str) -> Exception:
        return kind(f"{source}{f':{line}' if line else ''}: {key}: {message}")

    return make


def _default_error(source: str, line: int | None, key: str, message: str) -> Exception:
    return YamlInputError(line, f"{source}: {key}: {message}")


@dataclass
class YamlFile:
    """What every node of one input file shares.

    Why these knobs and no more: the formats differ only in the exception they raise (each command
    turns its own into exit status 2), in whether a value may be quoted back (a scenario's may; a
    web config's may be a password), and in which line an error about a mapping's value names
    (the web config names the key's line, as the exporter-toolkit does). ``lines`` collects the line
    of every key read, for checks made after the walk (``WebConfig.where``).
    """

    source: str
    error: ErrorFactory = _default_error
    shows_values: bool = False
    key_lines: bool = False
    document_key: str = "document"  # the key path named for the document itself
    lines: dict[str, int] = field(default_factory=dict)

    def fail(self, line: int | None, key: str, message: str) -> Exception:
        return self.error(self.source, line, key, message)

    def root(self, node: yaml.Node, path: str = "") -> YamlValue:
        return YamlValue(node, path, self)

    def load(self, file_key: str, *, max_bytes: int = DEFAULT_MAX_BYTES,
             allow_aliases: bool = False) -> YamlValue | None:
        """Read the file ``source`` names (``exporter.inputfile``: a regular file, bounded, UTF-8) and
        compose it; a file that cannot be used is the error ``source: file_key: why``."""
        try:
            text = read_text(self.source, max_bytes)
        except InputFileError as exc:
            raise self.fail(None, file_key, str(exc)) from None
        return self.read(text, allow_aliases=allow_aliases)

    def read(self, text: str, *, allow_aliases: bool = False) -> YamlValue | None:
        """The document's root (None when empty), bounded as ``compose``; errors under the key ``yaml``."""
        try:
            root = compose(text, allow_aliases=allow_aliases)
        except YamlInputError as exc:
            raise self.fail(exc.line, "yaml", exc.message) from None
        return None if root is None else self.root(root)


def _line_of(node: yaml.Node) -> int | None:
    mark = node.start_mark
    return int(mark.line) + 1 if mark is not None else None


class YamlValue:
    """A YAML node plus where it came from, with typed accessors that fail with file:line: key.

    Every accessor checks the node's kind and raises the file's error (``YamlFile.error``) naming
    the line and the dotted key path (``gpus[3].memory_used``), so a format's reader is its schema
    and nothing else. Mappings refuse repeated keys and (given ``known``) unknown ones, and resolve
    YAML merge keys (``<<: *anchor``: explicit keys win, earlier sources over later ones).
    """

    def __init__(self, node: yaml.Node, path: str, file: YamlFile, key_line: int | None = None) -> None:
        self.node = node
        self.path = path
        self.file = file
        self.key_line = key_line

    @property
    def source(self) -> str:
        return self.file.source

    @property
    def line(self) -> int | None:
        """The line errors about this value name: its own, or (``key_lines``) its key's; None for a node
        built from plain data (``yaml.SafeDumper.represent_data``), which has no position."""
        if self.file.key_lines and self.key_line is not None:
            return self.key_line
        return _line_of(self.node)

    def error(self, message: str, *, path: str | None = None, line: int | None = None) -> Exception:
        return self.file.fail(self.line if line is None else line, path or self.path or self.file.document_key, message)

    def _child(self, key: str | int, node: yaml.Node, key_line: int | None = None) -> Self:
        """The value under ``key`` (its path extended, its key's line kept)."""
        kind = type(self)  # a format's subclass (extra accessors) reaches every node
        if isinstance(key, int):
            return kind(node, f"{self.path}[{key}]", self.file, key_line)
        return kind(node, f"{self.path}.{key}" if self.path else key, self.file, key_line)

    def value(self) -> Any:
        try:
            return construct(self.node)
        except YamlInputError as exc:
            raise self.file.fail(exc.line, self.path or self.file.document_key, exc.message) from None

    def is_mapping(self) -> bool:
        return isinstance(self.node, yaml.MappingNode)

    def is_sequence(self) -> bool:
        return isinstance(self.node, yaml.SequenceNode)

    def is_null(self) -> bool:
        return isinstance(self.node, yaml.ScalarNode) and self.node.tag == "tag:yaml.org,2002:null"

    def describe(self) -> str:
        """What the node is, for "expected X, got Y": its value only where the file may show values."""
        if isinstance(self.node, yaml.MappingNode):
            return "a mapping"
        if isinstance(self.node, yaml.SequenceNode):
            return "a list"
        value = self.value()
        if not self.file.shows_values:
            return "nothing" if value is None else f"a {type(value).__name__}"
        text = repr(value)
        return text if len(text) <= 40 else text[:37] + "..."

    def _pairs(self) -> list[tuple[Any, int | None, yaml.Node]]:
        if not isinstance(self.node, yaml.MappingNode):
            raise self.error(f"expected a mapping, got {self.describe()}")
        pairs: list[tuple[Any, int | None, yaml.Node]] = []
        merged: list[tuple[Any, int | None, yaml.Node]] = []
        seen: set[Any] = set()
        for key_node, value_node in self.node.value:
            key_line = _line_of(key_node)
            if key_node.tag == "tag:yaml.org,2002:merge":
                # The composer leaves merge keys to the constructor, so they are resolved here.
                sources = value_node.value if isinstance(value_node, yaml.SequenceNode) else [value_node]
                for source in sources:
                    merged.extend(type(self)(source, self.path, self.file)._pairs())
                continue
            if not isinstance(key_node, yaml.ScalarNode):
                raise self.error("mapping keys must be plain values", line=key_line)
            key = YamlValue(key_node, self.path, self.file).value()
            if key in seen:
                raise self.error(f"duplicate key {key!r}" if self.file.shows_values else "duplicate key",
                                 path=self._child(str(key), key_node).path, line=key_line)
            seen.add(key)
            pairs.append((key, key_line, value_node))
        for key, key_line, value_node in merged:
            if key not in seen:
                seen.add(key)
                pairs.append((key, key_line, value_node))
        return pairs

    def mapping(self, known: Collection[str] | None = None, *, more: str = "") -> dict[str, Self]:
        """The entries of a mapping (null: none); ``known``, when given, is every key allowed
        (``more`` says where the others are documented, for ``unknown_key``)."""
        if self.is_null():
            return {}
        result: dict[str, Self] = {}
        for key, key_line, value_node in self._pairs():
            name = str(key)
            child = self._child(name, value_node, key_line)
            if known is not None and name not in known:
                raise self.error(unknown_key(name, known, more), path=child.path[:120], line=key_line)
            if key_line is not None:
                self.file.lines.setdefault(child.path, key_line)
            result[name] = child
        return result

    def index_mapping(self, limit: int, what: str) -> dict[int, Self]:
        """A mapping keyed by integer indices ``0 <= i < limit`` (``gpus: {3: {...}}``)."""
        result: dict[int, Self] = {}
        for key, key_line, value_node in self._pairs():
            if isinstance(key, bool) or not isinstance(key, int):
                raise self.error(f"keys must be {what} indices (integers), got {key!r}",
                                 path=f"{self.path}[{key}]", line=key_line)
            if not 0 <= key < limit:
                raise self.error(f"{what} index {key} out of range (gpu_count is {limit})",
                                 path=f"{self.path}[{key}]", line=key_line)
            result[key] = self._child(key, value_node, key_line)
        return result

    def sequence(self) -> list[Self]:
        """The items of a list (null: none)."""
        if self.is_null():
            return []
        if not isinstance(self.node, yaml.SequenceNode):
            raise self.error(f"expected a list, got {self.describe()}")
        return [self._child(index, item) for index, item in enumerate(self.node.value)]

    def scalar(self) -> Any:
        if not isinstance(self.node, yaml.ScalarNode):
            raise self.error(f"expected a single value, got {self.describe()}")
        return self.value()

    def convert(self, parse: Callable[[Any], _T]) -> _T:
        """``parse(value)``; its ``ValueError`` becomes the file's error at this node."""
        try:
            return parse(self.scalar())
        except ValueError as exc:
            raise self.error(str(exc)) from None

    def plain(self, parse: Callable[[Any], _T]) -> _T:
        """Like ``convert`` for a value that may also be a list (built as plain Python data)."""
        if isinstance(self.node, yaml.MappingNode):
            raise self.error("expected a value or a list")
        try:
            return parse(self.value())
        except ValueError as exc:
            raise self.error(str(exc)) from None

    def string(self) -> str:
        raw = self.scalar()
        if isinstance(raw, bool) or raw is None or isinstance(raw, list | dict):
            raise self.error(f"expected a string, got {self.describe()}")
        return str(raw)

    def boolean(self) -> bool:
        raw = self.scalar()
        if not isinstance(raw, bool):
            raise self.error(f"expected true or false, got {self.describe()}")
        return raw

    def integer(self, minimum: int | None = None, maximum: int | None = None) -> int:
        raw = self.scalar()
        if isinstance(raw, bool) or not isinstance(raw, int):
            raise self.error(f"expected an integer, got {self.describe()}")
        self._check_range(raw, minimum, maximum)
        return raw

    def number(self, minimum: float | None = None, maximum: float | None = None) -> float:
        raw = self.scalar()
        if isinstance(raw, bool) or not isinstance(raw, int | float):
            raise self.error(f"expected a number, got {self.describe()}")
        self._check_range(raw, minimum, maximum)
        return float(raw)

    def _check_range(self, value: float, minimum: float | None, maximum: float | None) -> None:
        if minimum is not None and value < minimum:
            raise self.error(f"{value} is below the minimum {minimum}")
        if maximum is not None and value > maximum:
            raise self.error(f"{value} is above the maximum {maximum}")

    def choice(self, choices: Collection[str], what: str) -> str:
        text = self.string()
        if text not in choices:
            raise self.error(f"unknown {what} {text!r} (known: {', '.join(sorted(choices))})")
        return text
