"""After a disk refused a run's bundle, the runner's claims wait (queue.py, `FaultGate`).

A host whose runs folder cannot be written would otherwise claim the launch it just
released, be refused again, and spin. The runs folder here is a real read-only bind
mount (tests/machinefaults.py); the waiting is on the coordinator's FakeClock.
"""

from __future__ import annotations

from pathlib import Path

import machinefaults as mf
from launch_it_kit import Project

from runner.clock import FakeClock
from runner.compiler import build_catalog
from runner.host.runtime._local import Workspace
from runner.launch._queue import HOLD_OFF_SECONDS
from runner.store import SqliteStore
from runner.testing import build_coordinator

ONE = """\
    start: one
    nodes:
      one: {compute: "{{ 1 }}"}
"""


def test_claims_wait_after_a_refused_bundle_then_take_the_launch_again(
        tmp_path: Path) -> None:
    project = Project(tmp_path / "proj")
    project.write_workflow("one", ONE)
    project.runs_dir.mkdir(parents=True)
    root = project.root
    ws = Workspace(build_catalog("workflows", root, None), root, root / ".wfrun")
    clock = FakeClock()
    store = SqliteStore(project.store_path)
    coordinator = build_coordinator(ws, store, "plain", runner="gate", clock=clock)
    queued = coordinator.prepare("one", {})
    with mf.read_only(project.runs_dir):
        claimed = coordinator.claim_next(None)
        assert claimed is not None
        assert coordinator.execute(claimed) is None  # the bundle was refused: it waits
    assert coordinator.faults.last is not None
    row = store.launches.get(queued.run_id)
    assert row is not None
    assert row.status == "queued"  # released, not failed
    # The disk is writable again, but the fault is recent: no claim of any kind.
    clock.advance(HOLD_OFF_SECONDS - 1)
    assert coordinator.claim_next(None) is None
    assert coordinator.next_claim() is None
    row = store.launches.get(queued.run_id)
    assert row is not None
    assert row.status == "queued"
    clock.advance(1)  # `hold_off` seconds after the fault: claims resume
    assert coordinator.next_claim() is not None
    again = coordinator.claim_next(None)
    assert again is not None
    assert again.run_id == queued.run_id
    outcome = coordinator.execute(again)
    assert outcome is not None
    assert outcome.status == "completed"
