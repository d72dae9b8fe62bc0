"""`workflow_notifications`, the passive progress/final report outbox, written once.

A notification is unique by (run_id, node_id, notification_index): a crash retry of
a `notify` node reuses its index, so inserting it again returns the stored row
instead of a duplicate. Delivery takes a claim token with a lease; marking it
delivered needs that token. Rows are locked (`dialect.lock`) before a guarded change.
"""

from __future__ import annotations

from collections.abc import Mapping

from runner._leases import LEASE_SECONDS
from runner.store._connector import Connector, Row, Transaction, named
from runner.store._errors import IdentityConflict
from runner.store._records import (
    PAYLOAD_MAX_BYTES,
    LostRace,
    NewNotification,
    Notification,
    check_id,
    lease_ms,
    new_claim_token,
)
from runner.store._states import NOTIFICATION_KINDS

FIELDS = ("notification_id", "run_id", "node_id", "attempt_id", "notification_index",
          "target_session_id", "kind", "content")

SQL: Mapping[str, str] = {
    "insert": "INSERT INTO workflow_notifications (notification_id, run_id, node_id,"
    " attempt_id, notification_index, target_session_id, kind, content, created_at)"
    " VALUES (:notification_id, :run_id, :node_id, :attempt_id, :notification_index,"
    " :target_session_id, :kind, :content, :now) ON CONFLICT DO NOTHING",
    "by_index": "SELECT * FROM workflow_notifications WHERE run_id = :run_id"
    " AND node_id = :node_id AND notification_index = :notification_index",
    "load": "SELECT * FROM workflow_notifications WHERE notification_id = :notification_id",
    "claim": "UPDATE workflow_notifications SET delivery_claim_token = :token,"
    " delivery_claim_expires_at = :expires WHERE notification_id = :notification_id"
    " AND delivered_at IS NULL AND delivery_claim_token {same} :old RETURNING *",
    "delivered": "UPDATE workflow_notifications SET delivered_at = :now,"
    " delivery_claim_token = NULL, delivery_claim_expires_at = NULL"
    " WHERE notification_id = :notification_id AND delivered_at IS NULL"
    " AND delivery_claim_token = :token RETURNING *",
    "list_pending": "SELECT * FROM workflow_notifications WHERE target_session_id = :session"
    " AND delivered_at IS NULL ORDER BY created_at, run_id, node_id, notification_index",
}


def notification_from_row(row: Row) -> Notification:
    return Notification(**{name: row[name] for name in (
        *FIELDS, "created_at", "delivery_claim_token", "delivery_claim_expires_at",
        "delivered_at")})


def _validate(notification: NewNotification) -> None:
    for name in ("notification_id", "run_id", "node_id", "attempt_id", "target_session_id"):
        check_id(getattr(notification, name), name)
    index = notification.notification_index
    if isinstance(index, bool) or not isinstance(index, int) or index < 1:
        raise ValueError(f"notification_index must be a positive integer, got {index!r}")
    if notification.kind not in NOTIFICATION_KINDS:
        raise ValueError(f"unknown notification kind {notification.kind!r}")
    if not isinstance(notification.content, str):
        raise ValueError("notification content must be text")
    size = len(notification.content.encode("utf-8"))
    if size > PAYLOAD_MAX_BYTES:
        raise ValueError(f"notification content is {size} bytes; the limit is {PAYLOAD_MAX_BYTES}")


class Notifications:
    """`Notifications` over a connector."""

    def __init__(self, connector: Connector, overrides: Mapping[str, str] | None = None) -> None:
        self._connector = connector
        self._sql = named(SQL, overrides)

    def insert(self, notification: NewNotification) -> Notification:
        _validate(notification)
        wanted = {name: getattr(notification, name) for name in FIELDS}
        with self._connector.write() as tx:
            tx.run(self._sql["insert"], {**wanted, "now": tx.now_ms()})
            row = tx.one(self._sql["by_index"], wanted)
        if row is None:
            raise IdentityConflict(
                f"notification id {notification.notification_id} is already used by another"
                " (run, node, index)")
        differing = [name for name in FIELDS if row[name] != wanted[name]]
        if differing:
            raise IdentityConflict(
                f"notification {notification.run_id}/{notification.node_id}"
                f"#{notification.notification_index} exists with a different "
                + ", ".join(differing))
        return notification_from_row(row)

    def get(self, notification_id: str) -> Notification | None:
        with self._connector.read() as tx:
            row = tx.one(self._sql["load"], {"notification_id": notification_id})
        return notification_from_row(row) if row else None

    def _load(self, tx: Transaction, notification_id: str) -> Row | None:
        return tx.one(self._sql["load"] + tx.dialect.lock, {"notification_id": notification_id})

    def claim_delivery(self, notification_id: str, *,
                       lease_seconds: float = LEASE_SECONDS) -> Notification | LostRace:
        lease = lease_ms(lease_seconds)
        with self._connector.write() as tx:
            now = tx.now_ms()
            row = self._load(tx, notification_id)
            if row is None:
                return LostRace(notification_id, "not_found")
            if row["delivered_at"] is not None:
                return LostRace(notification_id, "wrong_status", "delivered")
            expires = row["delivery_claim_expires_at"]
            if expires is not None and expires > now:
                return LostRace(notification_id, "delivery_claimed", "pending")
            updated = tx.one(self._sql["claim"].format(same=tx.dialect.same), {
                "token": new_claim_token(), "expires": now + lease,
                "notification_id": notification_id, "old": row["delivery_claim_token"]})
        assert updated is not None
        return notification_from_row(updated)

    def mark_delivered(self, notification_id: str, claim_token: str) -> Notification | LostRace:
        with self._connector.write() as tx:
            row = self._load(tx, notification_id)
            if row is None:
                return LostRace(notification_id, "not_found")
            if row["delivered_at"] is not None:
                return LostRace(notification_id, "wrong_status", "delivered")
            if row["delivery_claim_token"] != claim_token:
                return LostRace(notification_id, "token_mismatch", "pending")
            updated = tx.one(self._sql["delivered"], {
                "now": tx.now_ms(), "notification_id": notification_id, "token": claim_token})
        assert updated is not None
        return notification_from_row(updated)

    def list_pending(self, session_id: str) -> list[Notification]:
        with self._connector.read() as tx:
            rows = tx.all(self._sql["list_pending"], {"session": session_id})
        return [notification_from_row(row) for row in rows]
