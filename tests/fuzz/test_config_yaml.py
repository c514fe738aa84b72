"""``--config-file``: any YAML yields a Config or one ConfigError line (exit 2), in bounded time."""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import given

from exporter.config import OPTIONS, Config, ConfigError, load_config
from tests.fuzz.inputs import HOSTILE_YAML, assert_user_error, within, yaml_texts

KEYS = [option.yaml_key for option in OPTIONS]


def load(text: str) -> Config | ConfigError:
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "config.yaml"
        path.write_text(text, encoding="utf-8", errors="surrogatepass")
        try:
            return within(10, lambda: load_config(["--config-file", str(path)], environ={}))
        except ConfigError as exc:
            return exc


@given(yaml_texts(KEYS))
def test_any_config_file_gives_a_config_or_one_line(text: str) -> None:
    result = load(text)
    if isinstance(result, ConfigError):
        assert_user_error(str(result))
        assert str(result).startswith(("config file ", "/")), str(result)


def test_each_hostile_document_is_refused_with_one_line_naming_the_file() -> None:
    for text in HOSTILE_YAML:
        result = load(text)
        if isinstance(result, ConfigError):
            assert_user_error(str(result))


def test_an_empty_value_names_its_key_and_a_duplicate_key_is_refused() -> None:
    empty = load("collect-interval: 2000\ndebug:\n")
    assert isinstance(empty, ConfigError) and "debug: empty value" in str(empty) and ":2:" in str(empty)
    duplicate = load("debug: true\ndebug: false\n")
    assert isinstance(duplicate, ConfigError) and "debug: duplicate key" in str(duplicate)


def test_an_alias_is_refused_without_quoting_its_name() -> None:
    result = load("kubeconfig: *MyS3cretPassw0rd\n")
    assert isinstance(result, ConfigError) and "alias" in str(result)
    assert_user_error(str(result))
