from __future__ import annotations

import contextlib
import os
import signal
import sys
from pathlib import Path

import cpuprofile
import pytest
import xdistgroups
from pgcluster import pg_cluster  # noqa: F401  (one throwaway Postgres cluster per session and worker)

REPO = Path(__file__).resolve().parent.parent
FIXTURES = REPO / "fixtures"


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No test sees the developer's WFRUN_* settings or user folder."""
    for key in list(os.environ):
        if key.startswith("WFRUN_"):
            monkeypatch.delenv(key)
    monkeypatch.setenv("WFRUN_HOME", str(tmp_path / "_wfrun_home"))


# -- order: the longest tests first ------------------------------------------------------
_LONGEST_FIRST = Path(__file__).with_name("longest_first.txt")


@pytest.hookimpl(trylast=True)  # after the folders' hooks have added their groups
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Start the slowest tests (tests/longest_first.txt) first, longest first.

    Every xdist worker collects and sorts alike, so the order is the same in all of them.
    """
    xdistgroups.suffix_groups(config, items)  # `xdist_group` tests stay on one worker
    ranks: dict[str, int] = {}
    for line in _LONGEST_FIRST.read_text(encoding="utf-8").splitlines():
        if line.strip() and not line.startswith("#"):
            # a list rebuilt from logs of grouped runs carries the "@name" suffix too
            ranks.setdefault(line.strip().split(" ", 1)[1].split("@", 1)[0], len(ranks))
    # stable: the rest as collected; an xdist group's "@name" suffix is not part of the id
    items.sort(key=lambda item: ranks.get(item.nodeid.split("@", 1)[0], len(ranks)))


# -- leftovers ---------------------------------------------------------------------------
# Every process a test starts inherits this mark (unless the test builds an environment
# from nothing). A test that fails or times out midway can leave a real host, a shell
# step or an agent client behind; on a 2-core machine such a loop slows every later
# test and every later CI run. At the end of each worker's session, what still carries
# the worker's mark is killed and named, so a leak is seen and never outlives the run.
_SESSION_MARK = "PYTEST_WFRUN_SESSION"


def pytest_configure(config: pytest.Config) -> None:
    os.environ[_SESSION_MARK] = f"{os.getpid()}-{os.urandom(6).hex()}"
    cpuprofile.configure(config)  # WFRUN_TEST_CPU=report.txt: where the CPU goes


def _marked_processes(mark: str) -> list[tuple[int, str]]:
    wanted = f"{_SESSION_MARK}={mark}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if wanted not in (entry / "environ").read_bytes().split(b"\0"):
                continue
            cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:  # gone meanwhile, or not ours to read
            continue
        if "multiprocessing.resource_tracker" in cmd:
            continue  # the worker's own helper: it ends with the worker
        found.append((int(entry.name), cmd.strip()[:120]))
    return found


def pytest_sessionfinish(session: pytest.Session) -> None:
    mark = os.environ.get(_SESSION_MARK)
    if not mark or not Path("/proc/self/environ").exists():
        return
    leftovers = _marked_processes(mark)
    for pid, _ in leftovers:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    if leftovers:
        names = "; ".join(f"{pid}: {cmd}" for pid, cmd in leftovers[:10])
        sys.stderr.write(f"\nconftest: killed {len(leftovers)} process(es) a test left "
                         f"running: {names}\n")
