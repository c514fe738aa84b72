#!/usr/bin/env python3
"""Write the facts of one dcgm-exporter release's interface, read from upstream's own files.

Usage (scripts/upstream-corpus runs this module in the project's environment):
    scripts/upstream-corpus REPOSITORY RELEASE      # a dcgm-exporter git repository and a release tag
    scripts/upstream-corpus DIRECTORY RELEASE       # a directory holding that release's files

It writes ``upstream/dcgm-exporter/RELEASE.json`` (see upstream/README.md): every flag (name,
aliases, environment variables, type, default), the chart's values with their released defaults
(nulls included; comments and prose are not data), the counters CSVs' rows (the commented-out rows
apart: users uncomment them), the config-file schema versions and keys, and the example DaemonSet's
container args and environment. The tests iterate over these files; nothing in them is written by
hand, so our reading of upstream can only be as wrong as upstream's own files.

Why a reader of Go source and not of ``dcgm-exporter --help``: running upstream's binary needs
libdcgm and a GPU, and a release's ``--help`` is not published for every tag. The flags are
urfave/cli literals (``&cli.StringFlag{Name: ..., Aliases: ..., Value: ..., EnvVars: ...}``) whose
names and defaults are string constants of the same package: a small reader of those literals and
constants is enough, and it fails loudly (naming the file and the expression) on anything it cannot
resolve instead of guessing.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "upstream" / "dcgm-exporter"
SCHEMA_VERSION = 1
GIT = shutil.which("git") or "git"

# Where each fact lives in a dcgm-exporter tree (the same paths from 4.5.x-4.8.x on).
FLAG_SOURCES = ("pkg/cmd",)  # the package whose urfave/cli literals are the flags
CONST_SOURCES = ("pkg/cmd", "internal/pkg/appconfig")  # packages whose constants the literals name
CONFIG_SCHEMA_SOURCES = ("internal/pkg/appconfig",)
VALUES = "deployment/values.yaml"
CHART = "deployment/Chart.yaml"
CHART_COUNTERS_TEMPLATE = "deployment/templates/metrics-configmap.yaml"
CSVS = ("etc/default-counters.csv", "etc/dcp-metrics-included.csv", "etc/1.x-compatibility-metrics.csv")
EXAMPLE_DAEMONSETS = ("dcgm-exporter.yaml", "deployment/examples/dcgm-exporter.yaml")


class CorpusError(Exception):
    """Upstream's files say something this reader cannot resolve; the message names file and text."""


# ------------------------------------------------------------------------------------------------
# Reading a release's files: a git tag, or a directory of files.


class Tree:
    """The files of one release."""

    def read(self, path: str) -> str | None:
        raise NotImplementedError

    def listdir(self, path: str) -> list[str]:
        raise NotImplementedError

    def describe(self) -> dict[str, str]:
        raise NotImplementedError


