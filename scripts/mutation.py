"""Mutation testing of the modules where a silent bug would hurt most (mutmut; slow, not part of CI).

Each target is a group of modules and the tests that cover them. For every target this script copies
the working tree (tracked and untracked, not ignored files) into ``.mutation/<target>/``, configures
mutmut there (the project's ``pyproject.toml`` is left untouched), runs it, and reads each mutant's
outcome. A mutant that mypy rejects is not counted (it could never ship). The summary gives per
module: killed, survived, timed out, not covered, and the score ``(killed + timeout) / (total - not
covered)`` (a mutant that makes its tests hang is caught: the suite would not finish; mutmut scores it
the same way). Every survivor is classified by what its only change is, when it is one of mutmut's
string operators (``XX...XX``, upper or lower case):
* ``log wording``: the text of a log message (same ``%`` placeholders, so the line still renders);
* ``log key``: a literal in the key or state of a ``StateLog`` call (``change``/``once``/``forget``)
  that occurs nowhere else in the module: StateLog compares a key and its state only with themselves,
  so renaming a literal used once changes nothing (equivalent);
* ``behaviour``: everything else. See docs/testing.md for how each kind is triaged. ``--json FILE``
writes the results with each survivor's name, kind and diff (``mutmut show NAME`` inside
``.mutation/<target>/`` prints the same diff). docs/testing.md records the last run and the triage.

    python scripts/mutation.py                 # every target
    python scripts/mutation.py health auth     # some targets
    python scripts/mutation.py --list          # what each target mutates and runs
"""

from __future__ import annotations

import argparse
import ast
import difflib
import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
WORK = REPO / ".mutation"


@dataclass(frozen=True)
class Target:
    modules: tuple[str, ...]
    tests: tuple[str, ...]
    why: str
    # Tests left out (a file, or one test by its pytest node id): they never call the target's modules,
    # and fail in mutmut's copy for reasons of their own (timing on a loaded machine, a symlink that
    # mutmut copies as a file), which would stop mutmut before it tests any mutant.
    ignore: tuple[str, ...] = ()


TARGETS: dict[str, Target] = {
    "attribution": Target(
        ("exporter/kube/deviceids.py", "exporter/kube/allocation.py", "exporter/kube/attribution.py"),
        ("tests/kube", "tests/simulator/test_kube_scenario.py"),
        "a wrong device-ID match puts a GPU on the wrong pod's bill",
        ignore=("tests/kube/test_reflector.py", "tests/kube/test_fleet.py")),
    "sampler": Target(
        ("exporter/nvml/sampler.py", "exporter/nvml/client.py"),
        ("tests/nvml", "tests/health/test_wiring.py", "tests/metrics/test_golden.py",
         "tests/simulator/test_cluster_wiring.py"),
        "a failure handled wrongly stops every GPU's metrics or hides a lost GPU"),
    "health": Target(
        ("exporter/health/xid.py", "exporter/health/verdict.py", "exporter/nvml/events.py"),
        ("tests/health", "tests/nvml/test_events.py", "tests/nvml/test_events_failures.py"),
        "a miscounted Xid or a wrong verdict silences the alerts that save jobs"),
    "exposition": Target(
        ("exporter/metrics/exposition.py",),
        ("tests/metrics", "tests/web/test_cache.py", "tests/web/test_server.py"),
        "a malformed exposition fails the whole scrape",
        ignore=("tests/metrics/test_default_counters.py::test_the_image_paths_in_etc_are_links_to_the_packaged_lists",)),
    "auth": Target(
        ("exporter/web/auth.py",),
        ("tests/web",),
        "a wrong comparison lets an unauthenticated client read the metrics"),
}

_RESULT = re.compile(r"^\s*(?P<name>[\w.]+__mutmut_\d+): (?P<status>[\w ]+?)\s*$")
_STATUS = {"killed": "killed", "survived": "survived", "timeout": "timeout", "no tests": "no_tests",
           "caught by type check": "type_error", "suspicious": "suspicious", "skipped": "skipped",
           "segfault": "killed"}


def _copy_tree(destination: Path) -> None:
    listing = ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"]
    files = subprocess.run(listing, cwd=REPO, check=True,  # noqa: S603 - a developer tool, fixed arguments
                           capture_output=True).stdout.decode().split("\0")
    for name in filter(None, files):
        source = REPO / name
        if source.is_file():
            target = destination / name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)


