"""How a setting is declared, spelled and parsed: the vocabulary of ``exporter.config``.

A setting is declared once, as a field of ``exporter.config.Config`` whose default is ``setting(...)``:
the flags, the environment variable, the parser and the help text travel in the field's metadata, and
``declared_options(Config)`` reads them back as ``Option`` values that drive argparse, the environment
lookup, the YAML keys (``--config-file``) and dcgm-exporter's own config format
(``exporter.upstream_config``). So the field's name, type and default and its spellings cannot drift.

This module imports nothing of the exporter's configuration, so both ``exporter.config`` and
``exporter.upstream_config`` can use it without importing each other's private names.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, Self

from exporter.units import parse_go_duration


class ConfigError(Exception):
    """A user mistake in configuration; ``str(self)`` is the single line shown to the user."""

    def __init__(self, source: str, key: str, message: str) -> None:
        self.source = source
        self.key = key
        self.message = message
        # One line, whatever the input held: a key or value with a newline or control character in
        # it is shown escaped (it came from the user's file and is quoted back in the message).
        super().__init__(one_line(f"{source}: {key}: {message}"))

    @classmethod
    def at(cls, file: str, line: int | None, key: str, message: str) -> Self:
        """The error at ``file:line`` (``safeyaml.YamlFile``'s error factory for every ConfigError kind)."""
        return cls(f"{file}:{line}" if line is not None else file, key, message)


def one_line(text: str) -> str:
    if text.isprintable():
        return text
    return "".join(ch if ch.isprintable() else repr(ch)[1:-1] for ch in text)


# ---------------------------------------------------------------------------------------------
# Value parsers. Each takes the raw text (or YAML scalar) and returns the typed value, or raises
# ValueError with a message that says what was expected.


# Go's strconv.ParseBool spellings (1, t, T, TRUE, true, True and their false twins), which
# dcgm-exporter's urfave/cli applies to every DCGM_EXPORTER_* switch, plus yes/no/on/off (this
# exporter's own earlier manifests use them). Compared case-insensitively: a superset of Go's.
_TRUE = frozenset({"1", "t", "true", "yes", "on"})
_FALSE = frozenset({"0", "f", "false", "no", "off", ""})


def parse_bool(raw: object) -> bool:
    if isinstance(raw, bool):
        return raw
    text = str(raw).strip().lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise ValueError(f"invalid boolean {shown(raw)}: expected true or false (or Go's 1, t, T, 0, f, F)")


def parse_duration_s(raw: object) -> float:
    """A Go ``time.Duration`` as dcgm-exporter's flags take it (``10s``, ``1m30s``, ``500ms``) -> seconds.

    Bounded to (0, 1 h]: a web timeout of zero would disable it (Go's meaning), which this server
    does not allow, and longer than an hour is a typo.
    """
    text = parse_str(raw).strip()
    seconds = parse_go_duration(text)
    if not 0 < seconds <= 3600:
        raise ValueError(f"invalid duration {shown(text)}: must be more than 0 and at most 1h")
    return seconds


def parse_retention_age(raw: object) -> str:
    """dcgm-exporter 4.8.4's field-watch age: a Go duration, ``0`` (no age limit) included; kept as given."""
    text = parse_str(raw).strip()
    if text not in ("0", "0s"):
        seconds = parse_go_duration(text)  # raises ValueError naming the text
        if seconds < 0:
            raise ValueError(f"invalid duration {shown(text)}: must not be negative")
    return text


# Every interval and window has an upper bound: a value past what a timer can wait would end the
# thread that waits on it (``Event.wait`` raises OverflowError), and nobody means a day anyway.
MAX_INTERVAL_MS = 24 * 3600 * 1000
_MAX_INT_DIGITS = 30


def shown(raw: object) -> str:
    """A user's value as quoted in an error: at most 40 characters of it."""
    text = repr(raw)
    return text if len(text) <= 40 else text[:37] + "..."


def positive_int(minimum: int, unit: str, maximum: int = MAX_INTERVAL_MS) -> Callable[[object], int]:
    def parse(raw: object) -> int:
        if isinstance(raw, bool):
            raise ValueError(f"invalid value {raw!r}: expected an integer number of {unit}")
        text = str(raw).strip()
        invalid = ValueError(f"invalid value {shown(raw)}: expected an integer number of {unit} (at most {maximum})")
        if len(text) > _MAX_INT_DIGITS:  # int() of thousands of digits is slow or refused; no setting is that large
            raise invalid
        try:
            value = int(text)
        except ValueError:
            raise invalid from None
        if value < minimum:
            raise ValueError(f"invalid value {value}: must be at least {minimum} {unit}")
        if value > maximum:
            raise ValueError(f"invalid value {value}: must be at most {maximum} {unit}")
        return value

    return parse


def parse_str(raw: object) -> str:
    if isinstance(raw, list | dict):
        raise ValueError(f"expected a string, got a {'list' if isinstance(raw, list) else 'mapping'}")
    return "" if raw is None else str(raw)


def parse_list(raw: object) -> tuple[str, ...]:
    """Comma-separated text (flags, environment) or a YAML list."""
    if raw is None:
        return ()
    items = [str(item) for item in raw] if isinstance(raw, list) else str(raw).split(",")
    return tuple(item.strip() for item in items if item.strip())


def choice(*choices: str) -> Callable[[object], str]:
    def parse(raw: object) -> str:
        text = parse_str(raw).strip()
        if text not in choices:
            raise ValueError(f"invalid value {shown(text)}: expected one of {', '.join(choices)}")
        return text

    return parse


_ADDRESS = re.compile(r"^(?:\[(?P<v6>[0-9a-fA-F:.]+)\]|(?P<host>[^:\[\]]*)):(?P<port>\d{1,5})$")


def parse_address(raw: object) -> str:
    text = parse_str(raw).strip()
    match = _ADDRESS.match(text)
    if not match or not 0 <= int(match.group("port")) <= 65535:
        raise ValueError(f"invalid listen address {shown(text)}: expected [host]:port, e.g. :9400 or [::]:9400")
    return text


def parse_regex_list(raw: object) -> tuple[str, ...]:
    patterns = parse_list(raw)
    for pattern in patterns:
        try:
            re.compile(pattern)
        except re.error as exc:
            raise ValueError(f"invalid regular expression {pattern!r}: {exc}") from None
    return patterns


_DNS_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_CONFIGMAP = re.compile(rf"^(?P<namespace>{_DNS_LABEL}):(?P<name>{_DNS_LABEL}(\.{_DNS_LABEL})*)$")


@dataclass(frozen=True)
class ConfigMapRef:
    """A ConfigMap named by dcgm-exporter's ``-m namespace:name``: parsed (and checked as DNS names) once,
    here, so the exporter, its RBAC check in ``doctor`` and the messages read the two parts, never the text."""

    namespace: str
    name: str

    def __str__(self) -> str:
        """As the user writes it (``namespace:name``), for ``--help`` and messages about the flag."""
        return f"{self.namespace}:{self.name}"

    @property
    def path(self) -> str:
        """``namespace/name``, as kubectl and the API server's messages name it."""
        return f"{self.namespace}/{self.name}"


def parse_configmap(raw: object) -> ConfigMapRef | None:
    """dcgm-exporter's ``-m namespace:name``; its default ``none`` (and empty) means no ConfigMap (None)."""
    text = parse_str(raw).strip()
    if text in ("", "none"):
        return None
    match = _CONFIGMAP.match(text)
    if not match or len(match.group("name")) > 253:
        raise ValueError(f"invalid ConfigMap {text!r}: expected <namespace>:<name>, e.g. "
                         "gpu-monitoring:exporter-metrics-config-map")
    return ConfigMapRef(match.group("namespace"), match.group("name"))


_DRA_DRIVER = re.compile(rf"^{_DNS_LABEL}(\.{_DNS_LABEL})*$")


def parse_dra_drivers(raw: object) -> tuple[str, ...]:
    """DRA driver names: DNS subdomains (``gpu.nvidia.com``), as ResourceSlice ``spec.driver`` requires."""
    drivers = parse_list(raw)
    if not drivers:
        raise ValueError("expected at least one DRA driver name, e.g. gpu.nvidia.com")
    for driver in drivers:
        if len(driver) > 63 or not _DRA_DRIVER.match(driver):
            raise ValueError(f"invalid DRA driver name {shown(driver)}: expected a DNS subdomain such as "
                             "gpu.nvidia.com")
    return drivers


_TEAM_SOURCE = re.compile(r"^(pod|namespace):[A-Za-z0-9._/-]+$")


@dataclass(frozen=True)
class TeamSource:
    """One place the ``team`` label can come from: a pod's or its namespace's label ``key``."""

    kind: Literal["pod", "namespace"]
    key: str

    def __str__(self) -> str:
        return f"{self.kind}:{self.key}"


def parse_team_sources(raw: object) -> tuple[TeamSource, ...]:
    """``pod:<key>`` / ``namespace:<key>`` items, parsed here once into ``TeamSource`` values."""
    sources: list[TeamSource] = []
    for source in parse_list(raw):
        if not _TEAM_SOURCE.match(source):
            raise ValueError(f"invalid label source {source!r}: expected pod:<label-key> or namespace:<label-key>")
        kind, _, key = source.partition(":")
        sources.append(TeamSource("pod" if kind == "pod" else "namespace", key))
    return tuple(sources)


# ---------------------------------------------------------------------------------------------
# The declaration: one ``setting(...)`` per ``Config`` field.


@dataclass(frozen=True)
class Option:
    """One setting: how it is spelled on each source and how its value is parsed."""

    attr: str
    flags: tuple[str, ...]
    env: str | None
    parse: Callable[[object], Any]
    default: Any
    help: str
    is_switch: bool = False  # a flag that takes no value (``-k``) but accepts a value in env/YAML
    # dcgm-exporter flags that mean nothing without DCGM: accepted (an upstream command line must keep
    # working), and when set to anything but the default, one warning line at start says why.
    no_effect: str = ""

    @property
    def long_flag(self) -> str:
        return next(flag for flag in self.flags if flag.startswith("--"))

    @property
    def yaml_key(self) -> str:
        return self.long_flag[2:]


def convert(option: Option, raw: object, where: str) -> Any:
    try:
        return option.parse(raw)
    except ValueError as exc:
        raise ConfigError(where, option.yaml_key, str(exc)) from None


_SPELLING = "exporter.options.spelling"


@dataclass(frozen=True)
class _Spelling:
    flags: tuple[str, ...]
    env: str | None
    parse: Callable[[object], Any]
    help: str
    is_switch: bool
    no_effect: str


def setting(flags: tuple[str, ...], env: str | None, parse: Callable[[object], Any], default: Any, help: str,
            *, is_switch: bool = False, no_effect: str = "") -> Any:
    """A ``Config`` field declared with its spellings: ``collectors: str = setting(("-f", ...), ...)``."""
    return dataclasses.field(default=default, metadata={
        _SPELLING: _Spelling(flags, env, parse, help, is_switch, no_effect)})


def declared_options(settings: type) -> tuple[Option, ...]:
    """Every field of ``settings`` declared with ``setting(...)``, in declaration order."""
    options = []
    for item in dataclasses.fields(settings):
        spelling = item.metadata.get(_SPELLING)
        if spelling is not None:
            options.append(Option(item.name, spelling.flags, spelling.env, spelling.parse, item.default,
                                  spelling.help, spelling.is_switch, spelling.no_effect))
    return tuple(options)
