"""`workflow_turn_intents`: deferred model turns for a session, written once over the seam.

An intent is *pending* until resolved and *eligible* once `eligible_at` is set.
At most one pending intent exists per (run, target session) -- a partial unique
index. Ensure is insert-or-ignore followed by an identity comparison, so a crash
retry with the same deterministic id is a no-op and a different payload under the
same id is a caller bug (IdentityConflict). Delivery takes a claim token with a
lease; resolution needs that token. Rows are locked (`dialect.lock`) before a
guarded change.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from runner._leases import LEASE_SECONDS
from runner.store._connector import Connector, Row, Transaction, UniqueViolation, named
from runner.store._errors import IdentityConflict
from runner.store._records import (
    PAYLOAD_MAX_BYTES,
    LostRace,
    NewTurnIntent,
    TurnIntent,
    check_id,
    json_object,
    lease_ms,
    new_claim_token,
)
from runner.store._states import TURN_CAUSES, TURN_RESOLUTIONS, TurnResolution

IDENTITY = ("source_event_id", "run_id", "workflow_ref", "target_session_id", "cause",
            "node_id", "attempt_id", "fallback_facts_json")

SQL: Mapping[str, str] = {
    "load": "SELECT * FROM workflow_turn_intents WHERE intent_id = :intent_id",
    "pending_holder": "SELECT intent_id FROM workflow_turn_intents"
    " WHERE run_id = :run_id AND target_session_id = :session AND resolved_at IS NULL",
    "insert": "INSERT INTO workflow_turn_intents (intent_id, source_event_id, run_id,"
    " workflow_ref, target_session_id, cause, node_id, attempt_id, fallback_facts_json,"
    " requested_at, eligible_at) VALUES (:intent_id, :source_event_id, :run_id,"
    " :workflow_ref, :target_session_id, :cause, :node_id, :attempt_id,"
    " :fallback_facts_json, :now, :eligible_at) ON CONFLICT (intent_id) DO NOTHING",
    "make_eligible": "UPDATE workflow_turn_intents SET eligible_at = :now"
    " WHERE intent_id = :intent_id AND resolved_at IS NULL AND eligible_at IS NULL"
    " RETURNING *",
    "claim": "UPDATE workflow_turn_intents SET delivery_claim_token = :token,"
    " delivery_claim_expires_at = :expires WHERE intent_id = :intent_id"
    " AND resolved_at IS NULL AND eligible_at IS NOT NULL"
    " AND delivery_claim_token {same} :old RETURNING *",
    "release": "UPDATE workflow_turn_intents SET delivery_claim_token = NULL,"
    " delivery_claim_expires_at = NULL WHERE intent_id = :intent_id"
    " AND delivery_claim_token = :token AND resolved_at IS NULL RETURNING *",
    "resolve": "UPDATE workflow_turn_intents SET resolved_at = :now, resolution = :resolution,"
    " resolution_message_id = :message_id, delivery_claim_token = NULL,"
    " delivery_claim_expires_at = NULL WHERE intent_id = :intent_id"
    " AND delivery_claim_token = :token AND resolved_at IS NULL RETURNING *",
    "list_eligible": "SELECT * FROM workflow_turn_intents WHERE target_session_id = :session"
    " AND resolved_at IS NULL AND eligible_at IS NOT NULL ORDER BY eligible_at, intent_id",
    "list_pending": "SELECT * FROM workflow_turn_intents WHERE run_id = :run_id"
    " AND resolved_at IS NULL ORDER BY requested_at, intent_id",
}


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


def _state(row: Row) -> str:
    if row["resolved_at"] is not None:
        return "resolved"
    return "eligible" if row["eligible_at"] is not None else "pending"


def _load(tx: Transaction, sql: Mapping[str, str], intent_id: str) -> Row | None:
    return tx.one(sql["load"] + tx.dialect.lock, {"intent_id": intent_id})


def ensure_intent(tx: Transaction, sql: Mapping[str, str],
                  intent: NewTurnIntent) -> TurnIntent | LostRace:
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
    existing = _load(tx, sql, intent.intent_id)
    if existing is None:
        holder = tx.one(sql["pending_holder"], {"run_id": intent.run_id,
                                                "session": intent.target_session_id})
        if holder is not None:
            return LostRace(intent.intent_id, "intent_pending", None, holder["intent_id"])
        now = tx.now_ms()
        try:
            with tx.statement():  # a racing pending intent (the partial index) loses cleanly
                tx.run(sql["insert"], {"intent_id": intent.intent_id, **wanted, "now": now,
                                       "eligible_at": now if intent.eligible else None})
        except UniqueViolation:
            return LostRace(intent.intent_id, "intent_pending")
        existing = _load(tx, sql, intent.intent_id)
        assert existing is not None
    differing = [name for name in IDENTITY if existing[name] != wanted[name]]
    if differing:
        raise IdentityConflict(
            f"turn intent {intent.intent_id} exists with a different " + ", ".join(differing))
    return intent_from_row(existing)


def make_intent_eligible(tx: Transaction, sql: Mapping[str, str],
                         intent_id: str) -> TurnIntent | LostRace:
    """Pending -> eligible inside the caller's transaction (idempotent)."""
    row = _load(tx, sql, intent_id)
    if row is None:
        return LostRace(intent_id, "not_found")
    if row["resolved_at"] is not None:
        return LostRace(intent_id, "wrong_status", "resolved")
    if row["eligible_at"] is not None:
        return intent_from_row(row)
    updated = tx.one(sql["make_eligible"], {"now": tx.now_ms(), "intent_id": intent_id})
    assert updated is not None
    return intent_from_row(updated)


