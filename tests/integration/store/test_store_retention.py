"""Retention (`wfrun prune`): what may be forgotten or trimmed, and what never is; and
`launches.query` returns every match unless asked for fewer."""

from __future__ import annotations

from typing import Any

from storekit import FakeClock, launch

from runner.store import SqliteStore
from runner.store._controller_interface import Resource

FP = "sha256:" + "ab" * 32
GONE_UID = "f" * 32  # a resource that was deleted: nothing reserves its effects again


def _sqlite(store: Any) -> SqliteStore:
    assert isinstance(store, SqliteStore)
    return store


def test_query_returns_every_match_without_a_silent_cap(store: Any) -> None:
    for i in range(1001):
        store.launches.enqueue(launch(f"run-{i:04d}"))
    assert len(store.launches.query(statuses=["queued"])) == 1001
    assert len(store.launches.query(statuses=["queued"], limit=10)) == 10


def test_pinned_runs_are_the_ones_something_still_acts_on(store: Any) -> None:
    s = _sqlite(store)
    s.launches.enqueue(launch("run-queued"))
    s.launches.enqueue(launch("run-cancelled"))
    s.launches.cancel("run-cancelled")
    pinned = s.retention.pinned(["run-queued", "run-cancelled", "run-unknown"])
    assert pinned == {"run-queued": "its launch is queued"}
    assert s.retention.forget_runs(["run-queued", "run-cancelled", "run-unknown"]) == 1
    assert s.launches.get("run-queued") is not None
    assert s.launches.get("run-cancelled") is None
    assert s.run_events.read(run_id="run-cancelled") == []
    assert s.run_events.read(run_id="run-queued") != []


def test_a_pending_channel_notification_pins_its_run_and_a_finished_one_goes_with_it(
        store: Any) -> None:
    s = _sqlite(store)
    for run in ("run-a", "run-b"):
        s.launches.enqueue(launch(run))
        s.launches.cancel(run)
        s.deliveries.enqueue(notification_id=f"{run}:n:1", channel="ops", run_id=run,
                             node_id="n", kind="progress", message="m")
    (first, second) = s.deliveries.claim_due()
    assert s.deliveries.mark_delivered(first)
    assert s.retention.pinned(["run-a", "run-b"]) == {
        second.run_id: "a channel notification is undelivered"}
    assert s.retention.forget_runs(["run-a", "run-b"]) == 1
    assert s.deliveries.of_run(first.run_id) == []
    assert [d.status for d in s.deliveries.of_run(second.run_id)] == ["pending"]


def test_trim_keeps_what_a_live_resource_or_launch_still_needs(
        store: Any, clock: FakeClock) -> None:
    s = _sqlite(store)
    live: Resource = s.resources.apply("ctl", "live", {"n": 1})
    for uid in (live.uid, GONE_UID):
        s.effects.reserve(uid, "done", generation=1, kind="k", request_fingerprint=FP)
        s.effects.complete(uid, "done", state="applied")
        s.effects.reserve(uid, "open", generation=1, kind="k", request_fingerprint=FP)
    s.launches.enqueue(launch("run-old-queued"))
    s.launches.enqueue(launch("run-old-done"))
    s.launches.cancel("run-old-done")
    clock.advance(100)
    cutoff = s.now_ms()
    s.launches.enqueue(launch("run-new"))
    s.launches.cancel("run-new")

    trimmed = s.retention.trim(cutoff)

    assert trimmed.effects == 1  # the deleted resource's applied effect, nothing else
    assert s.effects.get(GONE_UID, "done") is None
    assert s.effects.get(GONE_UID, "open") is not None  # pending: observed before a retry
    assert s.effects.get(live.uid, "done") is not None  # its record stops a second apply
    assert s.run_events.read(run_id="run-old-done") == []
    assert s.run_events.read(run_id="run-old-queued") != []  # its launch is not terminal
    assert s.run_events.read(run_id="run-new") != []  # newer than the cut-off
    assert trimmed.run_events >= 2


def test_trim_gives_each_named_table_its_own_cutoff(store: Any, clock: FakeClock) -> None:
    s = _sqlite(store)
    s.launches.enqueue(launch("run-done"))
    s.launches.cancel("run-done")
    clock.advance(100)
    later = s.now_ms()
    # Everything is older than `later`, but only run_events gets that cut-off.
    trimmed = s.retention.trim(0, tables={"run_events": later})
    assert trimmed.run_events >= 1
    assert s.run_events.read(run_id="run-done") == []
    assert trimmed.controller_events == trimmed.effects == trimmed.workflow_requests == 0
