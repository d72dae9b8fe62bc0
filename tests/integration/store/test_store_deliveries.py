"""`notification_deliveries`, the channel outbox, on every backend: one row per
(notification, channel), due rows claimed with a lease, delivered rows never due
again, retries scheduled, give-ups final, lost claims refused."""

from __future__ import annotations

import pytest
from storekit import Backend

from runner.clock import FakeClock


def _add(store: object, notification_id: str, channel: str = "ops") -> bool:
    added: bool = store.deliveries.enqueue(  # type: ignore[attr-defined]
        notification_id=notification_id, channel=channel, run_id="run-1", node_id="hello",
        kind="progress", message=f"message {notification_id}")
    return added


def test_one_row_per_notification_and_channel(backend: Backend, clock: FakeClock) -> None:
    store = backend.open(clock)
    try:
        assert _add(store, "run-1:hello:1") is True
        assert _add(store, "run-1:hello:1") is False  # the node run again: nothing new
        assert _add(store, "run-1:hello:1", "team") is True
        assert _add(store, "run-1:hello:2") is True  # the node's next visit
        rows = store.deliveries.of_run("run-1")
        assert sorted((r.notification_id, r.channel) for r in rows) == [
            ("run-1:hello:1", "ops"), ("run-1:hello:1", "team"), ("run-1:hello:2", "ops")]
        assert {r.status for r in rows} == {"pending"}
    finally:
        store.close()


def test_claims_lease_retry_deliver_and_give_up(backend: Backend, clock: FakeClock) -> None:
    store = backend.open(clock)
    try:
        for i in range(3):
            _add(store, f"n{i}")
            clock.advance(1)
        claimed = store.deliveries.claim_due(limit=2, lease_seconds=30)
        assert [d.notification_id for d in claimed] == ["n0", "n1"]  # oldest first
        assert all(d.attempts == 1 and d.claim_token for d in claimed)
        (third,) = store.deliveries.claim_due(limit=10, lease_seconds=30)  # held: skipped
        assert third.notification_id == "n2"
        assert store.deliveries.claim_due() == []
        first, second = claimed
        assert store.deliveries.mark_delivered(first) is True
        assert store.deliveries.mark_delivered(first) is False  # once only
        now_ms = store.now_ms()
        assert store.deliveries.retry_at(second, now_ms + 10_000, "cannot connect") is True
        assert store.deliveries.give_up(third, "HTTP 404") is True
        clock.advance(5)
        assert store.deliveries.claim_due() == []  # the retry is not due yet
        clock.advance(6)
        (again,) = store.deliveries.claim_due()
        assert (again.notification_id, again.attempts, again.last_error) == \
            ("n1", 2, "cannot connect")
        assert store.deliveries.retry_at(second, now_ms, "stale claim") is False  # lost
        by_id = {d.notification_id: d for d in store.deliveries.recent()}
        assert by_id["n0"].status == "delivered"
        assert by_id["n0"].delivered_at is not None
        assert by_id["n2"].status == "failed"
        assert by_id["n2"].last_error == "HTTP 404"
    finally:
        store.close()


def test_an_expired_claim_is_due_again(backend: Backend, clock: FakeClock) -> None:
    store = backend.open(clock)
    try:
        _add(store, "n0")
        (held,) = store.deliveries.claim_due(lease_seconds=30)
        clock.advance(31)  # its deliverer died mid-post
        (again,) = store.deliveries.claim_due(lease_seconds=30)
        assert again.attempts == 2
        assert store.deliveries.mark_delivered(held) is False  # the old claim lost it
        assert store.deliveries.mark_delivered(again) is True
    finally:
        store.close()


@pytest.mark.parametrize(("change", "message"), [
    ({"kind": "shout"}, "unknown notification kind"),
    ({"channel": ""}, "channel must be"),
    ({"message": "x" * (64 * 1024 + 1)}, "the limit is"),
])
def test_a_bad_row_is_refused(backend: Backend, clock: FakeClock, change: dict[str, str],
                              message: str) -> None:
    store = backend.open(clock)
    try:
        row = {"notification_id": "n", "channel": "ops", "run_id": "r", "node_id": "x",
               "kind": "progress", "message": "m", **change}
        with pytest.raises(ValueError, match=message):
            store.deliveries.enqueue(**row)
        assert store.deliveries.recent() == []
    finally:
        store.close()
