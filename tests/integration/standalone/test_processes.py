"""The host's process-group registry and orphan reaping, on real processes."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from standalonekit import pid_gone, wait_for

from runner.clock import SystemClock
from runner.engine import RunControl
from runner.engine import _processes as processes
from runner.engine._processes import (
    MARK_ENV,
    ProcessRegistry,
    read_groups,
    reap_dead_registries,
    reap_orphans,
)
from runner.engine._procs import run_shell


@pytest.fixture
def spawn() -> Iterator[list[subprocess.Popen[str]]]:
    procs: list[subprocess.Popen[str]] = []
    yield procs
    for proc in procs:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        proc.wait(timeout=10)
        if proc.stdout is not None:
            proc.stdout.close()


def group(procs: list[subprocess.Popen[str]], *argv: str) -> subprocess.Popen[str]:
    proc = subprocess.Popen(list(argv), start_new_session=True, stdout=subprocess.PIPE,
                            text=True)
    procs.append(proc)
    return proc


def pgids(path: Path) -> set[int]:
    return {e["pgid"] for e in read_groups(path)}


def test_the_registry_keeps_only_groups_whose_leader_still_runs(
        tmp_path: Path, spawn: list[subprocess.Popen[str]],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A group whose leader is gone without `remove` is dropped once PRUNE_AT groups
    are recorded (below that it costs a line of the file, which a reaper skips: its
    leader's start time no longer matches)."""
    monkeypatch.setattr(processes, "PRUNE_AT", 3)
    registry = ProcessRegistry(tmp_path / "state" / "host.children.json")
    first = group(spawn, "sleep", "30")
    registry.add(first.pid)
    brief = group(spawn, "true")
    registry.add(brief.pid)
    assert pgids(registry.path) == {first.pid, brief.pid}
    brief.wait(timeout=10)

    third = group(spawn, "sleep", "30")
    registry.add(third.pid)  # two recorded: not pruned yet
    assert pgids(registry.path) == {first.pid, brief.pid, third.pid}
    fourth = group(spawn, "sleep", "30")
    registry.add(fourth.pid)

    assert pgids(registry.path) == {first.pid, third.pid, fourth.pid}
    assert (registry.path.stat().st_mode & 0o777) == 0o600


def test_reap_kills_a_live_group_with_its_grandchild_and_nothing_else(
        tmp_path: Path, spawn: list[subprocess.Popen[str]]) -> None:
    path = tmp_path / "host.children.json"
    registry = ProcessRegistry(path)
    leader = group(spawn, "sh", "-c", "sleep 30 & echo $!; wait")
    assert leader.stdout is not None
    grandchild = int(leader.stdout.readline())
    registry.add(leader.pid)
    stranger = group(spawn, "sleep", "30")  # alive, but not the process that was recorded
    entries = [  # the JSON list runners wrote before the log: still read
        *read_groups(path),
        {"pgid": stranger.pid, "start": "1"},  # a recycled pid: the start time differs
        {"pgid": 1, "start": None},            # never init
        {"pgid": "x"},                          # garbage is skipped
    ]
    path.write_text(json.dumps(entries))

    killed = reap_orphans(path)

    assert killed == [leader.pid]
    assert leader.wait(timeout=10) == -9
    wait_for("the grandchild to die", lambda: pid_gone(grandchild))
    assert stranger.poll() is None
    assert not path.exists()  # reaped once; the next host starts clean
    assert reap_orphans(path) == []


def test_the_log_appends_a_line_per_group_and_a_torn_last_line_is_skipped(
        tmp_path: Path, spawn: list[subprocess.Popen[str]]) -> None:
    """Recording a group appends one line (the file is not rewritten); a runner killed
    mid-write leaves a torn last line, and the reaper still kills what the rest names."""
    path = tmp_path / "children" / "runner.json"
    registry = ProcessRegistry(path)
    first = group(spawn, "sleep", "30")
    registry.add(first.pid)
    inode = path.stat().st_ino
    second = group(spawn, "sleep", "30")
    registry.add(second.pid)
    assert path.stat().st_ino == inode  # appended to, not replaced
    assert len(path.read_text().splitlines()) == 2
    registry.close()
    with path.open("a") as log:
        log.write('{"pgid": 12')  # the runner died here

    assert sorted(reap_orphans(path)) == sorted([first.pid, second.pid])
    assert first.wait(timeout=10) == -9
    assert second.wait(timeout=10) == -9


