"""`workflow_notifications` on SQLite: the passive progress/final report outbox.

A notification is unique by (run_id, node_id, notification_index): a crash
retry of a `notify` node reuses its index, so inserting it again returns the
stored row instead of a duplicate. Delivery takes a claim token with a lease;
marking it delivered needs that token.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable

from runner.store.errors import IdentityConflict
from runner.store.records import (
    PAYLOAD_MAX_BYTES,
    LostRace,
    NewNotification,
    Notification,
    check_id,
    lease_ms,
    new_claim_token,
)
from runner.store.sqlite.db import SqliteDatabase
from runner.store.states import NOTIFICATION_KINDS

_FIELDS = (
    "notification_id",
    "run_id",
    "node_id",
    "attempt_id",
    "notification_index",
    "target_session_id",
    "kind",
    "content",
)


def notification_from_row(row: sqlite3.Row) -> Notification:
    return Notification(
        notification_id=row["notification_id"],
        run_id=row["run_id"],
        node_id=row["node_id"],
        attempt_id=row["attempt_id"],
        notification_index=row["notification_index"],
        target_session_id=row["target_session_id"],
        kind=row["kind"],
        content=row["content"],
        created_at=row["created_at"],
        delivery_claim_token=row["delivery_claim_token"],
        delivery_claim_expires_at=row["delivery_claim_expires_at"],
        delivered_at=row["delivered_at"],
    )


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


class SqliteNotifications:
    """`Notifications` on SQLite."""

    def __init__(self, db: SqliteDatabase, now_ms: Callable[[], int]) -> None:
        self._db = db
        self._now_ms = now_ms

    def insert(self, notification: NewNotification) -> Notification:
        _validate(notification)
        wanted = {name: getattr(notification, name) for name in _FIELDS}
        with self._db.write() as conn:
            conn.execute(
                "INSERT INTO workflow_notifications (notification_id, run_id, node_id, attempt_id,"
                " notification_index, target_session_id, kind, content, created_at)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
                (*(wanted[name] for name in _FIELDS), self._now_ms()),
            )
            row = conn.execute(
                "SELECT * FROM workflow_notifications"
                " WHERE run_id = ? AND node_id = ? AND notification_index = ?",
                (notification.run_id, notification.node_id, notification.notification_index),
            ).fetchone()
        if row is None:
            raise IdentityConflict(
                f"notification id {notification.notification_id} is already used by another"
                " (run, node, index)"
            )
        differing = [name for name in _FIELDS if row[name] != wanted[name]]
        if differing:
            raise IdentityConflict(
                f"notification {notification.run_id}/{notification.node_id}"
                f"#{notification.notification_index} exists with a different "
                + ", ".join(differing)
            )
        return notification_from_row(row)

    def get(self, notification_id: str) -> Notification | None:
        rows = self._db.read(
            "SELECT * FROM workflow_notifications WHERE notification_id = ?", (notification_id,)
        )
        return notification_from_row(rows[0]) if rows else None

    @staticmethod
    def _load(conn: sqlite3.Connection, notification_id: str) -> sqlite3.Row | None:
        row: sqlite3.Row | None = conn.execute(
            "SELECT * FROM workflow_notifications WHERE notification_id = ?", (notification_id,)
        ).fetchone()
        return row

    def claim_delivery(
        self, notification_id: str, *, lease_seconds: float = 30.0
    ) -> Notification | LostRace:
        lease = lease_ms(lease_seconds)
        with self._db.write() as conn:
            now = self._now_ms()
            row = self._load(conn, notification_id)
            if row is None:
                return LostRace(notification_id, "not_found")
            if row["delivered_at"] is not None:
                return LostRace(notification_id, "wrong_status", "delivered")
            expires = row["delivery_claim_expires_at"]
            if expires is not None and expires > now:
                return LostRace(notification_id, "delivery_claimed", "pending")
            updated = conn.execute(
                "UPDATE workflow_notifications SET delivery_claim_token = ?,"
                " delivery_claim_expires_at = ? WHERE notification_id = ?"
                " AND delivered_at IS NULL AND delivery_claim_token IS ? RETURNING *",
                (new_claim_token(), now + lease, notification_id, row["delivery_claim_token"]),
            ).fetchone()
        return notification_from_row(updated)

    def mark_delivered(self, notification_id: str, claim_token: str) -> Notification | LostRace:
        with self._db.write() as conn:
            row = self._load(conn, notification_id)
            if row is None:
                return LostRace(notification_id, "not_found")
            if row["delivered_at"] is not None:
                return LostRace(notification_id, "wrong_status", "delivered")
            if row["delivery_claim_token"] != claim_token:
                return LostRace(notification_id, "token_mismatch", "pending")
            updated = conn.execute(
                "UPDATE workflow_notifications SET delivered_at = ?, delivery_claim_token = NULL,"
                " delivery_claim_expires_at = NULL WHERE notification_id = ?"
                " AND delivered_at IS NULL AND delivery_claim_token = ? RETURNING *",
                (self._now_ms(), notification_id, claim_token),
            ).fetchone()
        return notification_from_row(updated)

    def list_pending(self, session_id: str) -> list[Notification]:
        rows = self._db.read(
            "SELECT * FROM workflow_notifications WHERE target_session_id = ?"
            " AND delivered_at IS NULL"
            " ORDER BY created_at, run_id, node_id, notification_index",
            (session_id,),
        )
        return [notification_from_row(row) for row in rows]
