"""How the suite spreads over pytest-xdist workers (``./scripts/test`` runs ``-n 3 --dist loadscope``).

The suite mostly waits (on exporter processes, Prometheus, a control plane, sockets), so on 2 cores three
workers finish it sooner than one. What must not happen is an expensive fixture being made once per
worker: a module's fixtures (a Prometheus, the image build) would be made again on every worker that
runs one of its tests, and a session fixture shared by several modules (the platform tier's control
plane, the report tests' backfilled Prometheus) on every worker that runs one of those modules.

So under ``--dist loadscope`` this file replaces xdist's unit of work (a module, or a class) with a
*group*: a module, with the modules that share a session-scoped fixture of the suite's own (defined in a
conftest.py or module under tests/, not pytest's built-ins) merged into one group, whatever directory
they are in, so that each such fixture exists on one worker. A test's explicit ``xdist_group`` mark
names its group instead. Groups start heaviest first (a test that starts processes, marker ``e2e`` or
``platform``, weighs ``PROCESS_WEIGHT`` plain tests), so the long ones never start last and leave the
other workers idle at the end.

Only the workers collect (xdist's controller sees test ids, not fixtures): each worker writes its
test id -> (group, weight) table into a directory the controller made (``pytest_configure_node``), and
the controller's scheduler reads it when all workers have collected, which is before it assigns any
work. Test ids and output are unchanged. Without xdist (``-p no:xdist``, ``-n 0``) nothing here runs.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from exporter.logs import LOGGER_NAME

ROOT = Path(__file__).resolve().parent
GROUPS_KEY = "gpu_pod_exporter_groups_dir"
PROCESS_WEIGHT = 20
PROCESS_MARKERS = ("e2e", "platform")


def _session_fixtures(item: pytest.Item) -> set[str]:
    """The suite's own session-scoped fixtures that ``item`` uses, directly or through other fixtures."""
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return set()
    names = set()
    for name, definitions in info.name2fixturedefs.items():
        definition = definitions[-1]
        if definition.scope == "session" and definition.baseid:  # baseid "": a plugin's or pytest's own
            names.add(f"{definition.baseid}::{name}")
    return names


def _module(item: pytest.Item) -> str:
    return item.nodeid.split("::", 1)[0]


def xdist_groups(items: list[pytest.Item]) -> dict[str, str]:
    """Test id -> group: its module's, modules joined when they share a session fixture (union-find over
    modules and fixtures), or the name of its own ``xdist_group`` mark."""
    parent: dict[str, str] = {}

    def find(node: str) -> str:
        parent.setdefault(node, node)
        while parent[node] != node:
            parent[node] = parent[parent[node]]
            node = parent[node]
        return node

    for item in items:
        module = find(_module(item))
        for fixture in _session_fixtures(item):
            other = find("fixture " + fixture)
            if other != module:
                # a group is named after its first module (never a fixture): stable from run to run
                winner, loser = sorted((module, other), key=lambda name: (name.startswith("fixture "), name))
                parent[loser] = winner
                module = winner
    groups = {}
    for item in items:
        mark = item.get_closest_marker("xdist_group")
        groups[item.nodeid] = str(mark.args[0] if mark and mark.args else find(_module(item)))
    return groups


def _weight(item: pytest.Item) -> int:
    return PROCESS_WEIGHT if any(item.get_closest_marker(name) for name in PROCESS_MARKERS) else 1


# -- controller --------------------------------------------------------------------------------------


def _grouping(config: pytest.Config) -> bool:
    return bool(getattr(config.option, "numprocesses", None)) and config.getoption("dist", "no") == "loadscope"


def pytest_configure(config: pytest.Config) -> None:
    if hasattr(config, "workerinput") or not _grouping(config):
        return
    config.stash[_GROUPS_DIR] = Path(tempfile.mkdtemp(prefix="gpe-xdist-groups-"))


def pytest_unconfigure(config: pytest.Config) -> None:
    directory = config.stash.get(_GROUPS_DIR, None)
    if directory is not None:
        shutil.rmtree(directory, ignore_errors=True)


_GROUPS_DIR = pytest.StashKey[Path]()


def pytest_configure_node(node: Any) -> None:  # xdist's hook: the controller prepares a worker
    directory = node.config.stash.get(_GROUPS_DIR, None)
    if directory is not None:
        node.workerinput[GROUPS_KEY] = str(directory)


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    directory = config.stash.get(_GROUPS_DIR, None)
    if directory is None:
        return None
    from xdist.scheduler import LoadScopeScheduling  # noqa: PLC0415 - only where xdist runs

    class GroupScheduling(LoadScopeScheduling):  # type: ignore[misc]
        """loadscope with this suite's groups as its units, heaviest first."""

        def __init__(self, config: pytest.Config, log: Any = None) -> None:
            super().__init__(config, log)
            self._table: dict[str, tuple[str, int]] | None = None
            self._ordered = False

        def _lookup(self, nodeid: str) -> tuple[str, int]:
            if self._table is None:
                self._table = {}
                for path in sorted(directory.glob("*.json")):
                    self._table.update({key: (group, weight) for key, (group, weight)
                                        in json.loads(path.read_text(encoding="utf-8")).items()})
            return self._table.get(nodeid, (nodeid.split("::", 1)[0], 1))

        def _split_scope(self, nodeid: str) -> str:
            return self._lookup(nodeid)[0]

        def _assign_work_unit(self, node: Any) -> None:
            if not self._ordered:  # the queue is complete when the first unit is assigned
                self._ordered = True
                units = sorted(self.workqueue.items(),
                               key=lambda unit: -sum(self._lookup(nodeid)[1] for nodeid in unit[1]))
                self.workqueue.clear()
                self.workqueue.update(units)
            super()._assign_work_unit(node)

    return GroupScheduling(config, log)


# -- workers -----------------------------------------------------------------------------------------


@pytest.hookimpl(trylast=True)  # after every other hook that adds marks or deselects
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    workerinput = getattr(config, "workerinput", None)
    if not workerinput or GROUPS_KEY not in workerinput:
        return
    groups = xdist_groups(items)
    table = {item.nodeid: (groups[item.nodeid], _weight(item)) for item in items}
    target = Path(workerinput[GROUPS_KEY]) / f"{workerinput['workerid']}.json"
    temporary = target.with_suffix(f".{os.getpid()}.tmp")
    temporary.write_text(json.dumps(table), encoding="utf-8")
    temporary.replace(target)


@pytest.fixture(autouse=True)
def _exporter_logger_as_found() -> Iterator[None]:
    """Each test gets the exporter's logger as the previous one found it.

    ``exporter.logs.configure`` (run by every ``main`` a test calls in process) puts a handler on
    the exporter's logger that writes to the ``sys.stderr`` of that moment: under pytest, that test's
    capture stream, closed when the test ends. Left in place, a later test's records (or those of a
    thread still ending from an earlier one) went to the closed stream ("--- Logging error ---" in the
    run's output) instead of to pytest's log capture.
    """
    logger = logging.getLogger(LOGGER_NAME)
    saved = (list(logger.handlers), logger.level, logger.propagate, logger.disabled)
    yield
    logger.handlers[:] = saved[0]
    logger.setLevel(saved[1])
    logger.propagate, logger.disabled = saved[2], saved[3]
