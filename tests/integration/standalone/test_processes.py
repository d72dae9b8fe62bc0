"""The host's process-group registry and orphan reaping, on real processes."""

from __future__ import annotations

import contextlib
import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from standalonekit import pid_gone, wait_for

from runner.engine.processes import ProcessRegistry, reap_orphans


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
    return {e["pgid"] for e in json.loads(path.read_text())}


def test_the_registry_keeps_only_groups_whose_leader_still_runs(
        tmp_path: Path, spawn: list[subprocess.Popen[str]]) -> None:
    registry = ProcessRegistry(tmp_path / "state" / "host.children.json")
    first = group(spawn, "sleep", "30")
    registry.add(first.pid, command="sleep 30")
    brief = group(spawn, "true")
    registry.add(brief.pid, command="true")
    assert pgids(registry.path) == {first.pid, brief.pid}
    brief.wait(timeout=10)

    third = group(spawn, "sleep", "30")
    registry.add(third.pid, command="sleep 30")

    assert pgids(registry.path) == {first.pid, third.pid}
    assert (registry.path.stat().st_mode & 0o777) == 0o600


def test_reap_kills_a_live_group_with_its_grandchild_and_nothing_else(
        tmp_path: Path, spawn: list[subprocess.Popen[str]]) -> None:
    path = tmp_path / "host.children.json"
    registry = ProcessRegistry(path)
    leader = group(spawn, "sh", "-c", "sleep 30 & echo $!; wait")
    assert leader.stdout is not None
    grandchild = int(leader.stdout.readline())
    registry.add(leader.pid, command="sh")
    stranger = group(spawn, "sleep", "30")  # alive, but not the process that was recorded
    entries = [
        *json.loads(path.read_text()),
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


def test_reap_of_a_missing_or_torn_file_is_a_no_op(tmp_path: Path) -> None:
    assert reap_orphans(tmp_path / "absent.json") == []
    torn = tmp_path / "torn.json"
    torn.write_text('[{"pgid": 12')
    assert reap_orphans(torn) == []
