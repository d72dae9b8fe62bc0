"""Turn intents, the notification outbox and the run event feed on Postgres.

The same rules as the SQLite modules: intents are insert-or-ignore then an
identity comparison (one pending per (run, session) by a partial unique index);
notifications are unique by (run, node, index); delivery takes a claim token with
a lease. Rows are locked (`FOR UPDATE`) before a guarded change.
"""

from __future__ import annotations

import json

from psycopg import errors as pg_errors

from runner.store.errors import IdentityConflict
from runner.store.postgres.db import Conn, PostgresDatabase, Row
from runner.store.records import (
    PAYLOAD_MAX_BYTES,
    LostRace,
    NewNotification,
    NewTurnIntent,
    Notification,
    RunEvent,
    TurnIntent,
    check_id,
    json_object,
    lease_ms,
    new_claim_token,
)
from runner.store.states import NOTIFICATION_KINDS, TURN_CAUSES, TURN_RESOLUTIONS, TurnResolution

# --- run events -----------------------------------------------------------------


def append_event(conn: Conn, *, now_ms: int, run_id: str, event_type: str, payload: object,
                 workflow_ref: str | None = None, runner_id: str | None = None) -> Row:
    """Append inside the caller's transaction; returns the new row."""
    if not event_type:
        raise ValueError("a run event needs a type")
    body = json_object({} if payload is None else payload, what="event payload",
                       max_bytes=PAYLOAD_MAX_BYTES)
    row = conn.execute(
        "INSERT INTO run_events (recorded_at, run_id, workflow_ref, type, runner_id,"
        " payload_json) VALUES (%s, %s, %s, %s, %s, %s) RETURNING *",
        (now_ms, run_id, workflow_ref, event_type, runner_id, body)).fetchone()
    assert row is not None
    return row


def event_from_row(row: Row) -> RunEvent:
    return RunEvent(seq=row["seq"], recorded_at=row["recorded_at"], run_id=row["run_id"],
                    workflow_ref=row["workflow_ref"], type=row["type"],
                    runner_id=row["runner_id"], payload=json.loads(row["payload_json"]))


class PostgresRunEvents:
    """`RunEvents` on Postgres."""

    def __init__(self, db: PostgresDatabase) -> None:
        self._db = db

    def append(self, run_id: str, event_type: str, payload: object = None, *,
               workflow_ref: str | None = None, runner_id: str | None = None) -> RunEvent:
        with self._db.write() as conn:
            row = append_event(conn, now_ms=self._db.now_ms(conn), run_id=run_id,
                               event_type=event_type, payload=payload,
                               workflow_ref=workflow_ref, runner_id=runner_id)
        return event_from_row(row)

    def read(self, *, run_id: str | None = None, after_seq: int = 0,
             limit: int = 1000) -> list[RunEvent]:
        if run_id is None:
            rows = self._db.read(
                "SELECT * FROM run_events WHERE seq > %s ORDER BY seq LIMIT %s",
                (after_seq, limit))
        else:
            rows = self._db.read(
                "SELECT * FROM run_events WHERE run_id = %s AND seq > %s ORDER BY seq LIMIT %s",
                (run_id, after_seq, limit))
        return [event_from_row(row) for row in rows]


# --- turn intents ---------------------------------------------------------------

_IDENTITY = ("source_event_id", "run_id", "workflow_ref", "target_session_id", "cause",
             "node_id", "attempt_id", "fallback_facts_json")


def intent_from_row(row: Row) -> TurnIntent:
    return TurnIntent(
        intent_id=row["intent_id"], source_event_id=row["source_event_id"],
        run_id=row["run_id"], workflow_ref=row["workflow_ref"],
        target_session_id=row["target_session_id"], cause=row["cause"],
        node_id=row["node_id"], attempt_id=row["attempt_id"],
        fallback_facts=json.loads(row["fallback_facts_json"]),
        requested_at=row["requested_at"], eligible_at=row["eligible_at"],
        resolved_at=row["resolved_at"], resolution=row["resolution"],
        resolution_message_id=row["resolution_message_id"],
        delivery_claim_token=row["delivery_claim_token"],
        delivery_claim_expires_at=row["delivery_claim_expires_at"])


