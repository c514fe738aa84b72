"""tests/conftest.py's xdist units of work, on a small suite of the same shape run by a real pytest -n 2.

What a user of ``./scripts/test`` relies on: with several workers an expensive fixture is still made once,
a module's on the one worker that runs the whole module, a session fixture shared by modules in two
directories on the one worker that runs all of those modules; and the work is still spread over the
workers. Each fixture appends a line (who made it, on which worker) to a file.
"""

from __future__ import annotations

import subprocess
import sys
from collections import Counter
from pathlib import Path

from tests.deploy.chart_support import REPO

SHARED = '''
import os
import pytest

@pytest.fixture(scope="session")
def control_plane():
    with open(os.environ["MADE"], "a") as made:
        made.write(f"control_plane {os.environ.get('PYTEST_XDIST_WORKER')}\\n")
    return "up"
'''

MODULE = '''
import os
import pytest

@pytest.fixture(scope="module")
def prometheus():
    with open(os.environ["MADE"], "a") as made:
        made.write(f"prometheus:{__name__} {os.environ.get('PYTEST_XDIST_WORKER')}\\n")
    return "ready"

@pytest.mark.parametrize("case", range(6))
def test_uses_the_module_fixture(prometheus, case):
    assert prometheus == "ready"
'''

USES_CLUSTER = '''
import pytest

@pytest.mark.parametrize("case", range(4))
def test_uses_the_session_fixture(control_plane, case):
    assert control_plane == "up"
'''

PLAIN = '''
import os

def test_plain_{index}():
    with open(os.environ["MADE"], "a") as made:
        made.write(f"plain {{os.environ.get('PYTEST_XDIST_WORKER')}}\\n")
'''


def test_expensive_fixtures_are_made_once_and_both_workers_run_tests(tmp_path: Path) -> None:
    suite = tmp_path / "tests"
    (suite / "platform").mkdir(parents=True)
    (suite / "kube").mkdir()
    (suite / "conftest.py").write_text((REPO / "tests" / "conftest.py").read_text(encoding="utf-8")
                                       + SHARED, encoding="utf-8")
    for name in ("test_a.py", "test_b.py"):
        (suite / "platform" / name).write_text(USES_CLUSTER, encoding="utf-8")
    (suite / "kube" / "test_on_the_cluster.py").write_text(USES_CLUSTER, encoding="utf-8")
    (suite / "kube" / "test_prometheus.py").write_text(MODULE, encoding="utf-8")
    for index in range(8):
        (suite / f"test_plain_{index}.py").write_text(PLAIN.format(index=index), encoding="utf-8")
    made = tmp_path / "made.txt"
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "2", "--dist", "loadscope",
         "--rootdir", str(tmp_path), str(suite)],
        capture_output=True, text=True, cwd=tmp_path, timeout=300, check=False,
        env={"MADE": str(made), "PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO)})
    assert result.returncode == 0, result.stdout + result.stderr
    assert "26 passed" in result.stdout
    lines = made.read_text(encoding="utf-8").splitlines()
    counts = Counter(line.split()[0] for line in lines)
    assert counts["control_plane"] == 1, lines  # three modules in two directories: one worker, one cluster
    assert counts["prometheus:test_prometheus"] == 1, lines  # six tests of one module: made once
    # the work is spread: both workers ran tests (which plain modules go where depends on who is free first)
    assert {line.split()[1] for line in lines} == {"gw0", "gw1"}, lines
