"""Conformance: claims, leases on the injected clock, epochs, the fence, transitions."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from storekit import FakeClock, intent, launch

from runner.store import LaunchRecord, LostRace, SqliteStore, Store, TurnIntent
from runner.store._states import LAUNCH_TRANSITIONS


def _record(result: object) -> LaunchRecord:
    assert isinstance(result, LaunchRecord), result
    return result


def _claimed(
    store: Store, run_id: str = "run-1", lease: float = 30.0, **kw: object
) -> LaunchRecord:
    if store.launches.get(run_id) is None:
        store.launches.enqueue(launch(run_id, **kw))
    return _record(store.launches.claim(run_id, runner_id="host-1", lease_seconds=lease))


def _running(store: Store, run_id: str = "run-1", **kw: object) -> LaunchRecord:
    claimed = _claimed(store, run_id, **kw)
    return _record(store.launches.mark_running(run_id, claimed.claim_token or ""))


# --- claiming -----------------------------------------------------------------------


def test_claim_takes_a_token_a_lease_from_the_clock_and_epoch_one(
    store: Store, clock: FakeClock
) -> None:
    record = _claimed(store, lease=30)
    assert record.status == "starting"
    assert record.runner_id == "host-1"
    assert record.claim_token
    assert len(record.claim_token) >= 32
    assert record.claim_expires_at == int(clock.now() * 1000) + 30_000
    assert record.epoch == 1
    assert record.input() is not None  # activation still needs the input


def test_claim_next_prefers_own_affinity_then_oldest(store: Store, clock: FakeClock) -> None:
    store.launches.enqueue(launch("old"))
    clock.advance(1)
    store.launches.enqueue(launch("mine", affinity_runner_id="host-2"))
    clock.advance(1)
    store.launches.enqueue(launch("newer"))
    order = []
    for _ in range(3):
        claimed = store.launches.claim_next(runner_id="host-2")
        assert claimed is not None
        order.append(claimed.run_id)
    assert order == ["mine", "old", "newer"]
    assert store.launches.claim_next(runner_id="host-2") is None


def test_a_session_claims_only_its_own_launches(store: Store) -> None:
    """Defect 6 of issue 9: a detached launch's prompt is built from private input
    that belongs to no conversation, so no session may activate it."""
    store.launches.enqueue(launch("theirs", origin_session_id="session-b"))
    store.launches.enqueue(launch("mine", origin_session_id="session-a"))
    store.launches.enqueue(launch("detached"))
    got = set()
    while claimed := store.launches.claim_next(runner_id="h", session_id="session-a"):
        got.add(claimed.run_id)
    assert got == {"mine"}
    for other in ("theirs", "detached"):
        row = store.launches.get(other)
        assert row is not None
        assert row.status == "queued"


def test_a_detached_host_never_activates_a_session_launch(store: Store, clock: FakeClock) -> None:
    store.launches.enqueue(launch("interactive", origin_session_id="session-a"))
    store.launches.enqueue(launch("cli"))
    first = store.launches.claim_next(runner_id="host", lease_seconds=5)
    assert first is not None
    assert first.run_id == "cli"
    assert store.launches.claim_next(runner_id="host") is None
    # Not even after the session's claim on it expired while starting.
    started = store.launches.claim_next(runner_id="s", session_id="session-a", lease_seconds=5)
    assert started is not None
    assert started.run_id == "interactive"
    clock.advance(10)
    nxt = store.launches.claim_next(runner_id="host")
    assert nxt is not None
    assert nxt.run_id == "cli"
    assert store.launches.claim_next(runner_id="host") is None


def test_a_detached_host_resumes_only_auto_parked_and_expired_detached_runs(
    store: Store, clock: FakeClock
) -> None:
    asked = _running(store, "asked")
    store.launches.park("asked", asked.claim_token or "")  # explicit: a person paused it
    auto = _running(store, "auto")
    store.launches.park("auto", auto.claim_token or "", mode="auto")  # a host stopped
    session = _running(store, "session", origin_session_id="session-b")
    running = _running(store, "running")
    claimed = store.launches.claim_next(runner_id="host")
    assert claimed is not None
    assert (claimed.run_id, claimed.status, claimed.park_mode) == ("auto", "starting", None)
    assert store.launches.claim_next(runner_id="host") is None
    clock.advance(31)
    reclaimed = store.launches.claim_next(runner_id="host", lease_seconds=60)
    assert reclaimed is not None
    assert reclaimed.run_id == "auto"  # its own claim expired too: oldest first
    reclaimed = store.launches.claim_next(runner_id="host", lease_seconds=60)
    assert reclaimed is not None
    assert reclaimed.run_id == "running"
    assert reclaimed.status == "running"
    assert reclaimed.epoch == running.epoch + 1
    assert store.launches.claim_next(runner_id="host") is None  # never the session's
    assert session.status == "running"
    # The explicitly parked run resumes when asked for by id.
    resumed = store.launches.claim("asked", runner_id="cli")
    assert isinstance(resumed, LaunchRecord)
    assert resumed.status == "starting"


def test_a_host_takes_a_session_launch_only_once_the_session_handed_it_over(
    store: Store, clock: FakeClock
) -> None:
    store.launches.enqueue(launch("queued", origin_session_id="session-a"))
    parked = _running(store, "parked", origin_session_id="session-b")
    store.launches.park("parked", parked.claim_token or "", mode="auto")
    _running(store, "held", origin_session_id="session-d")
    store.launches.enqueue(launch("other", origin_session_id="session-c"))
    assert store.launches.claim_next(runner_id="host") is None  # live sessions' own
    assert [r.run_id for r in store.launches.hand_over("session-b")] == ["parked"]
    assert store.launches.hand_over("session-b") == []  # idempotent
    assert [r.run_id for r in store.launches.hand_over("session-d")] == ["held"]
    assert [r.run_id for r in store.launches.hand_over("session-a")] == ["queued"]
    both = [store.launches.claim_next(runner_id="host", lease_seconds=60) for _ in "ab"]
    assert sorted((r.run_id, r.status, r.origin_session_id) for r in both if r) == [
        ("parked", "starting", "session-b"),
        ("queued", "starting", "session-a")]  # still the sessions': their follow-ups
    assert store.launches.claim_next(runner_id="host") is None  # "held": a live lease
    clock.advance(31)
    taken = store.launches.claim_next(runner_id="host", lease_seconds=60)
    assert taken is not None
    assert (taken.run_id, taken.status) == ("held", "running")  # its runner died
    assert store.launches.claim_next(runner_id="host") is None  # never session-c's
    # A host meets a step only the session can take: only the session claims it now.
    assert store.launches.hand_back("held") is True
    assert store.launches.hand_back("held") is False
    store.launches.park("held", taken.claim_token or "", mode="auto")
    assert store.launches.claim_next(runner_id="host") is None
    back = store.launches.claim_next(runner_id="s", session_id="session-d")
    assert back is not None
    assert back.run_id == "held"
    kinds = [e.type for e in store.run_events.read(run_id="held")]
    assert kinds.count("launch.handed_over") == 1
    assert kinds.count("launch.handed_back") == 1


def test_a_session_resumes_its_own_auto_parked_run_only(store: Store) -> None:
    mine = _running(store, "mine", origin_session_id="session-a")
    store.launches.park("mine", mine.claim_token or "", mode="explicit")
    assert store.launches.claim_next(runner_id="s", session_id="session-a") is None
    parked = store.launches.get("mine")
    assert parked is not None
    assert parked.park_mode == "explicit"


def test_reclaiming_an_expired_starting_claim_counts_an_activation_crash(
    store: Store, clock: FakeClock
) -> None:
    _claimed(store, lease=5)
    for crashes in (1, 2):
        clock.advance(10)
        again = store.launches.claim("run-1", runner_id="host-2", lease_seconds=5)
        assert isinstance(again, LaunchRecord)
        assert again.crash_count == crashes
    running = store.launches.mark_running("run-1", again.claim_token or "")
    assert isinstance(running, LaunchRecord)
    assert running.crash_count == 0


def test_claim_of_a_live_claim_loses(store: Store) -> None:
    first = _claimed(store)
    lost = store.launches.claim("run-1", runner_id="host-2")
    assert lost == LostRace("run-1", "lease_active", "starting")
    assert store.launches.get("run-1") == first
    assert store.launches.claim("nope", runner_id="h") == LostRace("nope", "not_found")


@pytest.mark.parametrize("status", ["done", "failed", "cancelled"])
def test_terminal_launches_are_never_claimed(store: Store, status: str) -> None:
    record = _running(store)
    token = record.claim_token or ""
    if status == "done":
        store.launches.finish("run-1", token)
    elif status == "failed":
        store.launches.fail("run-1", token, code="activation_failed", message="boom")
    else:
        store.launches.cancel("run-1", claim_token=token)
    assert store.launches.claim("run-1", runner_id="h") == LostRace("run-1", "wrong_status", status)
    assert store.launches.claim_next(runner_id="h") is None


# --- leases, epochs and the fence ------------------------------------------------------


def test_renewal_extends_a_live_lease(store: Store, clock: FakeClock) -> None:
    record = _claimed(store, lease=30)
    clock.advance(20)
    renewed = _record(
        store.launches.renew_lease("run-1", record.claim_token or "", lease_seconds=30)
    )
    assert renewed.claim_expires_at == int(clock.now() * 1000) + 30_000
    clock.advance(20)  # 40 s after the claim, 20 s after the renewal
    assert store.launches.check_claim("run-1", record.claim_token or "") == "starting"
    assert renewed.epoch == record.epoch  # renewal is not a reclaim


def test_an_expired_lease_fails_the_fence_and_cannot_be_renewed(
    store: Store, clock: FakeClock
) -> None:
    record = _claimed(store, lease=30)
    token = record.claim_token or ""
    clock.advance(29.999)
    assert store.launches.check_claim("run-1", token) == "starting"
    clock.advance(0.001)  # exactly at expiry the claim is gone
    assert store.launches.check_claim("run-1", token) == LostRace(
        "run-1", "lease_expired", "starting"
    )
    assert store.launches.renew_lease("run-1", token) == LostRace(
        "run-1", "lease_expired", "starting"
    )
    assert store.launches.mark_running("run-1", token) == LostRace(
        "run-1", "lease_expired", "starting"
    )


def test_reclaim_after_expiry_bumps_the_epoch_and_fences_out_the_old_holder(
    store: Store, clock: FakeClock
) -> None:
    old = _running(store)
    old_token = old.claim_token or ""
    clock.advance(31)
    new = _record(store.launches.claim("run-1", runner_id="host-2"))
    assert new.status == "running"  # a reclaim keeps the status
    assert new.epoch == old.epoch + 1 == 2
    assert new.claim_token != old_token
    assert new.runner_id == "host-2"
    clock.advance(-30)  # even if the old holder's clock thinks the lease is live
    for attempt in (
        store.launches.check_claim("run-1", old_token),
        store.launches.renew_lease("run-1", old_token),
        store.launches.park("run-1", old_token),
        store.launches.finish("run-1", old_token),
        store.launches.fail("run-1", old_token, code="activation_failed", message="x"),
        store.launches.cancel("run-1", claim_token=old_token),
    ):
        assert attempt == LostRace("run-1", "token_mismatch", "running")
    assert store.launches.get("run-1") == new
    events = [e.type for e in store.run_events.read(run_id="run-1")]
    assert events == ["launch.queued", "launch.starting", "launch.running", "launch.reclaimed"]


def test_a_holder_gives_its_lease_back_and_recovery_takes_the_run_at_once(
    store: Store, clock: FakeClock
) -> None:
    old = _running(store)
    token = old.claim_token or ""
    assert store.launches.yield_lease("run-1", "not-the-token") is False
    assert store.launches.check_claim("run-1", token) == "running"
    assert store.launches.yield_lease("run-1", token) is True
    # No wait for the 30 s lease: the fence refuses the old holder, the next claim takes it.
    assert store.launches.check_claim("run-1", token) == LostRace(
        "run-1", "lease_expired", "running"
    )
    assert store.launches.renew_lease("run-1", token) == LostRace(
        "run-1", "lease_expired", "running"
    )
    assert store.launches.yield_lease("run-1", token) is False  # already given back
    new = store.launches.claim_next(runner_id="host-2")
    assert new is not None
    assert new.run_id == "run-1"
    assert new.epoch == old.epoch + 1
    assert new.status == "running"
    assert store.launches.yield_lease("run-1", token) is False  # the new claim is untouched
    assert store.launches.get("run-1") == new
    store.launches.finish("run-1", new.claim_token or "")
    assert store.launches.yield_lease("run-1", new.claim_token or "") is False  # ended


def test_the_fence_needs_starting_or_running(store: Store) -> None:
    record = _running(store)
    token = record.claim_token or ""
    assert store.launches.check_claim("run-1", token) == "running"
    store.launches.park("run-1", token)
    assert store.launches.check_claim("run-1", token) == LostRace("run-1", "wrong_status", "parked")
    assert store.launches.check_claim("nope", token) == LostRace("nope", "not_found")


# --- transitions ------------------------------------------------------------------------


def test_mark_running_clears_private_input_and_options(store: Store, clock: FakeClock) -> None:
    claimed = _claimed(store)
    clock.advance(2)
    running = _record(store.launches.mark_running("run-1", claimed.claim_token or ""))
    assert running.status == "running"
    assert running.input_json is None
    assert running.options_json is None
    assert running.input_cleared
    assert running.started_at == int(clock.now() * 1000)
    assert running.claim_token == claimed.claim_token


def test_park_releases_the_claim_and_resume_claims_again(store: Store) -> None:
    running = _running(store)
    parked = _record(store.launches.park("run-1", running.claim_token or ""))
    assert parked.status == "parked"
    assert parked.claim_token is None
    assert parked.claim_expires_at is None
    resumed = _record(store.launches.claim("run-1", runner_id="host-2"))
    assert resumed.status == "starting"
    assert resumed.epoch == running.epoch + 1
    assert resumed.started_at == running.started_at


def test_finish_ends_done(store: Store, clock: FakeClock) -> None:
    running = _running(store)
    clock.advance(5)
    done = _record(store.launches.finish("run-1", running.claim_token or ""))
    assert done.status == "done"
    assert done.claim_token is None
    assert done.finished_at == int(clock.now() * 1000)


def test_an_ending_from_starting_goes_through_running_in_one_transaction(
        store: Store, clock: FakeClock) -> None:
    """A run written whole with its ending (ADR 0009, lever 3) never committed
    `running`: `from_starting` takes the row there in the ending's own transaction,
    by valid transitions only, clearing the input; without it `finish` refuses."""
    claimed = _claimed(store)
    token = claimed.claim_token or ""
    assert store.launches.finish("run-1", token) == LostRace("run-1", "wrong_status",
                                                             "starting")
    clock.advance(3)
    done = _record(store.launches.finish("run-1", token, from_starting=True))
    assert (done.status, done.claim_token, done.input_json) == ("done", None, None)
    assert done.started_at == done.finished_at == int(clock.now() * 1000)
    moves = [(e.payload["from"], e.payload["to"]) for e in store.run_events.read(
        run_id="run-1") if e.type != "launch.queued"]
    assert moves[-2:] == [("starting", "running"), ("running", "done")]
    assert set(moves) <= LAUNCH_TRANSITIONS
    # Fenced as `mark_running` is: another token, or a row a cancel took, is refused.
    for run_id, ending in (("run-2", "fail"), ("run-3", "cancel")):
        token = _claimed(store, run_id).claim_token or ""
        assert store.launches.fail(run_id, "other", code="run_failed", message="x",
                                   from_starting=True) == LostRace(
            run_id, "token_mismatch", "starting")
        if ending == "cancel":
            # Its lease live, only its holder cancels it; once expired, anyone.
            assert store.launches.cancel(run_id) == LostRace(run_id, "lease_active",
                                                             "starting")
            clock.advance(31)
            _record(store.launches.cancel(run_id))
            assert store.launches.cancel(run_id, claim_token=token, from_starting=True) \
                == LostRace(run_id, "wrong_status", "cancelled")
        else:
            failed = _record(store.launches.fail(run_id, token, code="run_failed",
                                                 message="x", from_starting=True))
            assert failed.status == "failed"
            assert failed.started_at is not None
    # A row already `running` goes straight on.
    running = _running(store, "run-4")
    assert _record(store.launches.finish("run-4", running.claim_token or "",
                                         from_starting=True)).status == "done"


def test_fail_records_a_stable_code_and_a_bounded_one_line_message(store: Store) -> None:
    claimed = _claimed(store)
    failed = _record(
        store.launches.fail(
            "run-1",
            claimed.claim_token or "",
            code="source_changed",
            message="source changed:\n" + "é" * 400,
        )
    )
    assert failed.status == "failed"
    assert failed.error_code == "source_changed"
    assert failed.error_message is not None
    assert "\n" not in failed.error_message
    assert failed.error_message.startswith("source changed: é")
    assert len(failed.error_message.encode()) <= 500
    assert failed.input_json is None
    assert failed.options_json is None
    assert failed.claim_token is None
    assert failed.finished_at is not None


def test_fail_refuses_an_unknown_code_and_changes_nothing(store: Store) -> None:
    claimed = _claimed(store)
    with pytest.raises(ValueError, match="unknown launch error code"):
        store.launches.fail("run-1", claimed.claim_token or "", code="oops", message="x")
    assert store.launches.get("run-1") == claimed


def test_fail_with_a_turn_intent_commits_both_or_neither(store: Store) -> None:
    claimed = _claimed(store, origin_session_id="session-a")
    # Another pending intent for (run, session) makes the intent lose: nothing changes.
    blocker = store.turn_intents.ensure(intent("blocker", run_id="run-1"))
    assert isinstance(blocker, TurnIntent)
    lost = store.launches.fail(
        "run-1",
        claimed.claim_token or "",
        code="workflow_invalid",
        message="bad",
        turn_intent=intent("follow-up", run_id="run-1"),
    )
    assert lost == LostRace("follow-up", "intent_pending", None, "blocker")
    assert store.launches.get("run-1") == claimed
    assert store.turn_intents.get("follow-up") is None

    store.launches.enqueue(launch("run-2", origin_session_id="session-b"))
    token = _record(store.launches.claim("run-2", runner_id="h")).claim_token or ""
    failed = _record(
        store.launches.fail(
            "run-2",
            token,
            code="workflow_invalid",
            message="bad",
            turn_intent=intent("follow-up", run_id="run-2", target_session_id="session-b"),
        )
    )
    assert failed.status == "failed"
    follow_up = store.turn_intents.get("follow-up")
    assert follow_up is not None
    assert follow_up.eligible
    assert [i.intent_id for i in store.turn_intents.list_eligible("session-b")] == ["follow-up"]


def test_a_starting_launch_with_a_live_lease_is_cancelled_only_by_its_holder(
        store: Store, clock: FakeClock) -> None:
    """While its lease is live a `starting` row changes only through its holder (a
    cancel is asked of it, recovery.py): a run written whole syncs its files before
    its ending's transaction knowing no cancel can win meanwhile (ADR 0009, lever 3).
    Once the lease has expired, a cancel needs no token and beats activation."""
    claimed = _claimed(store, lease=5.0)
    token = claimed.claim_token or ""
    assert store.launches.cancel("run-1") == LostRace("run-1", "lease_active", "starting")
    assert store.launches.get("run-1") == claimed  # nothing changed
    clock.advance(5)
    cancelled = _record(store.launches.cancel("run-1"))
    assert cancelled.status == "cancelled"
    assert cancelled.claim_token is None
    assert cancelled.input_json is None
    assert store.launches.mark_running("run-1", token) == LostRace(
        "run-1", "wrong_status", "cancelled"
    )
    assert store.launches.check_claim("run-1", token) == LostRace(
        "run-1", "wrong_status", "cancelled"
    )
    # The holder records the cancel it was asked for, with its token.
    other = _claimed(store, "run-2")
    held = _record(store.launches.cancel("run-2", claim_token=other.claim_token))
    assert held.status == "cancelled"


def test_cancel_of_queued_and_parked_needs_no_token(store: Store) -> None:
    store.launches.enqueue(launch("queued"))
    assert _record(store.launches.cancel("queued")).status == "cancelled"
    running = _running(store, "parked")
    store.launches.park("parked", running.claim_token or "")
    assert _record(store.launches.cancel("parked")).status == "cancelled"


def test_cancel_of_a_running_launch_needs_its_claim(store: Store) -> None:
    running = _running(store)
    assert store.launches.cancel("run-1") == LostRace("run-1", "wrong_status", "running")
    assert store.launches.cancel("run-1", claim_token="forged") == LostRace(
        "run-1", "token_mismatch", "running"
    )
    cancelled = _record(store.launches.cancel("run-1", claim_token=running.claim_token))
    assert cancelled.status == "cancelled"
    assert store.launches.cancel("run-1") == LostRace("run-1", "wrong_status", "cancelled")


# Every claim-holding operation, from every status it must not start from.
_OPS = ["mark_running", "park", "finish", "fail", "cancel_claimed"]
_VALID_FROM = {
    "mark_running": {"starting"},
    "park": {"running"},
    "finish": {"running"},
    "fail": {"starting", "running"},
    "cancel_claimed": {"starting", "running"},
}


def _call(store: Store, op: str, token: str) -> object:
    launches = store.launches
    if op == "fail":
        return launches.fail("run-1", token, code="activation_failed", message="x")
    if op == "cancel_claimed":
        return launches.cancel("run-1", claim_token=token)
    method = getattr(launches, op)
    return method("run-1", token)


def _put_in(store: Store, status: str) -> str:
    """Drive run-1 to `status` through valid transitions; returns the last token."""
    store.launches.enqueue(launch("run-1"))
    if status == "queued":
        return "no-token"
    claimed = _record(store.launches.claim("run-1", runner_id="h"))
    token = claimed.claim_token or ""
    if status == "starting":
        return token
    if status == "cancelled":
        store.launches.cancel("run-1", claim_token=token)  # its holder's, the lease live
        return token
    if status == "failed":
        store.launches.fail("run-1", token, code="activation_failed", message="x")
        return token
    store.launches.mark_running("run-1", token)
    if status == "parked":
        store.launches.park("run-1", token)
    elif status == "done":
        store.launches.finish("run-1", token)
    return token


@pytest.mark.parametrize("op", _OPS)
@pytest.mark.parametrize(
    "status", ["queued", "starting", "running", "parked", "done", "failed", "cancelled"]
)
def test_every_operation_loses_from_a_wrong_status_or_token_and_changes_nothing(
    store: Store, op: str, status: str
) -> None:
    token = _put_in(store, status)
    before = store.launches.get("run-1")
    assert before is not None
    assert before.status == status
    if status in _VALID_FROM[op]:
        assert _call(store, op, "forged-token") == LostRace("run-1", "token_mismatch", status)
    else:
        assert _call(store, op, token) == LostRace("run-1", "wrong_status", status)
    assert store.launches.get("run-1") == before


def test_every_recorded_transition_is_in_the_seed_table(store: Store, clock: FakeClock) -> None:
    for status in ["queued", "starting", "running", "parked", "done", "failed", "cancelled"]:
        run_id = f"run-{status}"
        store.launches.enqueue(launch(run_id))
        claimed = _record(store.launches.claim(run_id, runner_id="h"))
        token = claimed.claim_token or ""
        if status in ("running", "parked", "done"):
            store.launches.mark_running(run_id, token)
        if status == "parked":
            store.launches.park(run_id, token)
            store.launches.cancel(run_id)
        if status == "done":
            store.launches.finish(run_id, token)
        if status == "failed":
            store.launches.fail(run_id, token, code="cancelled", message="x")
    seen = {
        (e.payload["from"], e.payload["to"])
        for e in store.run_events.read()
        if e.type != "launch.queued" and e.payload["from"] != e.payload["to"]
    }
    assert seen
    assert seen <= LAUNCH_TRANSITIONS


def test_a_claimer_that_found_nothing_still_sees_new_and_expired_launches(
    store: Store, clock: FakeClock
) -> None:
    """After an empty claim the next one looks before it writes (domain/_launches.py,
    `_claimable`): what it looks at must be what the claim would take."""
    assert store.launches.claim_next(runner_id="host-1") is None
    store.launches.enqueue(launch("run-new"))
    taken = _record(store.launches.claim_next(runner_id="host-1", lease_seconds=10))
    assert taken.run_id == "run-new"
    assert store.launches.claim_next(runner_id="host-2") is None  # held: nothing free
    assert store.launches.claim_next(runner_id="host-2") is None
    clock.advance(11)  # the lease runs out on the store's clock, not the caller's
    again = _record(store.launches.claim_next(runner_id="host-2"))
    assert (again.run_id, again.epoch) == ("run-new", 2)


def test_an_empty_claim_after_an_empty_claim_takes_no_write_lock(tmp_path: Path) -> None:
    """SQLite: with another connection holding the write lock, a claimer that found
    nothing last time answers at once instead of waiting for the lock."""
    path = tmp_path / "store.sqlite3"
    store = SqliteStore(path, busy_timeout_ms=200)
    try:
        assert store.launches.claim_next(runner_id="host-1") is None
        other = sqlite3.connect(path, isolation_level=None)
        try:
            other.execute("BEGIN IMMEDIATE")
            assert store.launches.claim_next(runner_id="host-1") is None  # no StoreBusy
            other.execute("ROLLBACK")
        finally:
            other.close()
        store.launches.enqueue(launch("run-late"))
        assert _record(store.launches.claim_next(runner_id="host-1")).run_id == "run-late"
    finally:
        store.close()
