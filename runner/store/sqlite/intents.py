"""`workflow_turn_intents` on SQLite: deferred model turns for a session.

An intent is *pending* until resolved and *eligible* once `eligible_at` is set.
At most one pending intent exists per (run, target session) — a partial unique
index. Ensure is insert-or-ignore followed by an identity comparison, so a
crash retry with the same deterministic id is a no-op and a different payload
under the same id is a caller bug (IdentityConflict). Delivery takes a claim
token with a lease; resolution needs that token.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable

from runner.store.errors import IdentityConflict
from runner.store.records import (
    PAYLOAD_MAX_BYTES,
    LostRace,
    NewTurnIntent,
    TurnIntent,
    check_id,
    json_object,
    lease_ms,
    new_claim_token,
)
from runner.store.sqlite.db import SqliteDatabase
from runner.store.states import TURN_CAUSES, TURN_RESOLUTIONS, TurnResolution

_IDENTITY = (
    "source_event_id",
    "run_id",
    "workflow_ref",
    "target_session_id",
    "cause",
    "node_id",
    "attempt_id",
    "fallback_facts_json",
)


def intent_from_row(row: sqlite3.Row) -> TurnIntent:
    return TurnIntent(
        intent_id=row["intent_id"],
        source_event_id=row["source_event_id"],
        run_id=row["run_id"],
        workflow_ref=row["workflow_ref"],
        target_session_id=row["target_session_id"],
        cause=row["cause"],
        node_id=row["node_id"],
        attempt_id=row["attempt_id"],
        fallback_facts=json.loads(row["fallback_facts_json"]),
        requested_at=row["requested_at"],
        eligible_at=row["eligible_at"],
        resolved_at=row["resolved_at"],
        resolution=row["resolution"],
        resolution_message_id=row["resolution_message_id"],
        delivery_claim_token=row["delivery_claim_token"],
        delivery_claim_expires_at=row["delivery_claim_expires_at"],
    )


def _state(row: sqlite3.Row) -> str:
    if row["resolved_at"] is not None:
        return "resolved"
    return "eligible" if row["eligible_at"] is not None else "pending"


def _load(conn: sqlite3.Connection, intent_id: str) -> sqlite3.Row | None:
    row: sqlite3.Row | None = conn.execute(
        "SELECT * FROM workflow_turn_intents WHERE intent_id = ?", (intent_id,)
    ).fetchone()
    return row


def ensure_intent(
    conn: sqlite3.Connection, intent: NewTurnIntent, now_ms: int
) -> TurnIntent | LostRace:
    """Insert-or-ignore then compare identity, inside the caller's transaction."""
    for name in ("intent_id", "source_event_id", "run_id", "workflow_ref", "target_session_id"):
        check_id(getattr(intent, name), name)
    if intent.cause not in TURN_CAUSES:
        raise ValueError(f"unknown turn cause {intent.cause!r}; use one of {TURN_CAUSES}")
    facts = json_object(intent.fallback_facts, what="fallback facts", max_bytes=PAYLOAD_MAX_BYTES)
    wanted = {
        "source_event_id": intent.source_event_id,
        "run_id": intent.run_id,
        "workflow_ref": intent.workflow_ref,
        "target_session_id": intent.target_session_id,
        "cause": intent.cause,
        "node_id": intent.node_id,
        "attempt_id": intent.attempt_id,
        "fallback_facts_json": facts,
    }
    existing = _load(conn, intent.intent_id)
    if existing is None:
        holder = conn.execute(
            "SELECT intent_id FROM workflow_turn_intents"
            " WHERE run_id = ? AND target_session_id = ? AND resolved_at IS NULL",
            (intent.run_id, intent.target_session_id),
        ).fetchone()
        if holder is not None:
            return LostRace(intent.intent_id, "intent_pending", None, holder[0])
        conn.execute(
            "INSERT INTO workflow_turn_intents (intent_id, source_event_id, run_id, workflow_ref,"
            " target_session_id, cause, node_id, attempt_id, fallback_facts_json, requested_at,"
            " eligible_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
            " ON CONFLICT (intent_id) DO NOTHING",
            (
                intent.intent_id,
                *(wanted[name] for name in _IDENTITY),
                now_ms,
                now_ms if intent.eligible else None,
            ),
        )
        existing = _load(conn, intent.intent_id)
        assert existing is not None
    differing = [name for name in _IDENTITY if existing[name] != wanted[name]]
    if differing:
        raise IdentityConflict(
            f"turn intent {intent.intent_id} exists with a different " + ", ".join(differing)
        )
    return intent_from_row(existing)


