"""The SQL one trivial queued run sends through the SQLite store (issue 36), counted
through the store's own hook (`SqliteDatabase.trace`): a busy host slot's cycle, as
bench/bench_run_cost.py runs it (a launch queued, then the one claimed before run
to its ending, whose commit claims the next). A statement more is a regression to
explain; a statement less, a cut to record here and in docs/store.md."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from launch_it_kit import Project

from runner.clock import FakeClock
from runner.compiler import build_catalog
from runner.host.runtime._local import Workspace
from runner.launch import EngineOptions, LaunchCoordinator
from runner.store import SqliteStore
from runner.testing import build_coordinator

CHAIN3 = (Path(__file__).resolve().parents[3] / "fixtures" / "workflows"
          / "chain3.yaml").read_text()

#: One cycle: the enqueue (2 writes between BEGIN and COMMIT, after the PRAGMA that
#: makes it durable) and the ending's transaction: its row, one UPDATE from
#: `starting` through `running` to `done`, the controller-request look, one
#: ready-queue probe, the next claim's UPDATE and three events. The lease fence reads
#: nothing: the claim this runner committed answers it.
ONE_RUN = Counter({"PRAGMA": 2, "BEGIN": 2, "COMMIT": 2, "INSERT": 5, "SELECT": 3,
                   "UPDATE": 2})


def test_a_queued_run_and_the_next_claim_send_sixteen_statements(tmp_path: Path) -> None:
    project = Project(tmp_path / "proj")
    project.write_workflow("three", CHAIN3)
    root = project.root
    ws = Workspace(build_catalog("workflows", root, None), root, root / ".wfrun")
    store = SqliteStore(project.store_path)
    statements: list[str] = []
    try:
        coordinator = build_coordinator(ws, store, "plain", runner="slot",
                                        options=EngineOptions(project_root=root))
        first = coordinator.prepare("three", None)
        claimed = coordinator.claim_next(None)
        assert claimed is not None
        assert claimed.run_id == first.run_id
        ran = []
        for cycle in range(3):  # the first pays for compiles and connections
            if cycle == 2:
                store._db.trace(statements.append)
            queued = coordinator.prepare("three", None)
            then = coordinator.next_claim()
            assert then is not None
            outcome = coordinator.execute(claimed, then_claim=then)
            assert outcome is not None
            assert outcome.status == "completed"
            ran.append(claimed.run_id)
            claimed = then.record
            assert claimed is not None
            assert claimed.run_id == queued.run_id  # the ending's commit claimed it
        store._db.trace(None)
        kinds = Counter(statement.split(None, 1)[0] for statement in statements)
        assert kinds == ONE_RUN, "\n".join(statements)
        assert sum(kinds.values()) == 16
        # The statements cut changed nothing a reader sees: the run's record and events.
        record = store.launches.get(ran[-1])
        assert record is not None
        assert (record.status, record.crash_count, record.input_json) == ("done", 0, None)
        assert record.started_at == record.finished_at
        moves = [(e.type, e.payload["from"], e.payload["to"])
                 for e in store.run_events.read(run_id=ran[-1])]
        assert moves == [("launch.queued", None, "queued"),
                         ("launch.starting", "queued", "starting"),
                         ("launch.running", "starting", "running"),
                         ("launch.done", "running", "done")]
    finally:
        store.close()


def test_a_claim_taken_over_before_its_run_began_writes_nothing(tmp_path: Path) -> None:
    """The fence answers from the claim this runner committed only within its lease
    (less a third): a run begun after its lease ran out and another runner took the
    launch over asks the store, which refuses it, and nothing of the run is written."""
    project = Project(tmp_path / "proj")
    project.write_workflow("three", CHAIN3)
    root = project.root
    clock = FakeClock()
    ws = Workspace(build_catalog("workflows", root, None), root, root / ".wfrun")
    store = SqliteStore(project.store_path, clock=clock)
    try:
        def runner(name: str) -> LaunchCoordinator:
            return build_coordinator(ws, store, "plain", runner=name, clock=clock,
                                     lease_seconds=30.0,
                                     options=EngineOptions(project_root=root))

        late, other = runner("late"), runner("other")
        record = late.prepare("three", None)
        claimed = late.claim_next(None)
        assert claimed is not None
        assert claimed.run_id == record.run_id
        clock.advance(31)  # the lease is gone before the run begins
        taken = other.claim_next(None)
        assert taken is not None
        assert (taken.run_id, taken.crash_count) == (record.run_id, 1)
        assert late.execute(claimed) is None  # the claim was lost: let go
        assert not (project.runs_dir / record.run_id).exists()
        outcome = other.execute(taken)
        assert outcome is not None
        assert outcome.status == "completed"
        done = store.launches.get(record.run_id)
        assert done is not None
        assert (done.status, done.runner_id) == ("done", "other")
    finally:
        store.close()