def _intent_state(row: Row) -> str:
    if row["resolved_at"] is not None:
        return "resolved"
    return "eligible" if row["eligible_at"] is not None else "pending"


def _load_intent(conn: Conn, intent_id: str) -> Row | None:
    return conn.execute(
        "SELECT * FROM workflow_turn_intents WHERE intent_id = %s FOR UPDATE", (intent_id,)
    ).fetchone()


def ensure_intent(conn: Conn, intent: NewTurnIntent, now_ms: int) -> TurnIntent | LostRace:
    """Insert-or-ignore then compare identity, inside the caller's transaction."""
    for name in ("intent_id", "source_event_id", "run_id", "workflow_ref", "target_session_id"):
        check_id(getattr(intent, name), name)
    if intent.cause not in TURN_CAUSES:
        raise ValueError(f"unknown turn cause {intent.cause!r}; use one of {TURN_CAUSES}")
    facts = json_object(intent.fallback_facts, what="fallback facts", max_bytes=PAYLOAD_MAX_BYTES)
    wanted = {"source_event_id": intent.source_event_id, "run_id": intent.run_id,
              "workflow_ref": intent.workflow_ref, "target_session_id": intent.target_session_id,
              "cause": intent.cause, "node_id": intent.node_id, "attempt_id": intent.attempt_id,
              "fallback_facts_json": facts}
    existing = _load_intent(conn, intent.intent_id)
    if existing is None:
        holder = conn.execute(
            "SELECT intent_id FROM workflow_turn_intents"
            " WHERE run_id = %s AND target_session_id = %s AND resolved_at IS NULL",
            (intent.run_id, intent.target_session_id)).fetchone()
        if holder is not None:
            return LostRace(intent.intent_id, "intent_pending", None, holder["intent_id"])
        try:
            with conn.transaction():  # a savepoint: a racing pending intent loses cleanly
                conn.execute(
                    "INSERT INTO workflow_turn_intents (intent_id, source_event_id, run_id,"
                    " workflow_ref, target_session_id, cause, node_id, attempt_id,"
                    " fallback_facts_json, requested_at, eligible_at) VALUES"
                    " (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)"
                    " ON CONFLICT (intent_id) DO NOTHING",
                    (intent.intent_id, *(wanted[name] for name in _IDENTITY), now_ms,
                     now_ms if intent.eligible else None))
        except pg_errors.UniqueViolation:
            return LostRace(intent.intent_id, "intent_pending")
        existing = _load_intent(conn, intent.intent_id)
        assert existing is not None
    differing = [name for name in _IDENTITY if existing[name] != wanted[name]]
    if differing:
        raise IdentityConflict(
            f"turn intent {intent.intent_id} exists with a different " + ", ".join(differing))
    return intent_from_row(existing)


def make_intent_eligible(conn: Conn, intent_id: str, now_ms: int) -> TurnIntent | LostRace:
    row = _load_intent(conn, intent_id)
    if row is None:
        return LostRace(intent_id, "not_found")
    if row["resolved_at"] is not None:
        return LostRace(intent_id, "wrong_status", "resolved")
    if row["eligible_at"] is not None:
        return intent_from_row(row)
    updated = conn.execute(
        "UPDATE workflow_turn_intents SET eligible_at = %s WHERE intent_id = %s"
        " AND resolved_at IS NULL AND eligible_at IS NULL RETURNING *",
        (now_ms, intent_id)).fetchone()
    assert updated is not None
    return intent_from_row(updated)


