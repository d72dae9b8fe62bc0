"""The input scrub is batched, and bounded (docs/store.md, "The input scrub").

Activation clears a launch's private input from its row; a WAL checkpoint then
removes the old frames that still hold it. One checkpoint per run made every later
commit grow the WAL again, so activations owe it and the coordinator pays it when
it finds the queue empty, when a run claimed by id ends, or once SCRUB_SECONDS
passed since the first one owed. Real store file, bytes read by another process.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from launch_it_kit import Project

from runner.clock import FakeClock
from runner.compiler import build_catalog
from runner.host.runtime._local import Workspace
from runner.launch import LaunchCoordinator
from runner.store import SqliteStore
from runner.store.sqlite._db import SCRUB_SECONDS
from runner.testing import build_coordinator

ECHO = """\
    input: {type: object, required: [task], properties: {task: {type: string}}}
    start: one
    nodes:
      one: {compute: "{{ input.task | length }}"}
"""


def wal_has(project: Project, text: str) -> bool:
    # Read by another process: closing a descriptor of the store file in this one
    # would drop the POSIX locks SQLite holds on it.
    wal = project.store_path.with_name("store.sqlite3-wal")
    data = subprocess.run(["cat", str(wal)], capture_output=True, timeout=30,
                          check=True).stdout
    return text.encode() in data


@pytest.fixture
def stack(tmp_path: Path) -> tuple[Project, LaunchCoordinator, FakeClock]:
    project = Project(tmp_path / "proj")
    project.write_workflow("echo", ECHO)
    root = project.root
    ws = Workspace(build_catalog("workflows", root, None), root, root / ".wfrun")
    clock = FakeClock()
    coordinator = build_coordinator(ws, SqliteStore(project.store_path), "plain",
                                    runner="scrub", clock=clock)
    return project, coordinator, clock


def run_next(coordinator: LaunchCoordinator) -> None:
    record = coordinator.claim_next(None)
    assert record is not None
    outcome = coordinator.execute(record)
    assert outcome is not None
    assert outcome.status == "completed"


def test_a_busy_spell_owes_the_scrub_and_an_empty_queue_pays_it(
        stack: tuple[Project, LaunchCoordinator, FakeClock]) -> None:
    project, coordinator, _clock = stack
    tasks = [f"private-task-{i}-0f3c9a" for i in range(3)]
    for task in tasks:
        coordinator.prepare("echo", {"task": task})
    run_next(coordinator)
    run_next(coordinator)
    # Two activations cleared their rows, but launches are still queued: no checkpoint
    # yet, so the WAL still holds the frames written when they were queued.
    assert coordinator.store.launches.get(
        coordinator.store.launches.query(statuses=["done"])[0].run_id).input_json is None
    assert wal_has(project, tasks[0])
    run_next(coordinator)
    assert coordinator.claim_next(None) is None  # the queue is empty: the scrub is paid
    assert not any(wal_has(project, task) for task in tasks)


def test_the_scrub_waits_at_most_scrub_seconds_under_load(
        stack: tuple[Project, LaunchCoordinator, FakeClock]) -> None:
    project, coordinator, clock = stack
    tasks = {coordinator.prepare("echo", {"task": task}).run_id: task
             for task in ("first-private-4d1e", "second-private-77ab", "third-private-9c2f")}

    def done() -> list[str]:
        return [tasks[r.run_id] for r in coordinator.store.launches.query(statuses=["done"])]

    # Which launch a claim takes: the three were queued within a tick or two of the
    # clock, and a claim takes the oldest first, then by run id. So name them by order.
    run_next(coordinator)
    (ran_first,) = done()
    assert wal_has(project, ran_first)  # cleared in its row, still in the WAL's frames
    clock.advance(SCRUB_SECONDS)
    run_next(coordinator)  # its claim finds the scrub due: the first one's input goes
    assert not wal_has(project, ran_first)
    # The one still queued keeps its input (in the WAL or, checkpointed, in the file).
    (row,) = [r for r in map(coordinator.store.launches.get, tasks)
              if r is not None and r.status == "queued"]
    assert row.input_json is not None
    assert tasks[row.run_id] in row.input_json
    assert sorted(done()) == sorted(set(tasks.values()) - {tasks[row.run_id]})


def test_a_run_claimed_by_id_is_scrubbed_when_it_ends(
        stack: tuple[Project, LaunchCoordinator, FakeClock]) -> None:
    project, coordinator, _clock = stack
    mine = coordinator.prepare("echo", {"task": "foreground-private-5b0d"})
    coordinator.prepare("echo", {"task": "still-queued-private-e21a"})
    record = coordinator.claim(mine.run_id)  # as `wfrun run` does: no claim loop follows
    outcome = coordinator.execute(record)
    assert outcome is not None
    assert outcome.status == "completed"
    assert not wal_has(project, "foreground-private-5b0d")


def test_a_host_notes_an_empty_queue_and_pays_its_scrub_when_it_asks(
        stack: tuple[Project, LaunchCoordinator, FakeClock]) -> None:
    """`wfrun host` starts its slots' items before it pays an empty queue's scrub (the
    checkpoint stood between a map's parent parking and its items): `claim_next` with
    `idle_scrub=False` only notes it, `pay_idle_scrub` pays it, once."""
    project, coordinator, _clock = stack
    coordinator.prepare("echo", {"task": "host-private-7c1e"})
    run_next(coordinator)
    assert wal_has(project, "host-private-7c1e")
    assert coordinator.claim_next(None, idle_scrub=False) is None
    assert wal_has(project, "host-private-7c1e")  # noted, not paid
    coordinator.pay_idle_scrub()
    assert not wal_has(project, "host-private-7c1e")
    coordinator.prepare("echo", {"task": "still-queued-private-31d0"})
    coordinator.pay_idle_scrub()  # nothing noted since: no checkpoint
    assert wal_has(project, "still-queued-private-31d0")
