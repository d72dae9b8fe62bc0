"""Four processes race to activate and cancel 500 detached launches on one store file.

Two activate like hosts (claim_next -> activate -> run a one-node compute
workflow), one cancels random ids, one does both. Afterwards: no launch was
activated twice (one claim that reached `starting` per run, one runner, one bundle
with one `run_started`), and every launch ended in exactly one terminal state
with nothing left queued, starting, running or parked.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path

import pytest
from launch_it_kit import RACER, TERMINAL, TINY, Project, event_counts

from runner.compiler import build_catalog
from runner.host.runtime._local import Workspace
from runner.store import SqliteStore
from runner.testing import build_coordinator

LAUNCHES = 500
ROLES = ("activate", "activate", "cancel", "mixed")


@pytest.mark.slow
def test_racing_activators_and_cancellers_activate_each_launch_at_most_once(
        tmp_path: Path) -> None:
    project = Project(tmp_path / "proj")
    project.write_workflow("tiny", TINY)
    root = project.root
    ws = Workspace(build_catalog("workflows", root, None), root, root / ".wfrun")
    with SqliteStore(project.store_path) as store:
        coordinator = build_coordinator(ws, store, "plain", runner="setup")
        ids = [coordinator.prepare("tiny", {}).run_id for _ in range(LAUNCHES)]
    assert len(set(ids)) == LAUNCHES
    ids_file = tmp_path / "ids.txt"
    ids_file.write_text("\n".join(ids))

    deadline = time.monotonic() + 40
    procs = []
    for n, role in enumerate(ROLES):
        out = tmp_path / f"racer-{n}.jsonl"
        procs.append((out, subprocess.Popen(
            [sys.executable, str(RACER), str(root), role, str(ids_file), str(out), str(n),
             str(deadline)], cwd=root, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True)))
    for _, proc in procs:
        _, err = proc.communicate(timeout=50)
        assert proc.returncode == 0, err
    events = [json.loads(line) for out, _ in procs if out.exists()
              for line in out.read_text().splitlines()]

    # Every launch ended, in exactly one terminal state.
    records = {r.run_id: r for r in project.launches()}
    assert set(records) == set(ids)
    stuck = {r.run_id: r.status for r in records.values() if r.status not in TERMINAL}
    assert stuck == {}
    statuses = Counter(r.status for r in records.values())
    assert statuses["failed"] == 0, [(r.run_id, r.error_code, r.error_message)
                                     for r in records.values() if r.status == "failed"]
    # Both sides won races (otherwise this test proves little).
    assert statuses["done"] >= 25, statuses
    assert statuses["cancelled"] >= 25, statuses
    terminal_events: Counter[str] = Counter()
    for row in project.rows("SELECT run_id, type FROM run_events WHERE type IN "
                            "('launch.done', 'launch.failed', 'launch.cancelled')"):
        terminal_events[row["run_id"]] += 1
    assert set(terminal_events) == set(ids)
    assert all(n == 1 for n in terminal_events.values())
    starts = Counter(row["run_id"] for row in project.rows(
        "SELECT run_id FROM run_events WHERE type = 'launch.starting'"))
    assert all(n == 1 for n in starts.values()), "a launch was claimed into starting twice"

    # No double activation: one activator per run, and it is the runner on the row.
    activated: dict[str, list[str]] = defaultdict(list)
    for event in events:
        if event["event"] == "activated":
            activated[event["run_id"]].append(event["runner"])
    assert all(len(who) == 1 for who in activated.values()), \
        {k: v for k, v in activated.items() if len(v) > 1}
    for run_id, record in records.items():
        if record.status == "done":
            assert activated[run_id] == [record.runner_id]
    # One bundle per activation at most, with one run_started and one node execution.
    bundles = set(project.bundles())
    assert bundles <= set(ids)
    for run_id in bundles:
        counts = event_counts(project.trace(run_id))
        assert counts[("run_started", None)] == 1, run_id
        assert counts[("node_started", "one")] <= 1, run_id
        manifest = project.manifest(run_id)
        assert manifest is not None
        expected = {"done": "completed", "cancelled": "cancelled"}[records[run_id].status]
        assert manifest["status"] == expected, (run_id, manifest["status"])
    assert {r for r, rec in records.items() if rec.status == "done"} <= bundles
