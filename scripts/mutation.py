"""Mutation testing of the modules where a silent bug would hurt most (mutmut; slow, not part of CI).

Each target is a group of modules and the tests that cover them. For every target this script copies
the working tree (tracked and untracked, not ignored files) into ``.mutation/<target>/``, configures
mutmut there (the project's ``pyproject.toml`` is left untouched), runs it, and reads each mutant's
outcome. A mutant that mypy rejects is not counted (it could never ship). The summary gives per
module: killed, survived, timed out, not covered, and the score ``killed / (total - not covered)``;
``--json FILE`` writes it with the name of every surviving mutant (``mutmut show NAME`` inside
``.mutation/<target>/`` prints its diff). docs/testing.md records the last run and the triage.

    python scripts/mutation.py                 # every target
    python scripts/mutation.py health auth     # some targets
    python scripts/mutation.py --list          # what each target mutates and runs
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
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


TARGETS: dict[str, Target] = {
    "attribution": Target(
        ("exporter/kube/deviceids.py", "exporter/kube/allocation.py", "exporter/kube/attribution.py"),
        ("tests/kube/test_deviceids.py", "tests/kube/test_allocation.py", "tests/kube/test_attribution.py",
         "tests/kube/test_series.py"),
        "a wrong device-ID match puts a GPU on the wrong pod's bill"),
    "sampler": Target(
        ("exporter/nvml/sampler.py", "exporter/nvml/client.py"),
        ("tests/nvml/test_sampler.py", "tests/nvml/test_mig.py", "tests/nvml/test_gpm.py",
         "tests/nvml/test_sampler_dependencies.py"),
        "a failure handled wrongly stops every GPU's metrics or hides a lost GPU"),
    "health": Target(
        ("exporter/health/xid.py", "exporter/health/verdict.py", "exporter/nvml/events.py"),
        ("tests/health", "tests/nvml/test_events.py"),
        "a miscounted Xid or a wrong verdict silences the alerts that save jobs"),
    "exposition": Target(
        ("exporter/metrics/exposition.py",),
        ("tests/metrics", "tests/web/test_cache.py"),
        "a malformed exposition fails the whole scrape"),
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
    lines = [
        "", "[tool.mutmut]",
        f"source_paths = {json.dumps(list(target.modules))}",
        f"pytest_add_cli_args_test_selection = {json.dumps(list(target.tests))}",
        'pytest_add_cli_args = ["-p", "no:cacheprovider", "-q"]',
        'also_copy = ["exporter/", "deploy/", "etc/", "scripts/", "bench/", "README.md"]',
        # mutmut reads mypy's JSON; its trampolines carry "type: ignore" comments strict mode would flag
        f'type_check_command = ["{sys.executable}", "-m", "mypy", "--no-incremental", '
        '"--no-warn-unused-ignores", "--output", "json", "exporter"]',
    ]
    pyproject.write_text(text + "\n".join(lines) + "\n", encoding="utf-8")


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
    survivors: dict[str, list[str]] = {module: [] for module in target.modules}
    for line in results.splitlines():
        match = _RESULT.match(line)
        if match is None:
            continue
        module = _module_of(match["name"], target.modules)
        status = _STATUS.get(match["status"], match["status"].replace(" ", "_"))
        per_module.setdefault(module, Counter())[status] += 1
        if status in {"survived", "timeout", "suspicious"}:
            survivors.setdefault(module, []).append(match["name"])
    modules = {}
    for module, counts in per_module.items():
        judged = counts["killed"] + counts["survived"] + counts["timeout"] + counts["suspicious"]
        modules[module] = {**counts, "score": round(counts["killed"] / judged, 4) if judged else None,
                           "survivors": sorted(survivors.get(module, []))}
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
            print(f"{name}: {', '.join(target.modules)}\n    tests: {', '.join(target.tests)}\n    why: {target.why}")
        return 0
    report = []
    for name in args.targets or list(TARGETS):
        result = run_target(name, TARGETS[name], args.max_children)
        report.append(result)
        for module, counts in result["modules"].items():  # type: ignore[attr-defined]
            print(f"{name:12} {module:40} killed {counts.get('killed', 0):4}  survived {counts.get('survived', 0):3}  "
                  f"timeout {counts.get('timeout', 0):2}  no tests {counts.get('no_tests', 0):3}  "
                  f"type errors {counts.get('type_error', 0):3}  score {counts['score']}", flush=True)
        print(f"{name}: {result['seconds']} s", flush=True)
    if args.json:
        args.json.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