def make_intent_eligible(
    conn: sqlite3.Connection, intent_id: str, now_ms: int
) -> TurnIntent | LostRace:
    """Pending -> eligible inside the caller's transaction (idempotent)."""
    row = _load(conn, intent_id)
    if row is None:
        return LostRace(intent_id, "not_found")
    if row["resolved_at"] is not None:
        return LostRace(intent_id, "wrong_status", "resolved")
    if row["eligible_at"] is not None:
        return intent_from_row(row)
    updated = conn.execute(
        "UPDATE workflow_turn_intents SET eligible_at = ?"
        " WHERE intent_id = ? AND resolved_at IS NULL AND eligible_at IS NULL RETURNING *",
        (now_ms, intent_id),
    ).fetchone()
    return intent_from_row(updated)


class SqliteTurnIntents:
    """`TurnIntents` on SQLite."""

    def __init__(self, db: SqliteDatabase, now_ms: Callable[[], int]) -> None:
        self._db = db
        self._now_ms = now_ms

    def ensure(self, intent: NewTurnIntent) -> TurnIntent | LostRace:
        with self._db.write() as conn:
            return ensure_intent(conn, intent, self._now_ms())

    def get(self, intent_id: str) -> TurnIntent | None:
        rows = self._db.read(
            "SELECT * FROM workflow_turn_intents WHERE intent_id = ?", (intent_id,)
        )
        return intent_from_row(rows[0]) if rows else None

    def make_eligible(self, intent_id: str) -> TurnIntent | LostRace:
        with self._db.write() as conn:
            return make_intent_eligible(conn, intent_id, self._now_ms())

    def claim_delivery(
        self, intent_id: str, *, lease_seconds: float = 30.0
    ) -> TurnIntent | LostRace:
        lease = lease_ms(lease_seconds)
        with self._db.write() as conn:
            now = self._now_ms()
            row = _load(conn, intent_id)
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
                "UPDATE workflow_turn_intents SET delivery_claim_token = ?,"
                " delivery_claim_expires_at = ? WHERE intent_id = ? AND resolved_at IS NULL"
                " AND eligible_at IS NOT NULL AND delivery_claim_token IS ? RETURNING *",
                (new_claim_token(), now + lease, intent_id, row["delivery_claim_token"]),
            ).fetchone()
        return intent_from_row(updated)

    def _with_token(
        self, conn: sqlite3.Connection, intent_id: str, claim_token: str
    ) -> sqlite3.Row | LostRace:
        row = _load(conn, intent_id)
        if row is None:
            return LostRace(intent_id, "not_found")
        if row["resolved_at"] is not None:
            return LostRace(intent_id, "wrong_status", "resolved")
        if row["delivery_claim_token"] != claim_token:
            return LostRace(intent_id, "token_mismatch", _state(row))
        return row

    def release_delivery(self, intent_id: str, claim_token: str) -> TurnIntent | LostRace:
        with self._db.write() as conn:
            row = self._with_token(conn, intent_id, claim_token)
            if isinstance(row, LostRace):
                return row
            updated = conn.execute(
                "UPDATE workflow_turn_intents SET delivery_claim_token = NULL,"
                " delivery_claim_expires_at = NULL"
                " WHERE intent_id = ? AND delivery_claim_token = ? AND resolved_at IS NULL"
                " RETURNING *",
                (intent_id, claim_token),
            ).fetchone()
        return intent_from_row(updated)

    def resolve(
        self, intent_id: str, claim_token: str, *, resolution: TurnResolution, message_id: str
    ) -> TurnIntent | LostRace:
        if resolution not in TURN_RESOLUTIONS:
            raise ValueError(f"unknown resolution {resolution!r}; use one of {TURN_RESOLUTIONS}")
        check_id(message_id, "message_id")
        with self._db.write() as conn:
            row = self._with_token(conn, intent_id, claim_token)
            if isinstance(row, LostRace):
                return row
            updated = conn.execute(
                "UPDATE workflow_turn_intents SET resolved_at = ?, resolution = ?,"
                " resolution_message_id = ?, delivery_claim_token = NULL,"
                " delivery_claim_expires_at = NULL"
                " WHERE intent_id = ? AND delivery_claim_token = ? AND resolved_at IS NULL"
                " RETURNING *",
                (self._now_ms(), resolution, message_id, intent_id, claim_token),
            ).fetchone()
        return intent_from_row(updated)

    def list_eligible(self, session_id: str) -> list[TurnIntent]:
        rows = self._db.read(
            "SELECT * FROM workflow_turn_intents WHERE target_session_id = ?"
            " AND resolved_at IS NULL AND eligible_at IS NOT NULL"
            " ORDER BY eligible_at, intent_id",
            (session_id,),
        )
        return [intent_from_row(row) for row in rows]

    def list_pending(self, run_id: str) -> list[TurnIntent]:
        rows = self._db.read(
            "SELECT * FROM workflow_turn_intents WHERE run_id = ? AND resolved_at IS NULL"
            " ORDER BY requested_at, intent_id",
            (run_id,),
        )
        return [intent_from_row(row) for row in rows]
