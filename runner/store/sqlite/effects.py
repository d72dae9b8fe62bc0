"""`effects` and `controller_events` on SQLite.

Effects record an external mutation *before* the provider is called:

    reserve  -> pending (or the existing record; another fingerprint/kind raises
                IdentityConflict)
    complete -> pending | indeterminate  ->  applied | rejected | indeterminate

`applied` and `rejected` are final: completing them again returns `LostRace`
(`wrong_status`, with the state found). An `indeterminate` effect may be
completed again once the provider has been observed.

`controller_events` is the controller runtime's append-only lifecycle feed: the
payload is a JSON object (canonical, at most 64 KiB) whose top-level `error`
and `message` strings are cut to 8,192 bytes.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Mapping

from runner.store.controller_interface import ControllerEvent, Effect, EffectState
from runner.store.errors import IdentityConflict
from runner.store.records import (
    PAYLOAD_MAX_BYTES,
    LostRace,
    bounded_message,
    check_id,
    json_object,
)
from runner.store.sqlite.db import SqliteDatabase
from runner.store.states import CONTROLLER_ERROR_MAX_BYTES

#: States an effect may be completed from, and the states it may be completed to.
EFFECT_OPEN_STATES: tuple[EffectState, ...] = ("pending", "indeterminate")
EFFECT_OUTCOMES: tuple[EffectState, ...] = ("applied", "rejected", "indeterminate")
_BOUNDED_PAYLOAD_FIELDS = ("error", "message")


def effect_from_row(row: sqlite3.Row) -> Effect:
    return Effect(
        resource_uid=row["resource_uid"],
        effect_key=row["effect_key"],
        generation=row["generation"],
        kind=row["kind"],
        state=row["state"],
        request_fingerprint=row["request_fingerprint"],
        started_at=row["started_at"],
        completed_at=row["completed_at"],
        external_ref=row["external_ref"],
        error=row["error"],
    )


def event_from_row(row: sqlite3.Row) -> ControllerEvent:
    return ControllerEvent(
        seq=row["seq"],
        recorded_at=row["recorded_at"],
        controller=row["controller"],
        key=row["resource_key"],
        type=row["type"],
        reconcile_id=row["reconcile_id"],
        payload=json.loads(row["payload_json"]),
    )


def _bounded(error: str | None) -> str | None:
    return None if error is None else bounded_message(error, CONTROLLER_ERROR_MAX_BYTES)


class SqliteEffects:
    """`Effects` on SQLite."""

    def __init__(self, db: SqliteDatabase, now_ms: Callable[[], int]) -> None:
        self._db = db
        self._now_ms = now_ms

    def reserve(
        self,
        resource_uid: str,
        effect_key: str,
        *,
        generation: int,
        kind: str,
        request_fingerprint: str,
    ) -> Effect:
        check_id(resource_uid, "resource uid")
        check_id(effect_key, "effect key")
        check_id(kind, "effect kind")
        check_id(request_fingerprint, "request fingerprint")
        if not isinstance(generation, int) or generation < 1:
            raise ValueError(f"an effect generation must be a positive integer, got {generation!r}")
        with self._db.write() as conn:
            conn.execute(
                "INSERT INTO effects (resource_uid, effect_key, generation, kind, state,"
                " request_fingerprint, started_at) VALUES (?, ?, ?, ?, 'pending', ?, ?)"
                " ON CONFLICT (resource_uid, effect_key) DO NOTHING",
                (resource_uid, effect_key, generation, kind, request_fingerprint, self._now_ms()),
            )
            row = conn.execute(
                "SELECT * FROM effects WHERE resource_uid = ? AND effect_key = ?",
                (resource_uid, effect_key),
            ).fetchone()
        if row["request_fingerprint"] != request_fingerprint or row["kind"] != kind:
            raise IdentityConflict(
                f"effect {effect_key!r} of resource {resource_uid} was reserved as a "
                f"{row['kind']!r} with another request; use a new effect key for a new request"
            )
        return effect_from_row(row)

    def complete(
        self,
        resource_uid: str,
        effect_key: str,
        *,
        state: EffectState,
        external_ref: str | None = None,
        error: str | None = None,
    ) -> Effect | LostRace:
        if state not in EFFECT_OUTCOMES:
            raise ValueError(f"an effect completes as one of {EFFECT_OUTCOMES}, not {state!r}")
        name = f"{resource_uid}/{effect_key}"
        with self._db.write() as conn:
            row = conn.execute(
                "SELECT state FROM effects WHERE resource_uid = ? AND effect_key = ?",
                (resource_uid, effect_key),
            ).fetchone()
            if row is None:
                return LostRace(name, "not_found")
            if row["state"] not in EFFECT_OPEN_STATES:
                return LostRace(name, "wrong_status", row["state"])
            updated = conn.execute(
                "UPDATE effects SET state = ?, completed_at = ?, external_ref = ?, error = ?"
                " WHERE resource_uid = ? AND effect_key = ? AND state = ? RETURNING *",
                (
                    state,
                    self._now_ms(),
                    external_ref,
                    _bounded(error),
                    resource_uid,
                    effect_key,
                    row["state"],
                ),
            ).fetchone()
        return effect_from_row(updated)

    def get(self, resource_uid: str, effect_key: str) -> Effect | None:
        rows = self._db.read(
            "SELECT * FROM effects WHERE resource_uid = ? AND effect_key = ?",
            (resource_uid, effect_key),
        )
        return effect_from_row(rows[0]) if rows else None

    def list(self, resource_uid: str) -> list[Effect]:
        rows = self._db.read(
            "SELECT * FROM effects WHERE resource_uid = ? ORDER BY started_at, effect_key",
            (resource_uid,),
        )
        return [effect_from_row(row) for row in rows]


def event_payload(controller: str, key: str, event_type: str, payload: object,
                  reconcile_id: str | None) -> str:
    """Check an event's ids and return its bounded, canonical JSON payload."""
    check_id(controller, "controller")
    check_id(key, "resource key")
    check_id(event_type, "event type")
    if reconcile_id is not None:
        check_id(reconcile_id, "reconcile id")
    body = {} if payload is None else payload
    if not isinstance(body, Mapping):
        raise ValueError(f"a controller event payload must be a JSON object, not {body!r:.80}")
    bounded = {
        name: bounded_message(value, CONTROLLER_ERROR_MAX_BYTES)
        if name in _BOUNDED_PAYLOAD_FIELDS and isinstance(value, str)
        else value
        for name, value in body.items()
    }
    return json_object(bounded, what="controller event payload", max_bytes=PAYLOAD_MAX_BYTES)


