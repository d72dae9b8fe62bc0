"""Conformance: the next launch claimed in the commit that records a run's ending.

A host slot that frees up asks `finish`, `fail` or the holder's `cancel` to claim its
next launch in the same transaction (`NextClaim`), one commit instead of two. The
claim must be exactly what `claim_next` would have taken, and it must commit with the
ending or not at all.
"""

from __future__ import annotations

import pytest
from storekit import FakeClock, intent, launch

from runner.store import BundleRefused, LaunchRecord, LostRace, NextClaim, Store, TurnIntent


def _record(result: object) -> LaunchRecord:
    assert isinstance(result, LaunchRecord), result
    return result


def _running(store: Store, run_id: str, **kw: object) -> LaunchRecord:
    store.launches.enqueue(launch(run_id, **kw))
    claimed = _record(store.launches.claim(run_id, runner_id="host-1"))
    return _record(store.launches.mark_running(run_id, claimed.claim_token or ""))


def _next(lease: float = 30.0) -> NextClaim:
    return NextClaim(runner_id="host-1", lease_seconds=lease)


def test_finish_claims_the_next_launch_as_claim_next_would(
    store: Store, clock: FakeClock
) -> None:
    running = _running(store, "run-1")
    clock.advance(1)
    store.launches.enqueue(launch("run-2"))
    clock.advance(1)
    store.launches.enqueue(launch("run-3"))
    then = _next(lease=20)
    done = _record(store.launches.finish("run-1", running.claim_token or "", then_claim=then))
    assert done.status == "done"
    taken = then.record
    assert taken is not None
    assert taken.run_id == "run-2"  # the oldest first, as claim_next takes them
    assert (taken.status, taken.runner_id, taken.epoch) == ("starting", "host-1", 1)
    assert taken.claim_token
    assert taken.claim_token != running.claim_token
    assert taken.claim_expires_at == int(clock.now() * 1000) + 20_000
    assert taken.input() is not None  # activation still needs it
    assert store.launches.get("run-2") == taken
    assert _record(store.launches.get("run-3")).status == "queued"
    types = [e.type for e in store.run_events.read(after_seq=0)
             if e.run_id == "run-2"]
    assert types == ["launch.queued", "launch.starting"]


def test_an_own_affinity_launch_comes_first_as_with_claim_next(store: Store) -> None:
    running = _running(store, "run-1")
    store.launches.enqueue(launch("old"))
    store.launches.enqueue(launch("mine", affinity_runner_id="host-1"))
    then = _next()
    store.launches.finish("run-1", running.claim_token or "", then_claim=then)
    assert then.record is not None
    assert then.record.run_id == "mine"


def test_fail_and_the_holders_cancel_claim_the_next_launch_too(store: Store) -> None:
    failing = _running(store, "run-1")
    cancelling = _running(store, "run-2")
    store.launches.enqueue(launch("run-3"))
    store.launches.enqueue(launch("run-4"))
    after_fail, after_cancel = _next(), _next()
    failed = _record(store.launches.fail("run-1", failing.claim_token or "", code="run_failed",
                                         message="node 'x' failed", then_claim=after_fail))
    cancelled = _record(store.launches.cancel("run-2", claim_token=cancelling.claim_token,
                                              then_claim=after_cancel))
    assert (failed.status, cancelled.status) == ("failed", "cancelled")
    assert after_fail.record is not None
    assert after_fail.record.run_id == "run-3"
    assert after_cancel.record is not None
    assert after_cancel.record.run_id == "run-4"


def test_nothing_claimable_claims_nothing_and_a_later_launch_is_still_seen(
    store: Store,
) -> None:
    running = _running(store, "run-1")
    store.launches.enqueue(launch("theirs", origin_session_id="session-a"))  # not a host's
    then = _next()
    assert _record(store.launches.finish("run-1", running.claim_token or "",
                                         then_claim=then)).status == "done"
    assert then.record is None
    assert _record(store.launches.get("theirs")).status == "queued"
    # The empty chained claim must not hide a launch from the next claim_next (which
    # looks before it writes after an empty claim).
    store.launches.enqueue(launch("late"))
    assert _record(store.launches.claim_next(runner_id="host-2")).run_id == "late"


def test_a_lost_ending_claims_nothing(store: Store) -> None:
    running = _running(store, "run-1")
    store.launches.enqueue(launch("run-2"))
    then = _next()
    assert store.launches.finish("run-1", "forged", then_claim=then) == LostRace(
        "run-1", "token_mismatch", "running")
    assert then.record is None
    assert _record(store.launches.get("run-2")).status == "queued"
    assert _record(store.launches.get("run-1")) == running


def test_an_ending_rolled_back_by_its_intent_rolls_the_claim_back(store: Store) -> None:
    running = _running(store, "run-1", origin_session_id="session-a")
    store.launches.enqueue(launch("run-2"))
    assert isinstance(store.turn_intents.ensure(intent("blocker")), TurnIntent)
    then = _next()
    lost = store.launches.fail("run-1", running.claim_token or "", code="run_failed",
                               message="bad", turn_intent=intent("follow-up"),
                               then_claim=then)
    assert isinstance(lost, LostRace)
    assert lost.reason == "intent_pending"
    assert then.record is None
    assert _record(store.launches.get("run-2")).status == "queued"
    assert _record(store.launches.get("run-1")) == running


