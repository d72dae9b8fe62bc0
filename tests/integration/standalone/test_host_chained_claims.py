"""A host slot takes its next launch in the commit that records its last run's ending.

Real hosts on a real store: the chain claims every launch after a slot's first one,
never runs more at once than `--max-runs`, leaves nothing `starting` when the host is
stopped as a slot claims, and a host SIGKILLed right after such a claim loses nothing:
the next host finishes every launch once.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from standalonekit import Project, wait_for
from waiting import DEADLINE

from runner.host._daemon import StandaloneHost
from runner.store import LaunchRecord, SqliteStore

pytestmark = pytest.mark.slow
LEASE = {"WFRUN_LEASE_SECONDS": "1.5"}


@contextmanager
def _host(project: Project, **kw: Any) -> Iterator[tuple[StandaloneHost, SqliteStore]]:
    store = project.store()
    try:
        yield StandaloneHost(project.workspace(), store, **kw), store
    finally:
        store.close()


def _count_claims(store: SqliteStore) -> list[str]:
    """The launches the host's own `claim_next` took (a spy on the real store)."""
    taken: list[str] = []
    claim_next = store.launches.claim_next

    def counting(**kw: Any) -> LaunchRecord | None:
        record = claim_next(**kw)
        if record is not None:
            taken.append(record.run_id)
        return record

    store.launches.claim_next = counting  # type: ignore[method-assign]
    return taken


def test_a_slot_claims_each_next_launch_with_the_last_ones_ending(project: Project) -> None:
    ids = project.queue("tiny", [{"n": i} for i in range(6)])
    store = project.store()
    try:
        # Spied before the host is built: its launch book takes the queue's own methods.
        claimed_alone = _count_claims(store)
        report = StandaloneHost(project.workspace(), store, max_runs=1).run(once=True)
    finally:
        store.close()
    assert report.counts() == {"completed": 6}
    assert report.started == 6
    assert len(claimed_alone) == 1  # the other five came with an ending
    assert claimed_alone[0] in ids
    for run_id in ids:
        record = project.launch(run_id)
        assert (record.status, record.epoch, record.crash_count) == ("done", 1, 0)
        assert project.trace_types(run_id).count("run_started") == 1


def test_chained_claims_never_run_more_than_max_runs_at_once(project: Project) -> None:
    ids = project.queue("tiny", [{"n": i} for i in range(30)])
    lock = threading.Lock()
    now = peak = 0

    def started(_run_id: str) -> None:
        nonlocal now, peak
        with lock:
            now += 1
            peak = max(peak, now)

    def ended(_run_id: str, _outcome: object) -> None:
        nonlocal now
        with lock:
            now -= 1

    with _host(project, max_runs=2, on_run_ended=ended) as (host, _store):
        host.on_run_started = started
        report = host.run(once=True)
    assert report.counts() == {"completed": 30}
    assert peak <= 2
    assert all(project.launch_status(r) == "done" for r in ids)
    workers = [t for t in threading.enumerate() if t.name.startswith("wfrun-host-worker-")]
    assert len(workers) <= 2  # one thread per slot in use, never a third


def test_a_launch_claimed_as_the_host_stops_is_parked_for_the_next_host(
        project: Project) -> None:
    ids = project.queue("tiny", [{"n": 1}, {"n": 2}, {"n": 3}])
    stopped: list[str] = []
    with _host(project, max_runs=1) as (host, _store):
        def ended(run_id: str, _outcome: object) -> None:
            if not stopped:  # after the first ending, which claimed the next launch
                stopped.append(run_id)
                host.stop()

        host.on_run_ended = ended
        host.run()
    # Launches queued in one millisecond go in run id order: which ran first is the
    # store's choice, so the test reads it from the rows.
    [first] = stopped
    assert project.launch_status(first) == "done"
    rest = {run_id: project.launch(run_id) for run_id in ids if run_id != first}
    states = sorted((r.status, r.park_mode) for r in rest.values())
    assert states == [("parked", "auto"), ("queued", None)]  # none left starting
    [chained] = [run_id for run_id, r in rest.items() if r.status == "parked"]
    assert project.trace_types(chained)[-1] != "run_completed"  # parked before its end

    with _host(project, max_runs=1) as (host, _store):
        report = host.run(once=True)
    assert report.counts() == {"completed": 2}
    for run_id in ids:
        assert project.launch_status(run_id) == "done"
        types = project.trace_types(run_id)
        assert types.count("run_started") == 1
        assert types.count("run_completed") == 1
        assert types.count("node_finished") == 3  # nothing ran twice


def test_a_host_killed_right_after_a_chained_claim_loses_nothing(project: Project) -> None:
    ids = project.queue("tiny", [{"n": i} for i in range(4)])
    # The second activation is the first chained claim: SIGKILL just after it committed.
    crashed = project.host("--once", "--max-runs", "1", "--no-controllers",
                           WFRUN_CRASH_AT="after_claim:2", **LEASE)
    assert crashed.wait(timeout=DEADLINE) == -9
    rows = {run_id: project.launch(run_id) for run_id in ids}
    assert sorted(r.status for r in rows.values()) == ["done", "queued", "queued",
                                                       "starting"]
    [orphan] = [run_id for run_id, r in rows.items() if r.status == "starting"]
    assert rows[orphan].epoch == 1  # claimed with the first run's ending

    again = project.host("--max-runs", "1", "--no-controllers", **LEASE)
    wait_for("every launch to end", lambda: all(
        project.launch_status(r) == "done" for r in ids))
    again.send_signal(signal.SIGTERM)
    assert again.wait(timeout=DEADLINE) == 0
    assert project.launch(orphan).epoch == 2  # reclaimed once its lease ran out
    for run_id in ids:
        types = project.trace_types(run_id)
        assert types.count("run_started") == 1
        assert types.count("node_finished") == 3