def insert_event(conn: sqlite3.Connection, now: int, controller: str, key: str,
                 event_type: str, payload_json: str, reconcile_id: str | None
                 ) -> ControllerEvent:
    """Insert one event inside the caller's transaction (so it commits with it)."""
    row = conn.execute(
        "INSERT INTO controller_events (recorded_at, controller, resource_key, type,"
        " reconcile_id, payload_json) VALUES (?, ?, ?, ?, ?, ?) RETURNING *",
        (now, controller, key, event_type, reconcile_id, payload_json),
    ).fetchone()
    return event_from_row(row)


class SqliteControllerEvents:
    """`ControllerEvents` on SQLite."""

    def __init__(self, db: SqliteDatabase, now_ms: Callable[[], int]) -> None:
        self._db = db
        self._now_ms = now_ms

    def append(
        self,
        controller: str,
        key: str,
        event_type: str,
        payload: object = None,
        *,
        reconcile_id: str | None = None,
    ) -> ControllerEvent:
        text = event_payload(controller, key, event_type, payload, reconcile_id)
        with self._db.write() as conn:
            return insert_event(conn, self._now_ms(), controller, key, event_type, text,
                                reconcile_id)

    def read(
        self,
        *,
        controller: str | None = None,
        key: str | None = None,
        after_seq: int = 0,
        limit: int = 1000,
    ) -> list[ControllerEvent]:
        """Events after `after_seq`, oldest first; `key` narrows within `controller`."""
        if limit < 1:
            raise ValueError(f"limit must be positive, got {limit!r}")
        clauses = ["seq > ?"]
        params: list[object] = [after_seq]
        if controller is not None:
            clauses.append("controller = ?")
            params.append(controller)
        if key is not None:
            clauses.append("resource_key = ?")
            params.append(key)
        rows = self._db.read(
            f"SELECT * FROM controller_events WHERE {' AND '.join(clauses)} ORDER BY seq LIMIT ?",
            (*params, limit),
        )
        return [event_from_row(row) for row in rows]