class PostgresTurnIntents:
    """`TurnIntents` on Postgres."""

    def __init__(self, db: PostgresDatabase) -> None:
        self._db = db

    def ensure(self, intent: NewTurnIntent) -> TurnIntent | LostRace:
        with self._db.write() as conn:
            return ensure_intent(conn, intent, self._db.now_ms(conn))

    def get(self, intent_id: str) -> TurnIntent | None:
        rows = self._db.read("SELECT * FROM workflow_turn_intents WHERE intent_id = %s",
                             (intent_id,))
        return intent_from_row(rows[0]) if rows else None

    def make_eligible(self, intent_id: str) -> TurnIntent | LostRace:
        with self._db.write() as conn:
            return make_intent_eligible(conn, intent_id, self._db.now_ms(conn))

    def claim_delivery(self, intent_id: str, *,
                       lease_seconds: float = 30.0) -> TurnIntent | LostRace:
        lease = lease_ms(lease_seconds)
        with self._db.write() as conn:
            now = self._db.now_ms(conn)
            row = _load_intent(conn, intent_id)
            if row is None:
                return LostRace(intent_id, "not_found")
            if row["resolved_at"] is not None:
                return LostRace(intent_id, "wrong_status", "resolved")
            if row["eligible_at"] is None:
                return LostRace(intent_id, "not_eligible", "pending")
            expires = row["delivery_claim_expires_at"]
            if expires is not None and expires > now:
                return LostRace(intent_id, "delivery_claimed", "eligible")
            updated = conn.execute(
                "UPDATE workflow_turn_intents SET delivery_claim_token = %s,"
                " delivery_claim_expires_at = %s WHERE intent_id = %s AND resolved_at IS NULL"
                " AND eligible_at IS NOT NULL"
                " AND delivery_claim_token IS NOT DISTINCT FROM %s RETURNING *",
                (new_claim_token(), now + lease, intent_id,
                 row["delivery_claim_token"])).fetchone()
        assert updated is not None
        return intent_from_row(updated)

    @staticmethod
    def _with_token(conn: Conn, intent_id: str, claim_token: str) -> Row | LostRace:
        row = _load_intent(conn, intent_id)
        if row is None:
            return LostRace(intent_id, "not_found")
        if row["resolved_at"] is not None:
            return LostRace(intent_id, "wrong_status", "resolved")
        if row["delivery_claim_token"] != claim_token:
            return LostRace(intent_id, "token_mismatch", _intent_state(row))
        return row

    def release_delivery(self, intent_id: str, claim_token: str) -> TurnIntent | LostRace:
        with self._db.write() as conn:
            row = self._with_token(conn, intent_id, claim_token)
            if isinstance(row, LostRace):
                return row
            updated = conn.execute(
                "UPDATE workflow_turn_intents SET delivery_claim_token = NULL,"
                " delivery_claim_expires_at = NULL WHERE intent_id = %s"
                " AND delivery_claim_token = %s AND resolved_at IS NULL RETURNING *",
                (intent_id, claim_token)).fetchone()
        assert updated is not None
        return intent_from_row(updated)

    def resolve(self, intent_id: str, claim_token: str, *, resolution: TurnResolution,
                message_id: str) -> TurnIntent | LostRace:
        if resolution not in TURN_RESOLUTIONS:
            raise ValueError(f"unknown resolution {resolution!r}; use one of {TURN_RESOLUTIONS}")
        check_id(message_id, "message_id")
        with self._db.write() as conn:
            row = self._with_token(conn, intent_id, claim_token)
            if isinstance(row, LostRace):
                return row
            updated = conn.execute(
                "UPDATE workflow_turn_intents SET resolved_at = %s, resolution = %s,"
                " resolution_message_id = %s, delivery_claim_token = NULL,"
                " delivery_claim_expires_at = NULL WHERE intent_id = %s"
                " AND delivery_claim_token = %s AND resolved_at IS NULL RETURNING *",
                (self._db.now_ms(conn), resolution, message_id, intent_id,
                 claim_token)).fetchone()
        assert updated is not None
        return intent_from_row(updated)

    def list_eligible(self, session_id: str) -> list[TurnIntent]:
        rows = self._db.read(
            "SELECT * FROM workflow_turn_intents WHERE target_session_id = %s"
            " AND resolved_at IS NULL AND eligible_at IS NOT NULL"
            " ORDER BY eligible_at, intent_id", (session_id,))
        return [intent_from_row(row) for row in rows]

    def list_pending(self, run_id: str) -> list[TurnIntent]:
        rows = self._db.read(
            "SELECT * FROM workflow_turn_intents WHERE run_id = %s AND resolved_at IS NULL"
            " ORDER BY requested_at, intent_id", (run_id,))
        return [intent_from_row(row) for row in rows]