def test_a_log_removed_under_a_running_registry_is_written_anew(
        tmp_path: Path, spawn: list[subprocess.Popen[str]]) -> None:
    """The log is appended through a kept descriptor: if its file is removed meanwhile
    (a prune of state), the next record writes a new file naming every live group."""
    path = tmp_path / "children" / "runner.json"
    registry = ProcessRegistry(path)
    first = group(spawn, "sleep", "30")
    registry.add(first.pid)
    path.unlink()
    second = group(spawn, "sleep", "30")
    registry.add(second.pid)
    assert pgids(path) == {first.pid, second.pid}


def test_reap_of_a_missing_or_torn_file_is_a_no_op(tmp_path: Path) -> None:
    assert reap_orphans(tmp_path / "absent.json") == []
    torn = tmp_path / "torn.json"
    torn.write_text('[{"pgid": 12')
    assert reap_orphans(torn) == []


RUNNER = """
import os, subprocess, sys, time
from pathlib import Path
from runner.engine._processes import MARK_ENV, registry_for_this_process
registry = registry_for_this_process(Path(sys.argv[1]))
# Killed between starting a command and recording its group: only the mark is left.
child = subprocess.Popen(["sleep", "300"], start_new_session=True,
                         env={**os.environ, MARK_ENV: registry.mark})
print(child.pid, registry.mark, flush=True)
time.sleep(300)
"""


@pytest.mark.parametrize("first_command", [False, True], ids=["folder-made", "no-folder"])
def test_a_group_started_but_never_recorded_is_found_by_its_mark(
        tmp_path: Path, spawn: list[subprocess.Popen[str]], first_command: bool) -> None:
    """`first_command`: the runner's first command ever, so no registry folder exists
    yet (the reaper used to stop at the missing folder and never look for marks)."""
    folder = tmp_path / "children"
    if not first_command:
        folder.mkdir()
    runner = group(spawn, sys.executable, "-c", RUNNER, str(folder))
    assert runner.stdout is not None
    child_text, mark = runner.stdout.readline().split()
    child = int(child_text)
    assert not (folder / f"{runner.pid}.json").exists()  # nothing was recorded
    assert mark.split(":")[1] == str(runner.pid)

    assert reap_dead_registries(folder) == []  # its runner lives: not an orphan
    assert not pid_gone(child)
    runner.kill()
    runner.wait(timeout=10)
    other = tmp_path / "other-project"
    other.mkdir()
    assert reap_dead_registries(other) == []  # another folder's runners: not ours
    assert not pid_gone(child)

    assert reap_dead_registries(folder) == [child]
    wait_for("the unrecorded orphan to die", lambda: pid_gone(child))


def test_every_shell_command_carries_its_runners_mark(tmp_path: Path) -> None:
    registry = ProcessRegistry(tmp_path / "children" / "runner.json")
    result = run_shell(["sh", "-c", f'printf %s "${MARK_ENV}"'], use_shell=False, cwd=None,
                       env=None, stdin=None, deadline=None, cap=4096, control=RunControl(),
                       clock=SystemClock(), registry=registry)
    assert result.stdout == registry.mark


def test_the_registry_holds_pids_and_start_times_only_and_forgets_a_finished_command(
        tmp_path: Path) -> None:
    # Issues 34.2 / 35.5: the registry kept `str(command)[:200]`, rendered secrets included,
    # in a file that outlives the run.
    registry = ProcessRegistry(tmp_path / "children" / "runner.json")
    secret = "canary-argv-secret-31f7"
    seen: list[object] = []

    def sink(_chunk: bytes) -> None:  # the command runs: what does the registry say now?
        if not seen:
            seen.append(read_groups(registry.path))

    result = run_shell(["sh", "-c", 'echo "$0"; sleep 0.05', secret], use_shell=False,
                       cwd=None, env=None, stdin=None, deadline=None, cap=4096,
                       control=RunControl(), clock=SystemClock(), registry=registry,
                       sinks=(sink, sink))
    assert result.stdout == secret + "\n"
    [entries] = seen
    assert isinstance(entries, list)
    assert len(entries) == 1
    assert set(entries[0]) == {"pgid", "start"}
    # Nothing of the command stays: the last group out removes the file.
    assert not registry.path.exists()
    assert list(registry.path.parent.iterdir()) == []