class GitTree(Tree):
    def __init__(self, repository: Path, release: str) -> None:
        self.repository = repository
        self.release = release
        done = self._git("rev-parse", f"{release}^{{commit}}")
        if done.returncode != 0:
            raise CorpusError(f"{repository}: no release tag {release}: {done.stderr.strip()}")
        self.commit = done.stdout.strip()

    def _git(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([GIT, "-C", str(self.repository), *args], capture_output=True, text=True, check=False)

    def read(self, path: str) -> str | None:
        done = self._git("show", f"{self.commit}:{path}")
        return done.stdout if done.returncode == 0 else None

    def listdir(self, path: str) -> list[str]:
        done = self._git("ls-tree", "--name-only", f"{self.commit}:{path}")
        return sorted(done.stdout.split()) if done.returncode == 0 else []

    def describe(self) -> dict[str, str]:
        return {"kind": "git tag", "tag": self.release, "commit": self.commit}


class DirectoryTree(Tree):
    """A release's files laid out as in the repository (e.g. assembled file by file from stored copies,
    with a PROVENANCE.md saying where each came from)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def read(self, path: str) -> str | None:
        file = self.directory / path
        return file.read_text(encoding="utf-8") if file.is_file() else None

    def listdir(self, path: str) -> list[str]:
        folder = self.directory / path
        return sorted(entry.name for entry in folder.iterdir()) if folder.is_dir() else []

    def describe(self) -> dict[str, str]:
        provenance = self.directory / "PROVENANCE.md"
        described = {"kind": "directory of the release's files"}
        if provenance.is_file():
            commits = sorted(set(re.findall(r"\b[0-9a-f]{40}\b", provenance.read_text(encoding="utf-8"))))
            described["commits"] = ", ".join(commits)
        return described


# ------------------------------------------------------------------------------------------------
# Go source: constants and urfave/cli flag literals.

_GO_STRING = r'"(?:[^"\\\n]|\\.)*"|`[^`]*`'


def _go_files(tree: Tree, package: str) -> Iterator[tuple[str, str]]:
    for name in tree.listdir(package):
        if name.endswith(".go") and not name.endswith("_test.go"):
            text = tree.read(f"{package}/{name}")
            if text is not None:
                yield f"{package}/{name}", _strip_comments(text)


def _strip_comments(text: str) -> str:
    """Go source without comments (strings kept), so a commented-out flag is not read as one."""
    out: list[str] = []
    index = 0
    while index < len(text):
        char = text[index]
        if char in "\"`":
            end = _string_end(text, index)
            out.append(text[index:end])
            index = end
        elif text.startswith("//", index):
            index = text.find("\n", index)
            index = len(text) if index < 0 else index
        elif text.startswith("/*", index):
            end = text.find("*/", index + 2)
            index = len(text) if end < 0 else end + 2
        else:
            out.append(char)
            index += 1
    return "".join(out)


def _string_end(text: str, start: int) -> int:
    quote = text[start]
    index = start + 1
    while index < len(text):
        if quote == '"' and text[index] == "\\":
            index += 2
            continue
        if text[index] == quote:
            return index + 1
        index += 1
    return len(text)


def _go_string_value(literal: str) -> str:
    if literal.startswith("`"):
        return literal[1:-1]
    return str(json.loads(literal)) if "\\x" not in literal else literal[1:-1]


def read_constants(tree: Tree) -> dict[str, str]:
    """Every ``Name = expression`` (and ``Name Type = expression``) of a const block in the packages the
    flags name, as Go source text (``resolve`` evaluates it), keyed by bare name and ``package.Name``."""
    constants: dict[str, str] = {}
    assignment = re.compile(r"^\s*(\w+)(?:\s+[\w.]+)?\s*=\s*(.+?)\s*$", re.MULTILINE)
    for package in CONST_SOURCES:
        short = package.rsplit("/", 1)[-1]
        for _path, text in _go_files(tree, package):
            blocks = [block.group(1) for block in re.finditer(r"\bconst\s*\((.*?)\n\)", text, re.DOTALL)]
            blocks += [single.group(0)[len("const"):] for single in re.finditer(r"\bconst\s+\w+[^\n(]*=[^\n]+", text)]
            for block in blocks:
                for name, expression in assignment.findall(block):
                    constants.setdefault(name, expression)
                    constants[f"{short}.{name}"] = expression
    return constants


def _split_top_level(body: str) -> list[str]:
    """``a: b, c: f(x, y), ...`` split at the commas outside brackets and strings."""
    parts: list[str] = []
    depth = 0
    start = 0
    index = 0
    while index < len(body):
        char = body[index]
        if char in "\"`":
            index = _string_end(body, index)
            continue
        if char in "([{":
            depth += 1
        elif char in ")]}":
            depth -= 1
        elif char == "," and depth == 0:
            parts.append(body[start:index])
            start = index + 1
        index += 1
    parts.append(body[start:])
    return [part.strip() for part in parts if part.strip()]


def _literal_body(text: str, open_brace: int) -> str:
    depth = 0
    index = open_brace
    while index < len(text):
        char = text[index]
        if char in "\"`":
            index = _string_end(text, index)
            continue
        if char == "{":
            depth += 1
        elif char == "}":
            depth -= 1
            if depth == 0:
                return text[open_brace + 1:index]
        index += 1
    raise CorpusError("unbalanced braces in a flag literal")


_DURATION_UNITS = {"Nanosecond": 1e-9, "Microsecond": 1e-6, "Millisecond": 1e-3, "Second": 1.0, "Minute": 60.0,
                   "Hour": 3600.0}


def resolve(expression: str, constants: dict[str, str], where: str, depth: int = 0) -> Any:
    """The value of a flag literal's expression, or CorpusError naming it."""
    expression = expression.strip()
    if depth > 10:
        raise CorpusError(f"{where}: constants refer to each other in a loop at {expression!r}")
    if re.fullmatch(_GO_STRING, expression):
        return _go_string_value(expression)
    if re.fullmatch(r"-?\d+", expression):
        return int(expression)
    if expression in ("true", "false"):
        return expression == "true"
    if expression in constants:
        return resolve(constants[expression], constants, where, depth + 1)
    # int((5 * time.Minute).Milliseconds()) and friends: a duration as a number of milliseconds.
    if match := re.fullmatch(r"int\(\((\d+)\s*\*\s*time\.(\w+)\)\.Milliseconds\(\)\)", expression):
        return round(int(match.group(1)) * _DURATION_UNITS[match.group(2)] * 1000)
    if match := re.fullmatch(r"(?:string|int|int64|uint|uint64)\((.+)\)", expression):
        value = resolve(match.group(1), constants, where, depth + 1)
        return str(value) if expression.startswith("string") else value
    if match := re.fullmatch(r"(.+)\.String\(\)", expression):  # a time.Duration's text: resolved as one
        return str(resolve(match.group(1), constants, where, depth + 1))
    if match := re.fullmatch(r"\[\]string\{(.*)\}", expression, re.DOTALL):
        return [resolve(item, constants, where, depth + 1) for item in _split_top_level(match.group(1))]
    if match := re.fullmatch(r"cli\.NewStringSlice\((.*)\)", expression, re.DOTALL):
        return [resolve(item, constants, where, depth + 1) for item in _split_top_level(match.group(1))]
    if match := re.fullmatch(r"(\d+)\s*\*\s*time\.(\w+)", expression):
        return _go_duration_text(int(match.group(1)) * _DURATION_UNITS[match.group(2)])
    if match := re.fullmatch(r"time\.(\w+)", expression):
        return _go_duration_text(_DURATION_UNITS[match.group(1)])
    raise CorpusError(f"{where}: cannot resolve the expression {expression!r}")


def _go_duration_text(seconds: float) -> str:
    """Go's time.Duration.String() for whole units (what ``--help`` shows as the default)."""
    if seconds >= 3600 and seconds % 3600 == 0:
        return f"{int(seconds // 3600)}h0m0s"
    if seconds >= 60 and seconds % 60 == 0:
        return f"{int(seconds // 60)}m0s"
    if seconds >= 1:
        return f"{seconds:g}s"
    return f"{round(seconds * 1000)}ms"


_FLAG_TYPES = {"String": "string", "Bool": "bool", "Int": "int", "Int64": "int", "Uint": "int", "Float64": "float",
               "Duration": "duration", "StringSlice": "string list", "IntSlice": "int list", "Generic": "string",
               "Path": "string"}


def read_flags(tree: Tree) -> list[dict[str, Any]]:
    constants = read_constants(tree)
    flags: list[dict[str, Any]] = []
    for package in FLAG_SOURCES:
        for path, text in _go_files(tree, package):
            for match in re.finditer(r"&cli\.(\w+)Flag\s*\{", text):
                kind = match.group(1)
                body = _literal_body(text, match.end() - 1)
                where = f"{path}: &cli.{kind}Flag"
                fields: dict[str, str] = {}
                for part in _split_top_level(body):
                    key, sep, value = part.partition(":")
                    if sep:
                        fields[key.strip()] = value.strip()
                if "Name" not in fields:
                    raise CorpusError(f"{where}: a flag literal without Name")
                name = str(resolve(fields["Name"], constants, where))
                if kind not in _FLAG_TYPES:
                    raise CorpusError(f"{where} --{name}: unknown flag type {kind}")
                entry: dict[str, Any] = {
                    "name": name,
                    "aliases": [str(a) for a in resolve(fields["Aliases"], constants, where)]
                    if "Aliases" in fields else [],
                    "env": [str(e) for e in resolve(fields["EnvVars"], constants, where)]
                    if "EnvVars" in fields else [],
                    "type": _FLAG_TYPES[kind],
                }
                if "Value" in fields:
                    try:
                        entry["default"] = resolve(fields["Value"], constants, where)
                    except CorpusError:
                        entry["default_go"] = fields["Value"]  # shown as Go wrote it; never guessed
                else:
                    entry["default"] = {"bool": False, "int": 0, "string list": [], "int list": []}.get(entry["type"],
                                                                                                        "")
                if fields.get("Hidden", "false").strip() == "true":
                    entry["hidden"] = True
                flags.append(entry)
    if not flags:
        raise CorpusError("no urfave/cli flag literal found under " + ", ".join(FLAG_SOURCES))
    names = [flag["name"] for flag in flags]
    if len(set(names)) != len(names):
        raise CorpusError(f"a flag is declared twice: {sorted(n for n in names if names.count(n) > 1)}")
    return sorted(flags, key=lambda flag: str(flag["name"]))


# ------------------------------------------------------------------------------------------------
# The config file (--config-file, 4.8.3 on): the YAML keys of the structs the reader decodes into.


def read_config_schema(tree: Tree) -> dict[str, Any] | None:
    structs: dict[str, list[tuple[str, str]]] = {}
    versions: set[int] = set()
    for package in CONFIG_SCHEMA_SOURCES:
        for _path, text in _go_files(tree, package):
            for match in re.finditer(r"\btype\s+(\w+)\s+struct\s*\{", text):
                body = _literal_body(text, match.end() - 1)
                fields = []
                for line in body.split("\n"):
                    tag = re.search(r'`[^`]*yaml:"([^",]*)[^`]*`', line)
                    if tag and tag.group(1) not in ("", "-"):
                        go_type = line.strip().split()[1] if len(line.strip().split()) > 1 else ""
                        fields.append((tag.group(1), go_type))
                if fields:
                    structs[match.group(1)] = fields
            for name, literal in re.findall(r"\b(\w*[Vv]ersion\w*)\s*(?:\w+\s*)?=\s*(\d+)\b", text):
                if "yaml" in name.lower() or "config" in name.lower() or "schema" in name.lower():
                    versions.add(int(literal))
    roots = [name for name, fields in structs.items() if any(key == "version" for key, _ in fields)]
    if not roots:
        return None

    def expand(type_name: str, seen: tuple[str, ...]) -> Any:
        bare = type_name.lstrip("*[]")
        bare = bare.split(".")[-1]
        if bare.startswith("map"):
            return {"<map>": bare}
        if bare not in structs or bare in seen:
            return bare
        tree_: dict[str, Any] = {}
        for key, go_type in structs[bare]:
            expanded = expand(go_type, (*seen, bare))
            tree_[key] = [expanded] if go_type.startswith("[]") else expanded
        return tree_

    schema = {root: expand(root, ()) for root in sorted(roots)}
    return {"versions": sorted(versions), "structs": schema}


# ------------------------------------------------------------------------------------------------
# Counters CSVs, values, chart, example DaemonSet.

_ROW = re.compile(r"^\s*(DCGM_[A-Za-z0-9_]+|[a-z][a-z0-9_]+)\s*,\s*([A-Za-z]+)\s*,\s*(.*?)\s*$")


def read_csv_rows(text: str) -> dict[str, list[list[str]]]:
    rows: list[list[str]] = []
    commented: list[list[str]] = []
    for line in text.splitlines():
        stripped = line.strip()
        if not stripped:
            continue
        target = rows
        if stripped.startswith("#"):
            stripped = stripped.lstrip("#").strip()
            target = commented
        match = _ROW.match(stripped)
        if match and match.group(2).lower() in ("gauge", "counter", "label", "histogram", "summary"):
            target.append([match.group(1), match.group(2), match.group(3)])
    return {"rows": rows, "commented_rows": commented}


def read_chart_counters(template: str) -> dict[str, list[list[str]]] | None:
    """The CSV the chart's metrics ConfigMap carries when customMetrics is empty (its else branch)."""
    match = re.search(r"\{\{-?\s*else\s*-?\}\}(.*?)\{\{-?\s*end\s*-?\}\}", template, re.DOTALL)
    if match is None:
        return None
    body = match.group(1).split("metrics: |", 1)[-1]
    return read_csv_rows(body)


def read_daemonset(text: str) -> dict[str, Any] | None:
    for document in yaml.safe_load_all(text):
        if isinstance(document, dict) and document.get("kind") == "DaemonSet":
            containers = document["spec"]["template"]["spec"]["containers"]
            container = containers[0]
            return {"image": container.get("image"), "args": [str(a) for a in container.get("args") or []],
                    "env": container.get("env") or []}
    return None


def release_versions(release: str) -> tuple[str, str]:
    match = re.fullmatch(r"(\d+\.\d+\.\d+)-(\d+\.\d+\.\d+)", release)
    if match is None:
        raise CorpusError(f"{release}: a dcgm-exporter release is <DCGM version>-<exporter version>, e.g. 4.6.1-4.8.4")
    return match.group(1), match.group(2)


def build_record(tree: Tree, release: str) -> dict[str, Any]:
    dcgm, exporter = release_versions(release)
    values_text = tree.read(VALUES)
    chart_text = tree.read(CHART)
    if values_text is None or chart_text is None:
        raise CorpusError(f"{release}: {VALUES} or {CHART} is missing")
    chart = yaml.safe_load(chart_text)
    csvs: dict[str, Any] = {}
    for path in CSVS:
        text = tree.read(path)
        if text is not None:
            csvs[path] = read_csv_rows(text)
    template = tree.read(CHART_COUNTERS_TEMPLATE)
    if template is not None and (chart_rows := read_chart_counters(template)) is not None:
        csvs[CHART_COUNTERS_TEMPLATE] = chart_rows
    daemonsets = {}
    for path in EXAMPLE_DAEMONSETS:
        text = tree.read(path)
        if text is not None and (daemonset := read_daemonset(text)) is not None:
            daemonsets[path] = daemonset
    return {
        "corpus_schema": SCHEMA_VERSION,
        "release": release,
        "dcgm_version": dcgm,
        "exporter_version": exporter,
        "source": tree.describe(),
        "flags": read_flags(tree),
        "config_file": read_config_schema(tree),
        "chart": {"version": str(chart.get("version")), "appVersion": str(chart.get("appVersion")),
                  "values": yaml.safe_load(values_text)},
        "csv": csvs,
        "example_daemonsets": daemonsets,
    }


def write_record(record: dict[str, Any], out: Path) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{record['release']}.json"
    path.write_text(json.dumps(record, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    return path


def open_tree(source: Path, release: str) -> Tree:
    if (source / "HEAD").is_file() or (source / ".git").exists():
        return GitTree(source, release)
    if source.is_dir():
        return DirectoryTree(source)
    raise CorpusError(f"{source}: neither a git repository nor a directory")


def main(argv: list[str] | None = None, out: Path = CORPUS, on_error: Callable[[str], None] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("source", type=Path, help="a dcgm-exporter git repository, or a directory of one release")
    parser.add_argument("release", help="the release tag, e.g. 4.6.1-4.8.4")
    parser.add_argument("--out", type=Path, default=out, help=f"where to write RELEASE.json (default: {out})")
    args = parser.parse_args(argv)
    try:
        path = write_record(build_record(open_tree(args.source, args.release), args.release), args.out)
    except CorpusError as exc:
        (on_error or (lambda text: print(f"upstream-corpus: {text}", file=sys.stderr)))(str(exc))
        return 2
    print(f"wrote {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
