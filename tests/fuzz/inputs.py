"""Strategies shared by the fuzz suites: YAML-shaped documents, hostile snippets, and the check that
an error is what a user should see (one line, bounded, no traceback material)."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import yaml
from hypothesis import strategies as st

T = TypeVar("T")

# Inputs that broke a loader before (issue #14) or that any YAML loader must survive.
HOSTILE_YAML = (
    "[" * 10_000,
    "{" * 5_000 + "}" * 5_000,
    "a: " + "9" * 5_000,
    "a: -" + "1" * 5_000 + ".5e3",
    "a: &a [x, x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]\n"
    "c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b]\nd: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c]\n"
    "e: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d]\nf: &f [*e, *e, *e, *e, *e, *e, *e, *e, *e]\n"
    "g: [*f, *f, *f, *f, *f, *f, *f, *f, *f]\n",
    "u: *MyS3cretPassw0rd\n",
    "u: !!python/object:os.system MyS3cretPassw0rd\n",
    "u: !MyS3cretPassw0rd x\n",
    "debug:\n",
    "a: 1\na: 2\n",
    "\ufeffa: 1\n",
    "a: \"\\x\"\n",
    "a: \"\\U99999999\"\n",  # PyYAML's scanner raises OverflowError on an escape beyond Unicode
    "? [a, b]\n: c\n",
    "a: 2024-13-45\n",
    "a: !!binary not-base64!\n",
    "a: !!timestamp 2024-99-99\n",
    "- 1\n- 2\n",
    "just text",
    "a:\n\tb: 1\n",
    "%YAML 9.9\n---\na: 1\n",
    "a: b\n---\nc: d\n",
    "&x [*x]\n",
    "a: [1, 2\n",
    "\x00\x01\x02",
    "a: \u2028\u0085\n",
)

scalars = st.one_of(
    st.none(), st.booleans(), st.integers(), st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=40), st.sampled_from(["", "0", "-1", "1e999", "99999999999999999999", "true", "null", "~",
                                           ":9400", "[::]:9400", "json", "text", "uid", "1s", "TLS13"]),
)


def documents(keys: Sequence[str]) -> st.SearchStrategy[Any]:
    """Mappings whose keys are mostly the surface's real keys, with values of any shape."""
    values = st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                           st.dictionaries(st.text(max_size=12), inner, max_size=4)),
                          max_leaves=12)
    key = st.one_of(st.sampled_from(list(keys)), st.text(max_size=20))
    return st.dictionaries(key, values, max_size=6)


def yaml_texts(keys: Sequence[str]) -> st.SearchStrategy[str]:
    """Valid YAML of the right shape, the same with bytes changed, random text, and hostile snippets."""
    dumped = documents(keys).map(lambda doc: yaml.safe_dump(doc, allow_unicode=True))

    @st.composite
    def mutated(draw: st.DrawFn) -> str:
        text = draw(dumped)
        if not text:
            return text
        position = draw(st.integers(0, len(text)))
        insert = draw(st.sampled_from(["&a ", "*a", "!!python/name:x ", "[", "{", ": ", "\n  ", "'", "\"", "#",
                                       "\t", "- ", "<<: ", "\x00", "\u2028", "9" * 60]))
        return text[:position] + insert + text[position:]

    return st.one_of(dumped, mutated(), st.text(max_size=200), st.sampled_from(HOSTILE_YAML))


def within(seconds: float, run: Callable[[], T]) -> T:
    """``run()``, asserting it returned (or raised) within ``seconds``: no input may make a loader hang."""
    started = time.monotonic()
    try:
        return run()
    finally:
        elapsed = time.monotonic() - started
        assert elapsed < seconds, f"took {elapsed:.1f} s"


def assert_user_error(message: str, *, secrets: Sequence[str] = ("MyS3cretPassw0rd",)) -> None:
    """What the user reads: one line, of bounded length, naming something, quoting no secret."""
    assert "\n" not in message, message
    assert 0 < len(message) < 1000, message[:300]
    assert "Traceback" not in message
    for secret in secrets:
        assert secret not in message, message