def test_a_refused_bundle_write_rolls_the_claim_back(store: Store) -> None:
    running = _running(store, "run-1")
    store.launches.enqueue(launch("run-2"))
    then = _next()
    with pytest.raises(BundleRefused):
        store.launches.finish("run-1", running.claim_token or "", then_claim=then,
                              bundle=lambda _tx: "sealed")
    assert then.record is None
    assert _record(store.launches.get("run-2")).status == "queued"
    assert _record(store.launches.get("run-1")).status == "running"


def test_a_request_answered_before_is_reset_by_the_next_ending(store: Store) -> None:
    first, second = _running(store, "run-1"), _running(store, "run-2")
    store.launches.enqueue(launch("run-3"))
    then = _next()
    store.launches.finish("run-1", first.claim_token or "", then_claim=then)
    assert then.record is not None
    store.launches.finish("run-2", second.claim_token or "", then_claim=then)
    assert then.record is None  # nothing left: not the launch the first ending took


def test_every_move_returns_the_row_as_stored(store: Store, clock: FakeClock) -> None:
    """Each transition's record is the row it left (SQLite computes it from the row in
    hand instead of reading it again; Postgres reads it from RETURNING): through every
    target, a take-over of a dead claim, and an ending straight from `starting`."""
    def same(result: object) -> LaunchRecord:
        record = _record(result)
        assert store.launches.get(record.run_id) == record
        return record

    store.launches.enqueue(launch("a", affinity_runner_id="host-1"))
    first = same(store.launches.claim("a", runner_id="host-1", lease_seconds=5))
    clock.advance(6)  # its runner died while starting: the take-over counts a crash
    again = same(store.launches.claim_next(runner_id="host-2"))
    assert (again.run_id, again.crash_count, again.epoch) == ("a", 1, first.epoch + 1)
    parked = same(store.launches.park("a", (same(store.launches.mark_running(
        "a", again.claim_token or ""))).claim_token or "", mode="auto"))
    assert (parked.park_mode, parked.crash_count, parked.claim_token) == ("auto", 0, None)
    claimed = same(store.launches.claim_next(runner_id="host-1"))
    released = same(store.launches.release("a", claimed.claim_token or ""))
    assert (released.status, released.runner_id, released.crash_count) == ("queued", None, 0)
    retaken = same(store.launches.claim("a", runner_id="host-1", lease_seconds=5))
    clock.advance(6)
    recovered = same(store.launches.recover_expired_starting(
        "a", epoch=retaken.epoch, outcome="queued"))
    assert (recovered.status, recovered.crash_count) == ("queued", 1)
    # From `starting` to each ending in one UPDATE: `running`'s columns too ("a" has
    # a crash to clear, and its start stays the first one).
    for run_id, end in (("a", "finish"), ("b", "fail"), ("c", "cancel")):
        if run_id != "a":
            store.launches.enqueue(launch(run_id))
        token = same(store.launches.claim(run_id, runner_id="host-1")).claim_token or ""
        clock.advance(1)
        if end == "finish":
            ended = same(store.launches.finish(run_id, token, from_starting=True,
                                               then_claim=_next()))
        elif end == "fail":
            ended = same(store.launches.fail(run_id, token, code="run_failed", message="x",
                                             from_starting=True))
        else:
            ended = same(store.launches.cancel(run_id, claim_token=token, from_starting=True))
        assert ended.crash_count == 0
        assert ended.finished_at == int(clock.now() * 1000)
        assert ended.started_at == (parked.started_at if run_id == "a" else ended.finished_at)
        moves = [(e.type, e.payload, e.runner_id) for e in store.run_events.read(
            run_id=run_id)][-2:]
        assert moves[0] == ("launch.running", {"from": "starting", "to": "running",
                                               "epoch": ended.epoch}, "host-1")
        assert moves[1][1]["from"] == "running"
    store.launches.enqueue(launch("d"))
    same(store.launches.cancel("d"))
    # From `running`, and recovery's every outcome from an expired `starting` row.
    for run_id, end in (("e", "finish"), ("f", "fail"), ("g", "cancel")):
        store.launches.enqueue(launch(run_id))
        token = same(store.launches.claim(run_id, runner_id="host-1")).claim_token or ""
        same(store.launches.mark_running(run_id, token))
        same(store.launches.finish(run_id, token, waiting=True) if end == "finish" else
             store.launches.fail(run_id, token, code="interrupted", message="x")
             if end == "fail" else store.launches.cancel(run_id, claim_token=token))
    for outcome in ("queued", "running", "parked", "done", "failed", "cancelled"):
        run_id = f"r-{outcome}"
        store.launches.enqueue(launch(run_id))
        epoch = same(store.launches.claim(run_id, runner_id="host-1", lease_seconds=5)).epoch
        clock.advance(6)
        failed = outcome == "failed"
        assert same(store.launches.recover_expired_starting(
            run_id, epoch=epoch, outcome=outcome, code="run_failed" if failed else None,
            message="x" if failed else None)).status == outcome