def _configure(work: Path, target: Target) -> None:
    pyproject = work / "pyproject.toml"
    text = pyproject.read_text(encoding="utf-8")
    pytest_args = ["-p", "no:cacheprovider", "-q",
                   *(f"--deselect={path}" if "::" in path else f"--ignore={path}" for path in target.ignore)]
    lines = [
        "", "[tool.mutmut]",
        f"source_paths = {json.dumps(list(target.modules))}",
        f"pytest_add_cli_args_test_selection = {json.dumps(list(target.tests))}",
        f"pytest_add_cli_args = {json.dumps(pytest_args)}",
        'also_copy = ["exporter/", "simulator/", "deploy/", "etc/", "scripts/", "bench/", "README.md"]',
        # mutmut reads mypy's JSON; its trampolines carry "type: ignore" comments strict mode would flag
        f'type_check_command = ["{sys.executable}", "-m", "mypy", "--no-incremental", '
        '"--no-warn-unused-ignores", "--output", "json", "exporter"]',
    ]
    pyproject.write_text(text + "\n".join(lines) + "\n", encoding="utf-8")


# Where the message is among a logging call's positional arguments: logging.Logger's methods, and
# exporter.logs.StateLog's change(key, state, level, message) and once(key, level, message).
LOG_MESSAGE_ARGUMENT = {"debug": 0, "info": 0, "warning": 0, "error": 0, "exception": 0, "critical": 0,
                        "log": 1, "change": 3, "once": 2}
# Where the identity of a state-log line is: change(key, state, ...), once(key, ...), forget(key).
LOG_KEY_ARGUMENTS = {"change": (0, 1), "once": (0,), "forget": (0,)}
_PLACEHOLDER = re.compile(r"%[-#0 +]*\d*(?:\.\d+)?[a-zA-Z%]|\{[^}]*\}")


def _string_constants(node: ast.AST) -> set[int]:
    return {id(part) for part in ast.walk(node) if isinstance(part, ast.Constant) and isinstance(part.value, str)}


def _log_constants(function: ast.AST) -> tuple[set[int], set[int]]:
    """ids of the string constants inside ``function`` that make up a log message, and a state-log key."""
    messages: set[int] = set()
    keys: set[int] = set()
    for node in ast.walk(function):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
            continue
        position = LOG_MESSAGE_ARGUMENT.get(node.func.attr)
        if position is not None and len(node.args) > position:
            messages |= _string_constants(node.args[position])
        for position in LOG_KEY_ARGUMENTS.get(node.func.attr, ()):
            if len(node.args) > position:
                keys |= _string_constants(node.args[position])
    return messages, keys


def _rewords(old: str, new: str) -> bool:
    """mutmut's string operators: "XX" around a literal, or its case flipped; placeholders intact."""
    return (new.replace("XX", "").lower() == old.replace("XX", "").lower()
            and _PLACEHOLDER.findall(new) == _PLACEHOLDER.findall(old))