# --- notifications --------------------------------------------------------------

_FIELDS = ("notification_id", "run_id", "node_id", "attempt_id", "notification_index",
           "target_session_id", "kind", "content")


def notification_from_row(row: Row) -> Notification:
    return Notification(**{name: row[name] for name in (
        *_FIELDS, "created_at", "delivery_claim_token", "delivery_claim_expires_at",
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


class PostgresNotifications:
    """`Notifications` on Postgres."""

    def __init__(self, db: PostgresDatabase) -> None:
        self._db = db

    def insert(self, notification: NewNotification) -> Notification:
        _validate(notification)
        wanted = {name: getattr(notification, name) for name in _FIELDS}
        with self._db.write() as conn:
            conn.execute(
                "INSERT INTO workflow_notifications (notification_id, run_id, node_id,"
                " attempt_id, notification_index, target_session_id, kind, content, created_at)"
                " VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s) ON CONFLICT DO NOTHING",
                (*(wanted[name] for name in _FIELDS), self._db.now_ms(conn)))
            row = conn.execute(
                "SELECT * FROM workflow_notifications"
                " WHERE run_id = %s AND node_id = %s AND notification_index = %s",
                (notification.run_id, notification.node_id,
                 notification.notification_index)).fetchone()
        if row is None:
            raise IdentityConflict(
                f"notification id {notification.notification_id} is already used by another"
                " (run, node, index)")
        differing = [name for name in _FIELDS if row[name] != wanted[name]]
        if differing:
            raise IdentityConflict(
                f"notification {notification.run_id}/{notification.node_id}"
                f"#{notification.notification_index} exists with a different "
                + ", ".join(differing))
        return notification_from_row(row)

    def get(self, notification_id: str) -> Notification | None:
        rows = self._db.read("SELECT * FROM workflow_notifications WHERE notification_id = %s",
                             (notification_id,))
        return notification_from_row(rows[0]) if rows else None

    @staticmethod
    def _load(conn: Conn, notification_id: str) -> Row | None:
        return conn.execute(
            "SELECT * FROM workflow_notifications WHERE notification_id = %s FOR UPDATE",
            (notification_id,)).fetchone()

    def claim_delivery(self, notification_id: str, *,
                       lease_seconds: float = 30.0) -> Notification | LostRace:
        lease = lease_ms(lease_seconds)
        with self._db.write() as conn:
            now = self._db.now_ms(conn)
            row = self._load(conn, notification_id)
            if row is None:
                return LostRace(notification_id, "not_found")
            if row["delivered_at"] is not None:
                return LostRace(notification_id, "wrong_status", "delivered")
            expires = row["delivery_claim_expires_at"]
            if expires is not None and expires > now:
                return LostRace(notification_id, "delivery_claimed", "pending")
            updated = conn.execute(
                "UPDATE workflow_notifications SET delivery_claim_token = %s,"
                " delivery_claim_expires_at = %s WHERE notification_id = %s"
                " AND delivered_at IS NULL"
                " AND delivery_claim_token IS NOT DISTINCT FROM %s RETURNING *",
                (new_claim_token(), now + lease, notification_id,
                 row["delivery_claim_token"])).fetchone()
        assert updated is not None
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
                "UPDATE workflow_notifications SET delivered_at = %s,"
                " delivery_claim_token = NULL, delivery_claim_expires_at = NULL"
                " WHERE notification_id = %s AND delivered_at IS NULL"
                " AND delivery_claim_token = %s RETURNING *",
                (self._db.now_ms(conn), notification_id, claim_token)).fetchone()
        assert updated is not None
        return notification_from_row(updated)

    def list_pending(self, session_id: str) -> list[Notification]:
        rows = self._db.read(
            "SELECT * FROM workflow_notifications WHERE target_session_id = %s"
            " AND delivered_at IS NULL ORDER BY created_at, run_id, node_id, notification_index",
            (session_id,))
        return [notification_from_row(row) for row in rows]
