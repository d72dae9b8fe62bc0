"""Conformance: the notification outbox and the run event feed."""

from __future__ import annotations

import pytest
from storekit import FakeClock, notification

from runner.store import IdentityConflict, LostRace, Store
from runner.store._records import Notification


def _ok(result: object) -> Notification:
    assert isinstance(result, Notification), result
    return result


# --- notifications -------------------------------------------------------------------


def test_insert_is_unique_by_run_node_and_index(store: Store, clock: FakeClock) -> None:
    first = store.notifications.insert(notification("n-1"))
    assert first.created_at == int(clock.now() * 1000)
    assert not first.delivered
    clock.advance(3)
    assert store.notifications.insert(notification("n-1")) == first  # crash retry
    with pytest.raises(IdentityConflict, match="content"):
        store.notifications.insert(notification("n-1", content="other text"))
    with pytest.raises(IdentityConflict, match="notification_id"):
        store.notifications.insert(notification("n-other"))  # same (run, node, index)
    with pytest.raises(IdentityConflict, match="already used"):
        store.notifications.insert(notification("n-1", index=2))  # id reused elsewhere
    assert [n.notification_id for n in store.notifications.list_pending("session-a")] == ["n-1"]


@pytest.mark.parametrize(
    "bad",
    [{"index": 0}, {"kind": "launch_failure"}, {"content": "x" * 70_000}, {"run_id": ""}],
)
def test_insert_refuses_invalid_notifications(store: Store, bad: dict[str, object]) -> None:
    with pytest.raises(ValueError, match=r"."):
        store.notifications.insert(notification("n-1", **bad))  # type: ignore[arg-type]
    assert store.notifications.get("n-1") is None


def test_pending_lists_per_session_oldest_first(store: Store, clock: FakeClock) -> None:
    store.notifications.insert(notification("n-2", index=2))
    clock.advance(1)
    store.notifications.insert(notification("n-1", index=1, node_id="later"))
    store.notifications.insert(notification("n-b", target_session_id="session-b", kind="final"))
    assert [n.notification_id for n in store.notifications.list_pending("session-a")] == [
        "n-2",
        "n-1",
    ]
    assert [n.kind for n in store.notifications.list_pending("session-b")] == ["final"]


def test_delivery_claim_then_mark_delivered(store: Store, clock: FakeClock) -> None:
    store.notifications.insert(notification("n-1"))
    claimed = _ok(store.notifications.claim_delivery("n-1", lease_seconds=10))
    assert claimed.delivery_claim_expires_at == int(clock.now() * 1000) + 10_000
    assert store.notifications.claim_delivery("n-1") == LostRace(
        "n-1", "delivery_claimed", "pending"
    )
    assert store.notifications.mark_delivered("n-1", "forged") == LostRace(
        "n-1", "token_mismatch", "pending"
    )
    delivered = _ok(store.notifications.mark_delivered("n-1", claimed.delivery_claim_token or ""))
    assert delivered.delivered_at == int(clock.now() * 1000)
    assert delivered.delivery_claim_token is None
    assert store.notifications.list_pending("session-a") == []
    assert store.notifications.mark_delivered("n-1", claimed.delivery_claim_token or "") == (
        LostRace("n-1", "wrong_status", "delivered")
    )
    assert store.notifications.claim_delivery("n-1") == LostRace("n-1", "wrong_status", "delivered")
    assert store.notifications.claim_delivery("nope") == LostRace("nope", "not_found")
    assert store.notifications.mark_delivered("nope", "t") == LostRace("nope", "not_found")


def test_an_expired_delivery_claim_can_be_taken_over(store: Store, clock: FakeClock) -> None:
    store.notifications.insert(notification("n-1"))
    first = _ok(store.notifications.claim_delivery("n-1", lease_seconds=10))
    clock.advance(10)
    second = _ok(store.notifications.claim_delivery("n-1", lease_seconds=10))
    assert second.delivery_claim_token != first.delivery_claim_token
    assert store.notifications.mark_delivered("n-1", first.delivery_claim_token or "") == (
        LostRace("n-1", "token_mismatch", "pending")
    )
    _ok(store.notifications.mark_delivered("n-1", second.delivery_claim_token or ""))


# --- run events ---------------------------------------------------------------------


def test_run_events_append_in_order_and_page(store: Store, clock: FakeClock) -> None:
    first = store.run_events.append(
        "run-1", "custom.started", {"b": 1, "a": [1]}, workflow_ref="review", runner_id="host-1"
    )
    assert first.recorded_at == int(clock.now() * 1000)
    assert (first.run_id, first.type, first.workflow_ref, first.runner_id) == (
        "run-1",
        "custom.started",
        "review",
        "host-1",
    )
    assert first.payload == {"a": [1], "b": 1}
    second = store.run_events.append("run-2", "custom.other")
    third = store.run_events.append("run-1", "custom.ended", {"ok": True})
    assert first.seq < second.seq < third.seq
    assert second.payload == {}
    assert [e.seq for e in store.run_events.read()] == [first.seq, second.seq, third.seq]
    assert [e.type for e in store.run_events.read(run_id="run-1")] == [
        "custom.started",
        "custom.ended",
    ]
    assert store.run_events.read(after_seq=first.seq, limit=1) == [second]
    assert store.run_events.read(run_id="run-1", after_seq=third.seq) == []


@pytest.mark.parametrize("payload", [[1, 2], {"x": float("nan")}, {"big": "x" * 70_000}])
def test_run_events_refuse_invalid_payloads(store: Store, payload: object) -> None:
    with pytest.raises(ValueError, match=r"."):
        store.run_events.append("run-1", "custom", payload)
    assert store.run_events.read() == []
