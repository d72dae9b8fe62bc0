"""Conformance: turn intents (ensure, eligibility, delivery claims, resolution)."""

from __future__ import annotations

import pytest
from storekit import FakeClock, intent

from runner.store import IdentityConflict, LostRace, Store, TurnIntent


def _ok(result: object) -> TurnIntent:
    assert isinstance(result, TurnIntent), result
    return result


def _claimed(store: Store, intent_id: str = "i-1", lease: float = 30.0) -> TurnIntent:
    if store.turn_intents.get(intent_id) is None:
        _ok(store.turn_intents.ensure(intent(intent_id, eligible=True)))
    return _ok(store.turn_intents.claim_delivery(intent_id, lease_seconds=lease))


def test_ensure_inserts_once_and_returns_the_stored_intent(store: Store, clock: FakeClock) -> None:
    new = intent("i-1", fallback_facts={"b": 2, "a": 1})
    first = _ok(store.turn_intents.ensure(new))
    assert first.pending
    assert not first.eligible
    assert first.fallback_facts == {"a": 1, "b": 2}
    assert first.requested_at == int(clock.now() * 1000)
    assert (first.node_id, first.attempt_id, first.cause) == ("$launch", None, "launch_failed")
    clock.advance(5)
    again = _ok(store.turn_intents.ensure(new))  # a crash retry
    assert again == first
    assert store.turn_intents.list_pending("run-1") == [first]


def test_ensure_with_the_same_id_and_other_content_is_an_identity_conflict(store: Store) -> None:
    store.turn_intents.ensure(intent("i-1"))
    with pytest.raises(IdentityConflict, match="fallback_facts_json"):
        store.turn_intents.ensure(intent("i-1", fallback_facts={"other": True}))
    with pytest.raises(IdentityConflict, match="cause"):
        store.turn_intents.ensure(intent("i-1", cause="timed_out"))


def test_ensure_does_not_change_state_of_an_existing_intent(store: Store) -> None:
    stored = _ok(store.turn_intents.ensure(intent("i-1")))
    again = _ok(store.turn_intents.ensure(intent("i-1", eligible=True)))
    assert again == stored
    assert not again.eligible


def test_one_pending_intent_per_run_and_session(store: Store) -> None:
    _ok(store.turn_intents.ensure(intent("i-1")))
    lost = store.turn_intents.ensure(intent("i-2"))
    assert lost == LostRace("i-2", "intent_pending", None, "i-1")
    assert store.turn_intents.get("i-2") is None
    # Another session, or another run, is independent.
    _ok(store.turn_intents.ensure(intent("i-3", target_session_id="session-b")))
    _ok(store.turn_intents.ensure(intent("i-4", run_id="run-2")))
    # Once resolved, the run may get a new intent for that session.
    store.turn_intents.make_eligible("i-1")
    claimed = _claimed(store, "i-1")
    store.turn_intents.resolve(
        "i-1", claimed.delivery_claim_token or "", resolution="fallback", message_id="m-1"
    )
    _ok(store.turn_intents.ensure(intent("i-2")))


@pytest.mark.parametrize(
    "bad",
    [
        {"cause": "oops"},
        {"intent_id": ""},
        {"fallback_facts": {"x": float("inf")}},
        {"fallback_facts": ["not", "object"]},
        {"fallback_facts": {"big": "x" * 70_000}},
    ],
)
def test_ensure_refuses_invalid_intents(store: Store, bad: dict[str, object]) -> None:
    fields: dict[str, object] = {"intent_id": "i-1", **bad}
    with pytest.raises(ValueError, match=r"."):
        store.turn_intents.ensure(intent(**fields))  # type: ignore[arg-type]
    assert store.turn_intents.list_pending("run-1") == []


