"""`xdist_group` tests run on one worker under `--dist loadgroup` (tests/xdistgroups.py).

A real pytest with two xdist workers runs a throwaway folder of tests: six in one group
and six without. Before the fix the six grouped tests were split over both workers
(pytest 9.2 ignores the id xdist 3.8 writes), so each worker started what their module
fixture starts: a Chromium for a browser module, a wheel build for test_wheel.py.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]

CONFTEST = """
import xdistgroups


def pytest_collection_modifyitems(config, items):
    xdistgroups.suffix_groups(config, items)
"""

GROUPED = """
import os
from pathlib import Path

import pytest


def _note(kind, n):
    Path(os.environ["SEEN"], f"{kind}{n}").write_text(os.environ["PYTEST_XDIST_WORKER"])


@pytest.mark.xdist_group("g")
@pytest.mark.parametrize("n", range(6))
def test_grouped(n):
    _note("grouped", n)


@pytest.mark.parametrize("n", range(6))
def test_free(n):
    _note("free", n)
"""


def test_a_group_runs_on_one_worker_and_the_rest_on_both(tmp_path: Path) -> None:
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    (tmp_path / "conftest.py").write_text(textwrap.dedent(CONFTEST))
    (tmp_path / "test_grouped.py").write_text(textwrap.dedent(GROUPED))
    seen = tmp_path / "seen"
    seen.mkdir()
    env = {**os.environ, "SEEN": str(seen), "PYTHONPATH": str(TESTS)}
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q",
                           "-n", "2", "--dist", "loadgroup", "--no-loadscope-reorder",
                           "-c", str(tmp_path / "pytest.ini"), str(tmp_path)],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
                          check=False)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    workers = {p.name: p.read_text() for p in seen.iterdir()}
    assert len(workers) == 12, workers
    assert len({w for name, w in workers.items() if name.startswith("grouped")}) == 1, workers
    assert set(workers.values()) == {"gw0", "gw1"}, workers  # the free ones: both workers
