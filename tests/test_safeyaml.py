"""The one shape of an "unknown key" message, whichever of our YAML formats the key was in."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from exporter.safeyaml import LISTED_KEYS_MAX, YamlFile, YamlValue, located, unknown_key


def test_a_short_list_of_keys_is_shown_whole_and_sorted() -> None:
    assert unknown_key("colour", ["seed", "driver", "description"]) == \
        "unknown key (known keys: description, driver, seed)"


def test_a_long_list_offers_the_closest_names_and_where_the_rest_are() -> None:
    known = [f"nvmlDeviceGet{name}" for name in ("FanSpeed", "Brand", "Name", "Serial", "Index", "UUID", "Count",
                                                   "PowerUsage", "Temperature", "MemoryInfo", "PciInfo", "Clock",
                                                   "MinorNumber")]
    assert len(known) > LISTED_KEYS_MAX
    message = unknown_key("nvmlDeviceGetFanSpeedy", known, "see the README")
    assert message.startswith("unknown key (did you mean nvmlDeviceGetFanSpeed")
    assert message.endswith("; see the README)")
    assert "nvmlDeviceGetPciInfo" not in message  # not the whole list


def test_a_long_list_with_nothing_close_says_so_in_one_short_line() -> None:
    known = [f"key{index:02d}" for index in range(40)]
    assert unknown_key("zzzzzz", known) == "unknown key (none of the 40 known keys is close)"


# ---------------------------------------------------------------------------------------------
# The one typed reader every input format walks its file with.


class FormatError(Exception):
    """A format's own error, as each input format has one (the command line turns it into exit 2)."""

    def __init__(self, source: str, line: int | None, key: str, message: str) -> None:
        super().__init__(f"{source}:{line}: {key}: {message}")
        self.line = line
        self.key = key


def read(text: str, **options: Any) -> YamlValue:
    root = YamlFile("in.yaml", FormatError, **options).read(text, allow_aliases=True)
    assert root is not None
    return root


def failure(action: Callable[[], object]) -> str:
    with pytest.raises(FormatError) as caught:
        action()
    return str(caught.value)


def test_typed_values_come_back_and_mistakes_name_file_line_and_key_path() -> None:
    top = read("gpus:\n  - {count: 3, name: a100, fast: true, rate: 1.5}\n  - {count: three}\n")
    [first, second] = top.mapping(("gpus",))["gpus"].sequence()
    keys = first.mapping(("count", "name", "fast", "rate"))
    assert (keys["count"].integer(), keys["name"].string(), keys["fast"].boolean(), keys["rate"].number()) == \
        (3, "a100", True, 1.5)
    assert failure(second.mapping(("count",))["count"].integer) == \
        "in.yaml:3: gpus[1].count: expected an integer, got a str"
    assert failure(lambda: keys["count"].integer(maximum=2)) == "in.yaml:2: gpus[0].count: 3 is above the maximum 2"
    assert failure(lambda: keys["name"].choice(("h100",), "model")).endswith("unknown model 'a100' (known: h100)")


def test_unknown_and_repeated_keys_are_refused_at_the_key() -> None:
    assert failure(lambda: read("a: 1\nb: 2\n").mapping(("a",))) == \
        "in.yaml:2: b: unknown key (known keys: a)"
    assert failure(lambda: read("a: 1\na: 2\n").mapping(("a",))) == "in.yaml:2: a: duplicate key"


def test_values_are_quoted_back_only_where_the_file_may_show_them() -> None:
    secret = read("password: hunter2\n").mapping()["password"]
    assert "hunter2" not in failure(secret.integer)
    shown = read("count: seven\n", shows_values=True).mapping()["count"]
    assert failure(shown.integer) == "in.yaml:1: count: expected an integer, got 'seven'"


def test_errors_about_a_nested_value_name_its_own_line_or_its_keys() -> None:
    text = "tls:\n  cert: a\n"
    assert failure(read(text).mapping()["tls"].string).startswith("in.yaml:2: tls:")
    assert failure(read(text, key_lines=True).mapping()["tls"].string).startswith("in.yaml:1: tls:")


def test_merge_keys_resolve_with_explicit_keys_winning() -> None:
    top = read("base: &b {a: 1, b: 2}\nthis:\n  <<: *b\n  b: 3\n").mapping()
    assert {name: value.integer() for name, value in top["this"].mapping().items()} == {"b": 3, "a": 1}


def test_null_is_an_empty_mapping_or_list_and_converters_speak_for_the_node() -> None:
    keys = read("labels:\nitems:\nwait: soon\n").mapping()
    assert keys["labels"].mapping() == {} and keys["items"].sequence() == []

    def seconds(raw: object) -> float:
        raise ValueError(f"invalid duration {raw!r}")

    assert failure(lambda: keys["wait"].convert(seconds)) == "in.yaml:3: wait: invalid duration 'soon'"


def test_the_document_is_bounded_and_its_errors_are_the_formats() -> None:
    with pytest.raises(FormatError) as caught:
        YamlFile("in.yaml", FormatError).read("a: &x 1\nb: *x\n")
    assert (caught.value.line, caught.value.key) == (2, "yaml")
    assert YamlFile("in.yaml", FormatError).read("") is None


def test_the_line_of_every_key_read_is_kept_for_later_checks() -> None:
    file = YamlFile("in.yaml", FormatError)
    root = file.read("a:\n  b: 1\n  c: [x, y]\n")
    assert root is not None
    root.mapping()["a"].mapping()
    assert file.lines == {"a": 1, "a.b": 2, "a.c": 3}


def test_an_error_factory_for_one_string_exceptions() -> None:
    error = located(ValueError)("in.yaml", 4, "teams.a", "expected a budget above 0")
    assert isinstance(error, ValueError) and str(error) == "in.yaml:4: teams.a: expected a budget above 0"