class TurnIntents:
    """`TurnIntents` over a connector."""

    def __init__(self, connector: Connector, overrides: Mapping[str, str] | None = None) -> None:
        self._connector = connector
        self.sql = named(SQL, overrides)

    def ensure(self, intent: NewTurnIntent) -> TurnIntent | LostRace:
        with self._connector.write() as tx:
            return ensure_intent(tx, self.sql, intent)

    def get(self, intent_id: str) -> TurnIntent | None:
        with self._connector.read() as tx:
            row = tx.one(self.sql["load"], {"intent_id": intent_id})
        return intent_from_row(row) if row else None

    def make_eligible(self, intent_id: str) -> TurnIntent | LostRace:
        with self._connector.write() as tx:
            return make_intent_eligible(tx, self.sql, intent_id)

    def claim_delivery(self, intent_id: str, *,
                       lease_seconds: float = LEASE_SECONDS) -> TurnIntent | LostRace:
        lease = lease_ms(lease_seconds)
        with self._connector.write() as tx:
            now = tx.now_ms()
            row = _load(tx, self.sql, intent_id)
            if row is None:
                return LostRace(intent_id, "not_found")
            if row["resolved_at"] is not None:
                return LostRace(intent_id, "wrong_status", "resolved")
            if row["eligible_at"] is None:
                return LostRace(intent_id, "not_eligible", "pending")
            expires = row["delivery_claim_expires_at"]
            if expires is not None and expires > now:
                return LostRace(intent_id, "delivery_claimed", "eligible")
            updated = tx.one(self.sql["claim"].format(same=tx.dialect.same), {
                "token": new_claim_token(), "expires": now + lease, "intent_id": intent_id,
                "old": row["delivery_claim_token"]})
        assert updated is not None
        return intent_from_row(updated)

    def _with_token(self, tx: Transaction, intent_id: str, claim_token: str) -> Row | LostRace:
        row = _load(tx, self.sql, intent_id)
        if row is None:
            return LostRace(intent_id, "not_found")
        if row["resolved_at"] is not None:
            return LostRace(intent_id, "wrong_status", "resolved")
        if row["delivery_claim_token"] != claim_token:
            return LostRace(intent_id, "token_mismatch", _state(row))
        return row

    def release_delivery(self, intent_id: str, claim_token: str) -> TurnIntent | LostRace:
        with self._connector.write() as tx:
            row = self._with_token(tx, intent_id, claim_token)
            if isinstance(row, LostRace):
                return row
            updated = tx.one(self.sql["release"], {"intent_id": intent_id, "token": claim_token})
        assert updated is not None
        return intent_from_row(updated)

    def resolve(self, intent_id: str, claim_token: str, *, resolution: TurnResolution,
                message_id: str) -> TurnIntent | LostRace:
        if resolution not in TURN_RESOLUTIONS:
            raise ValueError(f"unknown resolution {resolution!r}; use one of {TURN_RESOLUTIONS}")
        check_id(message_id, "message_id")
        with self._connector.write() as tx:
            row = self._with_token(tx, intent_id, claim_token)
            if isinstance(row, LostRace):
                return row
            updated = tx.one(self.sql["resolve"], {
                "now": tx.now_ms(), "resolution": resolution, "message_id": message_id,
                "intent_id": intent_id, "token": claim_token})
        assert updated is not None
        return intent_from_row(updated)

    def list_eligible(self, session_id: str) -> list[TurnIntent]:
        with self._connector.read() as tx:
            rows = tx.all(self.sql["list_eligible"], {"session": session_id})
        return [intent_from_row(row) for row in rows]

    def list_pending(self, run_id: str) -> list[TurnIntent]:
        with self._connector.read() as tx:
            rows = tx.all(self.sql["list_pending"], {"run_id": run_id})
        return [intent_from_row(row) for row in rows]
