"""A launch joined to its database bundle (runner/launch/_link.py): the run's first
write commits in the launch's `running`, its seal in the launch's ending.

The coordinator runs on a real SQLite store file with the in-memory rows fake as its
bundle rows (the seam is the same one Postgres uses: the store's transition runs the
bundle's write inside its own transaction). The Postgres side of the same contract is
in tests/integration/store/test_bundles_postgres.py and the SIGKILL crash matrix.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from launch_it_kit import Project

from runner.compiler import build_catalog
from runner.engine._rows import MemoryRows
from runner.host.runtime._local import Workspace
from runner.store import LaunchRecord, SqliteStore
from runner.testing import build_coordinator

THREE = """\
    start: a
    nodes:
      a: {compute: "{{ 1 }}"}
      b: {compute: "{{ 2 }}"}
      c: {compute: "{{ 3 }}"}
    edges:
      - {from: a, to: b}
      - {from: b, to: c}
"""


class Stack:
    def __init__(self, root: Path, crash: dict[str, object] | None = None) -> None:
        self.project = Project(root)
        self.project.write_workflow("three", THREE)
        ws = Workspace(build_catalog("workflows", root, None), root, root / ".wfrun")
        self.store = SqliteStore(self.project.store_path)
        self.rows = MemoryRows()
        self.hooks: dict[str, object] = crash or {}
        self.coordinator = build_coordinator(ws, self.store, "plain", runner="link",
                                             rows=self.rows, crash=self._crash)

    def _crash(self, point: str) -> None:
        hook = self.hooks.get(point)
        if callable(hook):
            hook()

    def launch(self) -> LaunchRecord:
        return self.coordinator.prepare("three", {})

    def row(self, run_id: str) -> LaunchRecord:
        record = self.store.launches.get(run_id)
        assert record is not None
        return record

    def events(self, run_id: str) -> list[str]:
        return [json.loads(text)["type"] for text in self.rows.read_events(run_id)]


@pytest.fixture
def stack(tmp_path: Path) -> Stack:
    return Stack(tmp_path / "proj")


def run_next(stack: Stack) -> str:
    record = stack.coordinator.claim_next(None)
    assert record is not None
    outcome = stack.coordinator.execute(record)
    assert outcome is not None
    assert outcome.status == "completed"
    return record.run_id


def test_a_three_node_run_is_four_bundle_writes_two_of_them_in_launch_transitions(
        stack: Stack) -> None:
    run_id = stack.launch().run_id
    seen: dict[str, tuple[str, list[str]]] = {}

    def at_running() -> None:  # just after the first write committed with `running`
        seen["running"] = (stack.row(run_id).status, stack.events(run_id))

    def before_outcome() -> None:  # after the seal: the ending committed with it
        seen["ended"] = (stack.row(run_id).status, stack.events(run_id)[-1:])

    stack.hooks.update(after_running=at_running, before_outcome_recorded=before_outcome)
    writes = stack.rows.writes
    run_next(stack)
    # [row, snapshot, manifest, run_started, a started] + running; [a ended, b started];
    # [b ended, c started]; [c ended, run_completed, seal] + done.
    assert stack.rows.writes - writes == 4
    assert seen["running"] == ("running", ["run_started", "node_started"])
    assert seen["ended"] == ("done", ["run_completed"])
    assert stack.rows.bundle_sealed(run_id)
    assert stack.row(run_id).input_json is None  # cleared by the `running` it rode in


def test_a_refused_first_write_rolls_the_running_transition_back(stack: Stack) -> None:
    run_id = stack.launch().run_id
    # Another writer made the run's bundle row first: the create is refused (`exists`)
    # inside the transition, so `running` never commits; the run then fails as any
    # run whose id is taken does.
    assert stack.rows.create_bundle(run_id, None) == "ok"
    record = stack.coordinator.claim_next(None)
    assert record is not None
    assert stack.coordinator.execute(record) is None
    kinds = [e.type for e in stack.store.run_events.read(run_id=run_id)]
    assert "launch.running" not in kinds, kinds
    assert stack.row(run_id).status == "failed"
    assert stack.events(run_id) == []  # nothing of this writer's batch landed


def test_a_claim_taken_before_the_first_write_writes_nothing(stack: Stack) -> None:
    run_id = stack.launch().run_id

    def steal() -> None:  # its lease ran out (given up here), and a cancel took the row
        held = stack.store.launches.get(run_id)
        assert held is not None
        assert stack.store.launches.yield_lease(run_id, held.claim_token or "")
        assert stack.store.launches.cancel(run_id).status == "cancelled"  # type: ignore[union-attr]

    stack.hooks["during_starting"] = steal
    record = stack.coordinator.claim_next(None)
    assert record is not None
    assert stack.coordinator.execute(record) is None
    assert stack.row(run_id).status == "cancelled"
    assert not stack.rows.bundle_exists(run_id)  # the guard refused the whole batch


@pytest.mark.parametrize("write", [1, 4], ids=["first", "ending"])
def test_a_write_whose_answer_was_lost_is_not_done_twice(stack: Stack, write: int) -> None:
    """The database committed a transition's write but the answer was lost: the retry
    finds it landed (its guard now refuses, its events are there) and goes on."""
    run_id = stack.launch().run_id
    base = stack.rows.writes
    real = stack.rows.write_batch

    def flaky(*args: object, **kw: object) -> str:
        if stack.rows.writes - base == write - 1 and not flaky.done:  # type: ignore[attr-defined]
            flaky.done = True  # type: ignore[attr-defined]
            stack.rows.outages, stack.rows.commit_then_fail = 1, True
        return real(*args, **kw)  # type: ignore[arg-type]

    flaky.done = False  # type: ignore[attr-defined]
    stack.rows.write_batch = flaky  # type: ignore[method-assign]
    assert run_next(stack) == run_id
    assert flaky.done  # type: ignore[attr-defined]
    assert stack.row(run_id).status == "done"
    assert stack.events(run_id).count("run_started") == 1
    assert stack.events(run_id).count("run_completed") == 1
    assert stack.rows.bundle_sealed(run_id)
