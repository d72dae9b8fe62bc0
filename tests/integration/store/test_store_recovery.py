"""Conformance: listing recoverable launches and recovering an expired `starting` row."""

from __future__ import annotations

import itertools

import pytest
from storekit import FakeClock, intent, launch

from runner.store import LaunchRecord, LostRace, Store
from runner.store._states import LAUNCH_TRANSITIONS, RECOVERY_PATHS, RecoveryOutcome


def _starting(store: Store, run_id: str = "run-1", **kw: object) -> LaunchRecord:
    store.launches.enqueue(launch(run_id, **kw))
    claimed = store.launches.claim(run_id, runner_id="host-1", lease_seconds=30)
    assert isinstance(claimed, LaunchRecord)
    return claimed


def test_list_recoverable_shows_queued_parked_and_expired_claims(
    store: Store, clock: FakeClock
) -> None:
    store.launches.enqueue(launch("queued", origin_session_id="session-a"))
    _starting(store, "reclaimed")
    expired = _starting(store, "expired-starting", origin_session_id="session-b")
    running = _starting(store, "parked")
    store.launches.mark_running("parked", running.claim_token or "")
    store.launches.park("parked", running.claim_token or "")
    live = _starting(store, "live")
    assert live.claim_expires_at is not None
    clock.advance(31)
    renewed = store.launches.claim("live", runner_id="host-9")  # expired, so claimable
    assert isinstance(renewed, LaunchRecord)
    ids = {r.run_id for r in store.launches.list_recoverable()}
    assert ids == {"queued", "reclaimed", "expired-starting", "parked"}
    fresh = store.launches.claim("reclaimed", runner_id="host-9")
    assert isinstance(fresh, LaunchRecord)
    ids = {r.run_id for r in store.launches.list_recoverable()}
    assert ids == {"queued", "expired-starting", "parked"}
    assert [r.run_id for r in store.launches.list_recoverable(session_id="session-b")] == [
        expired.run_id
    ]


@pytest.mark.parametrize("outcome", sorted(RECOVERY_PATHS))
def test_recover_expired_starting_reconciles_to_what_the_bundle_shows(
    store: Store, clock: FakeClock, outcome: RecoveryOutcome
) -> None:
    claimed = _starting(store, origin_session_id="session-a")
    clock.advance(31)
    kwargs: dict[str, str] = {}
    if outcome == "failed":
        kwargs = {"code": "source_changed", "message": "the workflow source changed"}
    result = store.launches.recover_expired_starting(
        "run-1", epoch=claimed.epoch, outcome=outcome, **kwargs
    )  # type: ignore[arg-type]
    assert isinstance(result, LaunchRecord)
    assert result.status == outcome
    assert result.epoch == claimed.epoch
    if outcome == "queued":
        assert result.input() == claimed.input()  # activation will need it again
        assert result.claim_token is None
        again = store.launches.claim_next(runner_id="h", session_id="session-a")
        assert again is not None
        assert again.epoch == claimed.epoch + 1
    elif outcome == "running":
        assert result.input_cleared
        # The row stays claimable for the normal run recovery, not for the fence.
        assert store.launches.check_claim("run-1", claimed.claim_token or "") == LostRace(
            "run-1", "lease_expired", "running"
        )
        assert [r.run_id for r in store.launches.list_recoverable()] == ["run-1"]
    else:
        assert result.input_cleared
        assert result.claim_token is None
    if outcome == "failed":
        assert result.error_code == "source_changed"
    recovered = [e for e in store.run_events.read(run_id="run-1") if e.type == "launch.recovered"]
    assert len(recovered) == 1
    path = recovered[0].payload["path"]
    assert path == list(RECOVERY_PATHS[outcome])
    assert all((a, b) in LAUNCH_TRANSITIONS for a, b in itertools.pairwise(path))


def test_recovery_of_a_live_lease_loses(store: Store, clock: FakeClock) -> None:
    claimed = _starting(store)
    clock.advance(29)
    lost = store.launches.recover_expired_starting("run-1", epoch=claimed.epoch, outcome="queued")
    assert lost == LostRace("run-1", "lease_active", "starting")
    assert store.launches.get("run-1") == claimed


def test_recovery_loses_to_a_reclaim_since_it_looked(store: Store, clock: FakeClock) -> None:
    claimed = _starting(store)
    clock.advance(31)
    reclaimed = store.launches.claim("run-1", runner_id="host-2", lease_seconds=1)
    assert isinstance(reclaimed, LaunchRecord)
    clock.advance(2)
    lost = store.launches.recover_expired_starting("run-1", epoch=claimed.epoch, outcome="queued")
    assert lost == LostRace("run-1", "epoch_mismatch", "starting")
    assert store.launches.get("run-1") == reclaimed


def test_two_recoverers_one_wins(store: Store, clock: FakeClock) -> None:
    claimed = _starting(store)
    clock.advance(31)
    first = store.launches.recover_expired_starting("run-1", epoch=claimed.epoch, outcome="queued")
    second = store.launches.recover_expired_starting(
        "run-1", epoch=claimed.epoch, outcome="failed", code="source_changed", message="x"
    )
    assert isinstance(first, LaunchRecord)
    assert first.status == "queued"
    assert second == LostRace("run-1", "wrong_status", "queued")


def test_recovery_needs_a_starting_row(store: Store) -> None:
    store.launches.enqueue(launch("run-1"))
    assert store.launches.recover_expired_starting("run-1", epoch=0, outcome="queued") == (
        LostRace("run-1", "wrong_status", "queued")
    )
    assert store.launches.recover_expired_starting("nope", epoch=0, outcome="queued") == (
        LostRace("nope", "not_found")
    )


def test_recovery_to_failed_needs_a_code_and_notifies_atomically(
    store: Store, clock: FakeClock
) -> None:
    claimed = _starting(store, origin_session_id="session-a")
    clock.advance(31)
    with pytest.raises(ValueError, match="code"):
        store.launches.recover_expired_starting("run-1", epoch=claimed.epoch, outcome="failed")
    result = store.launches.recover_expired_starting(
        "run-1",
        epoch=claimed.epoch,
        outcome="failed",
        code="source_changed",
        message="source changed",
        turn_intent=intent("i-1", run_id="run-1"),
    )
    assert isinstance(result, LaunchRecord)
    assert result.status == "failed"
    assert [i.intent_id for i in store.turn_intents.list_eligible("session-a")] == ["i-1"]
