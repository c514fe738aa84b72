"""PromQL string literals: the one way a value (a team, a node, a cluster, a regular expression) is
put into a query.

Why one function: a label value comes from the cluster (a namespace, a pod label, a hostname) or
from a user's flag, and a value with a quote, a backslash or a newline that is not escaped either
breaks the query or changes what it selects. PromQL reads a double-quoted string with Go's escapes
(``\\\\``, ``\\"``, ``\\n``, ``\\t``, ``\\xNN``, ``\\uNNNN``...), so every character that would end or
bend the literal is written as an escape, and every other character (any Unicode) as itself.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

# Characters with a short escape in Go's (and so PromQL's) string literals.
_SHORT_ESCAPES = {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\r": "\\r", "\t": "\\t", "\a": "\\a", "\b": "\\b",
                  "\f": "\\f", "\v": "\\v"}


def _escaped(char: str) -> str:
    if char in _SHORT_ESCAPES:
        return _SHORT_ESCAPES[char]
    code = ord(char)
    if code < 0x20 or code == 0x7F:  # other C0 controls and DEL: a hex escape, never the raw byte
        return f"\\x{code:02x}"
    if 0x80 <= code < 0xA0 or code in (0x2028, 0x2029):  # C1 controls and line/paragraph separators
        return f"\\u{code:04x}"
    return char


def quote(value: str) -> str:
    """``value`` as a double-quoted PromQL string literal, e.g. ``quote('a"b') == '"a\\\\"b"'``."""
    return '"' + "".join(_escaped(char) for char in value) + '"'


def any_of(values: Iterable[str]) -> str:
    """A quoted regular expression for ``=~`` that matches exactly one of ``values``, each taken literally
    (``cluster=~{any_of(["a.b", "c"])}`` does not select ``axb``). Prometheus anchors the expression; a
    character that means something to RE2 is escaped as a backslash before it, which RE2 reads as the
    character itself, and ``quote`` then writes the whole as one string literal."""
    return quote("|".join(re.escape(value) for value in values))