def test_make_eligible_is_idempotent_and_orders_delivery(store: Store, clock: FakeClock) -> None:
    store.turn_intents.ensure(intent("late", run_id="run-1"))
    store.turn_intents.ensure(intent("early", run_id="run-2"))
    store.turn_intents.ensure(intent("never", run_id="run-3"))
    assert store.turn_intents.list_eligible("session-a") == []
    first = _ok(store.turn_intents.make_eligible("early"))
    assert first.eligible
    assert first.eligible_at == int(clock.now() * 1000)
    clock.advance(1)
    _ok(store.turn_intents.make_eligible("late"))
    clock.advance(1)
    assert _ok(store.turn_intents.make_eligible("early")) == first
    assert [i.intent_id for i in store.turn_intents.list_eligible("session-a")] == ["early", "late"]
    assert store.turn_intents.list_eligible("session-b") == []
    assert store.turn_intents.make_eligible("nope") == LostRace("nope", "not_found")


def test_claim_delivery_needs_an_eligible_pending_intent(store: Store) -> None:
    store.turn_intents.ensure(intent("i-1"))
    assert store.turn_intents.claim_delivery("i-1") == LostRace("i-1", "not_eligible", "pending")
    assert store.turn_intents.claim_delivery("nope") == LostRace("nope", "not_found")
    store.turn_intents.make_eligible("i-1")
    claimed = _ok(store.turn_intents.claim_delivery("i-1"))
    assert claimed.delivery_claim_token


def test_a_live_delivery_claim_excludes_others_until_it_expires(
    store: Store, clock: FakeClock
) -> None:
    first = _claimed(store, lease=30)
    assert first.delivery_claim_expires_at == int(clock.now() * 1000) + 30_000
    assert store.turn_intents.claim_delivery("i-1") == LostRace(
        "i-1", "delivery_claimed", "eligible"
    )
    clock.advance(30)
    second = _ok(store.turn_intents.claim_delivery("i-1"))
    assert second.delivery_claim_token != first.delivery_claim_token
    # The first deliverer's token no longer resolves or releases anything.
    assert store.turn_intents.resolve(
        "i-1", first.delivery_claim_token or "", resolution="fallback", message_id="m"
    ) == LostRace("i-1", "token_mismatch", "eligible")
    assert store.turn_intents.release_delivery("i-1", first.delivery_claim_token or "") == (
        LostRace("i-1", "token_mismatch", "eligible")
    )
    assert store.turn_intents.get("i-1") == second


def test_release_gives_the_claim_back(store: Store) -> None:
    claimed = _claimed(store)
    released = _ok(store.turn_intents.release_delivery("i-1", claimed.delivery_claim_token or ""))
    assert released.delivery_claim_token is None
    assert released.eligible
    _ok(store.turn_intents.claim_delivery("i-1"))


def test_resolve_needs_the_claim_token_and_happens_once(store: Store, clock: FakeClock) -> None:
    claimed = _claimed(store)
    token = claimed.delivery_claim_token or ""
    assert store.turn_intents.resolve(
        "i-1", "forged", resolution="fallback", message_id="m-1"
    ) == LostRace("i-1", "token_mismatch", "eligible")
    clock.advance(2)
    resolved = _ok(
        store.turn_intents.resolve(
            "i-1", token, resolution="workflow_prompt", message_id="turn-message:abc"
        )
    )
    assert resolved.resolved_at == int(clock.now() * 1000)
    assert (resolved.resolution, resolved.resolution_message_id) == (
        "workflow_prompt",
        "turn-message:abc",
    )
    assert not resolved.pending
    assert resolved.delivery_claim_token is None
    again = store.turn_intents.resolve("i-1", token, resolution="fallback", message_id="m-2")
    assert again == LostRace("i-1", "wrong_status", "resolved")
    assert store.turn_intents.claim_delivery("i-1") == LostRace("i-1", "wrong_status", "resolved")
    assert store.turn_intents.make_eligible("i-1") == LostRace("i-1", "wrong_status", "resolved")
    assert store.turn_intents.list_eligible("session-a") == []
    assert store.turn_intents.list_pending("run-1") == []


def test_resolve_refuses_an_unknown_resolution(store: Store) -> None:
    claimed = _claimed(store)
    with pytest.raises(ValueError, match="resolution"):
        store.turn_intents.resolve(
            "i-1", claimed.delivery_claim_token or "", resolution="sent", message_id="m"
        )  # type: ignore[arg-type]
    assert store.turn_intents.get("i-1") == claimed
