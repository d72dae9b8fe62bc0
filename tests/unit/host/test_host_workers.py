"""The worker processes of `wfrun host --processes N` before any fork: how the slots
split, and the guards that keep a fork from copying a held store or a missing lock
(the processes themselves: tests/integration/standalone/test_host_processes.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from runner.compiler import build_catalog
from runner.host._daemon import WorkerSettings, fork_workers, host_lock
from runner.host._workers import shares, store_is_open
from runner.host.runtime._local import Workspace
from runner.store import SqliteStore


@pytest.mark.parametrize(("slots", "processes", "split"), [
    (4, 1, [4]), (4, 2, [2, 2]), (5, 2, [3, 2]), (3, 3, [1, 1, 1]), (7, 3, [3, 2, 2])])
def test_slots_split_as_evenly_as_they_can_the_host_first(slots: int, processes: int,
                                                          split: list[int]) -> None:
    assert shares(slots, processes) == split
    assert sum(split) == slots


@pytest.mark.parametrize("processes", [0, 5])
def test_every_process_needs_a_slot(processes: int) -> None:
    with pytest.raises(ValueError, match="one slot each"):
        shares(4, processes)


def _workspace(tmp_path: Path) -> Workspace:
    root = tmp_path / "proj"
    (root / ".wfrun" / "workflows").mkdir(parents=True)
    return Workspace(build_catalog("workflows", root, None), root, root / ".wfrun")


def _settings(ws: Workspace) -> WorkerSettings:
    return WorkerSettings(open_store=lambda: SqliteStore(
        ws.runs_dir.parent / "state" / "store.sqlite3"))


def test_one_process_forks_nothing_and_keeps_every_slot(tmp_path: Path) -> None:
    ws = _workspace(tmp_path)
    lock = host_lock(ws)  # not even taken: one process needs no fork guard
    assert fork_workers(ws, lock, processes=1, max_runs=4, settings=_settings(ws)) == (None, 4)


def test_no_fork_while_this_process_has_the_store_open(tmp_path: Path) -> None:
    ws = _workspace(tmp_path)
    lock = host_lock(ws)
    lock.acquire()
    store = SqliteStore(ws.runs_dir.parent / "state" / "store.sqlite3")
    try:
        assert store_is_open(ws)
        with pytest.raises(RuntimeError, match="before this process opens the store"):
            fork_workers(ws, lock, processes=2, max_runs=4, settings=_settings(ws))
    finally:
        store.close()
        lock.release()
    assert not store_is_open(ws)  # closed: every connection and its files let go


def test_no_fork_without_the_host_lock(tmp_path: Path) -> None:
    ws = _workspace(tmp_path)
    with pytest.raises(RuntimeError, match="host lock held"):
        fork_workers(ws, host_lock(ws), processes=2, max_runs=4, settings=_settings(ws))


def test_a_worker_error_reaches_the_host_with_its_message_and_exit_code() -> None:
    from runner.errors import InputError, MachineFault, WfrunError
    from runner.host._workers import portable

    plain = InputError("no such workflow 'x'")
    assert portable(plain) is plain  # pickles as it is
    fault = MachineFault("no space left on device", "Free some space")
    moved = portable(fault)
    assert isinstance(moved, WfrunError)
    assert moved.message == fault.message
    assert moved.exit_code == fault.exit_code