def classify(original: ast.AST, mutant: ast.AST, literal_counts: Counter[str] | None = None) -> str:
    """``log wording``, ``log key`` or ``behaviour`` (see the module docstring).

    ``literal_counts``: how often each string literal occurs in the original module."""
    messages, keys = _log_constants(original)
    pairs = list(zip(ast.walk(original), ast.walk(mutant), strict=False))
    if len(pairs) != sum(1 for _ in ast.walk(mutant)) or len(pairs) != sum(1 for _ in ast.walk(original)):
        return "behaviour"
    changed: list[tuple[ast.AST, object, object]] = []
    for before, after in pairs:
        if type(before) is not type(after):
            return "behaviour"
        for name, value in ast.iter_fields(before):
            other = getattr(after, name)
            if name == "name" and isinstance(before, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue  # x_f__mutmut_orig against x_f__mutmut_3
            if isinstance(value, list):
                if len(value) != len(other) or any(not isinstance(item, ast.AST) and item != twin
                                                   for item, twin in zip(value, other, strict=True)):
                    return "behaviour"
            elif not isinstance(value, ast.AST) and value != other:
                if not isinstance(before, ast.Constant):
                    return "behaviour"
                changed.append((before, value, other))
    if len(changed) != 1:
        return "behaviour"
    node, old, new = changed[0]
    if not (isinstance(old, str) and isinstance(new, str) and _rewords(old, new)):
        return "behaviour"
    if id(node) in messages:
        return "log wording"
    if id(node) in keys and literal_counts is not None and literal_counts[old] == 1:
        return "log key"
    return "behaviour"


class MutantSource:
    """The trampolined copy of a module under ``mutants/``: each mutant is a function beside the original."""

    def __init__(self, path: Path, original: Path) -> None:
        self.text = path.read_text(encoding="utf-8")
        self.lines = self.text.splitlines()
        self.functions = {node.name: node for node in ast.walk(ast.parse(self.text))
                          if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))}
        self.literals = Counter(node.value for node in ast.walk(ast.parse(original.read_text(encoding="utf-8")))
                                if isinstance(node, ast.Constant) and isinstance(node.value, str))

    def _source(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> str:
        start = min([node.lineno] + [decorator.lineno for decorator in node.decorator_list])
        return textwrap.dedent("\n".join(self.lines[start - 1:node.end_lineno])) + "\n"

    def judge(self, function: str) -> tuple[str, str]:
        """(kind, unified diff) of one mutant, by its function name (``x_f__mutmut_3``)."""
        mutant = self.functions.get(function)
        original = self.functions.get(re.sub(r"__mutmut_\d+$", "__mutmut_orig", function))
        if mutant is None or original is None:
            return "behaviour", ""
        before = self._source(original).replace(original.name, function, 1)
        diff = "".join(difflib.unified_diff(before.splitlines(keepends=True),
                                            self._source(mutant).splitlines(keepends=True), n=2))
        return classify(original, mutant, self.literals), diff.split("\n", 2)[-1]


def _module_of(mutant: str, modules: tuple[str, ...]) -> str:
    dotted = {module.removesuffix(".py").replace("/", "."): module for module in modules}
    return next((path for name, path in dotted.items() if mutant.startswith(name + ".")), "?")


def run_target(name: str, target: Target, max_children: int) -> dict[str, object]:
    work = WORK / name
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    _copy_tree(work)
    _configure(work, target)
    started = time.monotonic()
    env = {**os.environ, "PYTHONWARNINGS": "ignore::UserWarning"}
    command = [sys.executable, "-m", "mutmut", "run", "--max-children", str(max_children)]
    run = subprocess.run(command, cwd=work, env=env, capture_output=True, text=True,  # noqa: S603 - fixed arguments
                         check=False)
    if run.returncode != 0:
        sys.stderr.write(run.stdout[-4000:] + run.stderr[-4000:])
        raise SystemExit(f"mutmut failed for target {name} (exit {run.returncode})")
    results = subprocess.run([sys.executable, "-m", "mutmut", "results", "--all", "true"],
                             cwd=work, env=env, capture_output=True, text=True, check=True).stdout
    per_module: dict[str, Counter[str]] = {module: Counter() for module in target.modules}
    survivors: dict[str, list[dict[str, str]]] = {module: [] for module in target.modules}
    sources = {module: MutantSource(work / "mutants" / module, work / module) for module in target.modules
               if (work / "mutants" / module).is_file()}
    for line in results.splitlines():
        match = _RESULT.match(line)
        if match is None:
            continue
        module = _module_of(match["name"], target.modules)
        status = _STATUS.get(match["status"], match["status"].replace(" ", "_"))
        per_module.setdefault(module, Counter())[status] += 1
        if status in {"survived", "suspicious"}:
            function = match["name"].rsplit(".", 1)[-1]
            kind, diff = sources[module].judge(function) if module in sources else ("behaviour", "")
            per_module[module][kind.replace(" ", "_")] += 1
            survivors.setdefault(module, []).append({"name": match["name"], "kind": kind, "diff": diff})
    modules = {}
    for module, counts in per_module.items():
        caught = counts["killed"] + counts["timeout"]
        judged = caught + counts["survived"] + counts["suspicious"]
        modules[module] = {**counts, "score": round(caught / judged, 4) if judged else None,
                           "survivors": sorted(survivors.get(module, []), key=lambda item: item["name"])}
    return {"target": name, "why": target.why, "tests": list(target.tests),
            "seconds": round(time.monotonic() - started), "modules": modules}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("targets", nargs="*", choices=[[], *TARGETS], help="default: all")
    parser.add_argument("--max-children", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--json", type=Path, help="write the results (with survivors) to this file")
    parser.add_argument("--list", action="store_true", help="print the targets and exit")
    args = parser.parse_args(argv)
    if args.list:
        for name, target in TARGETS.items():
            ignored = f" (not {', '.join(target.ignore)})" if target.ignore else ""
            print(f"{name}: {', '.join(target.modules)}\n    tests: {', '.join(target.tests)}{ignored}\n"
                  f"    why: {target.why}")
        return 0
    report = []
    for name in args.targets or list(TARGETS):
        result = run_target(name, TARGETS[name], args.max_children)
        report.append(result)
        for module, counts in result["modules"].items():  # type: ignore[attr-defined]
            print(f"{name:12} {module:34} killed {counts.get('killed', 0):4}  timeout {counts.get('timeout', 0):2}  "
                  f"survived {counts.get('survived', 0):3} (log wording {counts.get('log_wording', 0):3}, "
                  f"log key {counts.get('log_key', 0):3})  "
                  f"no tests {counts.get('no_tests', 0):3}  type errors {counts.get('type_error', 0):3}  "
                  f"score {counts['score']}", flush=True)
            for survivor in counts["survivors"]:
                if survivor["kind"] == "behaviour":
                    print(f"    survived: {survivor['name']}", flush=True)
        print(f"{name}: {result['seconds']} s", flush=True)
    if args.json:
        args.json.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
