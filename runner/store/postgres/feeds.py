"""`effects`, `workflow_requests` and `controller_events` on Postgres: the same rules
as on SQLite (runner/store/sqlite/effects.py and requests.py describe them).
Rows are locked (`FOR UPDATE`) before a guarded change."""

from __future__ import annotations

import json
from collections.abc import Iterable

from psycopg import errors as pg_errors

from runner.store.controller_interface import (
    ControllerEvent,
    Effect,
    EffectState,
    RequestState,
    WorkflowRequest,
)
from runner.store.errors import IdentityConflict
from runner.store.postgres.db import Conn, PostgresDatabase, Row
from runner.store.records import LostRace, bounded_message, check_id
from runner.store.sqlite.effects import EFFECT_OPEN_STATES, EFFECT_OUTCOMES, event_payload
from runner.store.sqlite.requests import request_id_for
from runner.store.states import (
    CONTROLLER_ERROR_MAX_BYTES,
    REQUEST_FINISHED_STATES,
    WORKFLOW_REQUEST_STATES,
)

_FINISH_FROM: dict[str, tuple[RequestState, ...]] = {
    "pending": ("failed",),
    "running": ("running", "waiting", "succeeded", "failed", "interrupted"),
    "waiting": ("running", "waiting", "succeeded", "failed", "interrupted"),
}
_STARTABLE: tuple[RequestState, ...] = ("pending", "interrupted")


def _bounded(error: str | None) -> str | None:
    return None if error is None else bounded_message(error, CONTROLLER_ERROR_MAX_BYTES)


# --- controller events ----------------------------------------------------------


def controller_event_from_row(row: Row) -> ControllerEvent:
    return ControllerEvent(
        seq=row["seq"], recorded_at=row["recorded_at"], controller=row["controller"],
        key=row["resource_key"], type=row["type"], reconcile_id=row["reconcile_id"],
        payload=json.loads(row["payload_json"]))


def insert_controller_event(conn: Conn, now: int, controller: str, key: str, event_type: str,
                            payload_json: str, reconcile_id: str | None) -> ControllerEvent:
    row = conn.execute(
        "INSERT INTO controller_events (recorded_at, controller, resource_key, type,"
        " reconcile_id, payload_json) VALUES (%s, %s, %s, %s, %s, %s) RETURNING *",
        (now, controller, key, event_type, reconcile_id, payload_json)).fetchone()
    assert row is not None
    return controller_event_from_row(row)


class PostgresControllerEvents:
    """`ControllerEvents` on Postgres."""

    def __init__(self, db: PostgresDatabase) -> None:
        self._db = db

    def append(self, controller: str, key: str, event_type: str, payload: object = None, *,
               reconcile_id: str | None = None) -> ControllerEvent:
        text = event_payload(controller, key, event_type, payload, reconcile_id)
        with self._db.write() as conn:
            return insert_controller_event(conn, self._db.now_ms(conn), controller, key,
                                           event_type, text, reconcile_id)

    def read(self, *, controller: str | None = None, key: str | None = None,
             after_seq: int = 0, limit: int = 1000) -> list[ControllerEvent]:
        if limit < 1:
            raise ValueError(f"limit must be positive, got {limit!r}")
        clauses = ["seq > %s"]
        params: list[object] = [after_seq]
        if controller is not None:
            clauses.append("controller = %s")
            params.append(controller)
        if key is not None:
            clauses.append("resource_key = %s")
            params.append(key)
        rows = self._db.read(
            f"SELECT * FROM controller_events WHERE {' AND '.join(clauses)}"
            " ORDER BY seq LIMIT %s", (*params, limit))
        return [controller_event_from_row(row) for row in rows]


# --- effects --------------------------------------------------------------------


def effect_from_row(row: Row) -> Effect:
    return Effect(
        resource_uid=row["resource_uid"], effect_key=row["effect_key"],
        generation=row["generation"], kind=row["kind"], state=row["state"],
        request_fingerprint=row["request_fingerprint"], started_at=row["started_at"],
        completed_at=row["completed_at"], external_ref=row["external_ref"], error=row["error"])


class PostgresEffects:
    """`Effects` on Postgres."""

    def __init__(self, db: PostgresDatabase) -> None:
        self._db = db

    def reserve(self, resource_uid: str, effect_key: str, *, generation: int, kind: str,
                request_fingerprint: str) -> Effect:
        check_id(resource_uid, "resource uid")
        check_id(effect_key, "effect key")
        check_id(kind, "effect kind")
        check_id(request_fingerprint, "request fingerprint")
        if not isinstance(generation, int) or generation < 1:
            raise ValueError(f"an effect generation must be a positive integer, got {generation!r}")
        with self._db.write() as conn:
            conn.execute(
                "INSERT INTO effects (resource_uid, effect_key, generation, kind, state,"
                " request_fingerprint, started_at) VALUES (%s, %s, %s, %s, 'pending', %s, %s)"
                " ON CONFLICT (resource_uid, effect_key) DO NOTHING",
                (resource_uid, effect_key, generation, kind, request_fingerprint,
                 self._db.now_ms(conn)))
            row = conn.execute(
                "SELECT * FROM effects WHERE resource_uid = %s AND effect_key = %s",
                (resource_uid, effect_key)).fetchone()
        assert row is not None
        if row["request_fingerprint"] != request_fingerprint or row["kind"] != kind:
            raise IdentityConflict(
                f"effect {effect_key!r} of resource {resource_uid} was reserved as a "
                f"{row['kind']!r} with another request; use a new effect key for a new request")
        return effect_from_row(row)

    def complete(self, resource_uid: str, effect_key: str, *, state: EffectState,
                 external_ref: str | None = None, error: str | None = None) -> Effect | LostRace:
        if state not in EFFECT_OUTCOMES:
            raise ValueError(f"an effect completes as one of {EFFECT_OUTCOMES}, not {state!r}")
        name = f"{resource_uid}/{effect_key}"
        with self._db.write() as conn:
            row = conn.execute(
                "SELECT state FROM effects WHERE resource_uid = %s AND effect_key = %s"
                " FOR UPDATE", (resource_uid, effect_key)).fetchone()
            if row is None:
                return LostRace(name, "not_found")
            if row["state"] not in EFFECT_OPEN_STATES:
                return LostRace(name, "wrong_status", row["state"])
            updated = conn.execute(
                "UPDATE effects SET state = %s, completed_at = %s, external_ref = %s,"
                " error = %s WHERE resource_uid = %s AND effect_key = %s AND state = %s"
                " RETURNING *",
                (state, self._db.now_ms(conn), external_ref, _bounded(error), resource_uid,
                 effect_key, row["state"])).fetchone()
        assert updated is not None
        return effect_from_row(updated)

    def get(self, resource_uid: str, effect_key: str) -> Effect | None:
        rows = self._db.read("SELECT * FROM effects WHERE resource_uid = %s"
                             " AND effect_key = %s", (resource_uid, effect_key))
        return effect_from_row(rows[0]) if rows else None

    def list(self, resource_uid: str) -> list[Effect]:
        rows = self._db.read("SELECT * FROM effects WHERE resource_uid = %s"
                             " ORDER BY started_at, effect_key", (resource_uid,))
        return [effect_from_row(row) for row in rows]


# --- workflow requests ----------------------------------------------------------


def request_from_row(row: Row) -> WorkflowRequest:
    return WorkflowRequest(
        request_id=row["request_id"], resource_uid=row["resource_uid"],
        request_key=row["request_key"], input_fingerprint=row["input_fingerprint"],
        workflow=row["workflow"], run_id=row["run_id"], state=row["state"],
        attempt=row["attempt"], error=row["error"], created_at=row["created_at"],
        updated_at=row["updated_at"])


def _load_request(conn: Conn, request_id: str) -> Row | None:
    return conn.execute("SELECT * FROM workflow_requests WHERE request_id = %s FOR UPDATE",
                        (request_id,)).fetchone()


class PostgresWorkflowRequests:
    """`WorkflowRequests` on Postgres."""

    def __init__(self, db: PostgresDatabase) -> None:
        self._db = db

    def ensure(self, resource_uid: str, request_key: str, *, workflow: str,
               input_fingerprint: str) -> WorkflowRequest:
        check_id(resource_uid, "resource uid")
        check_id(request_key, "request key")
        check_id(workflow, "workflow")
        check_id(input_fingerprint, "input fingerprint")
        request_id = request_id_for(resource_uid, request_key)
        with self._db.write() as conn:
            now = self._db.now_ms(conn)
            conn.execute(
                "INSERT INTO workflow_requests (request_id, resource_uid, request_key,"
                " input_fingerprint, workflow, state, attempt, created_at, updated_at)"
                " VALUES (%s, %s, %s, %s, %s, 'pending', 0, %s, %s) ON CONFLICT DO NOTHING",
                (request_id, resource_uid, request_key, input_fingerprint, workflow, now, now))
            row = _load_request(conn, request_id)
        if row is None or (row["resource_uid"], row["request_key"]) != (resource_uid,
                                                                         request_key):
            raise IdentityConflict(f"request id {request_id} belongs to another request")
        if row["input_fingerprint"] != input_fingerprint or row["workflow"] != workflow:
            raise IdentityConflict(
                f"child workflow request {request_key!r} of resource {resource_uid} was made "
                f"for {row['workflow']!r} with another input; use a new request key")
        return request_from_row(row)

    def start_attempt(self, request_id: str, *, expected_attempt: int,
                      run_id: str) -> WorkflowRequest | LostRace:
        check_id(run_id, "run_id")
        with self._db.write() as conn:
            row = _load_request(conn, request_id)
            if row is None:
                return LostRace(request_id, "not_found")
            if row["attempt"] != expected_attempt:
                return LostRace(request_id, "stale_attempt", row["state"])
            if row["state"] not in _STARTABLE:
                return LostRace(request_id, "wrong_status", row["state"])
            try:
                with conn.transaction():
                    started = conn.execute(
                        "UPDATE workflow_requests SET attempt = attempt + 1, run_id = %s,"
                        " state = 'running', error = NULL, updated_at = %s"
                        " WHERE request_id = %s AND attempt = %s AND state = %s RETURNING *",
                        (run_id, self._db.now_ms(conn), request_id, expected_attempt,
                         row["state"])).fetchone()
            except pg_errors.UniqueViolation:
                raise IdentityConflict(
                    f"run id {run_id} already belongs to another workflow request") from None
        assert started is not None
        return request_from_row(started)

    def finish(self, request_id: str, *, attempt: int, state: RequestState,
               error: str | None = None) -> WorkflowRequest | LostRace:
        if state not in WORKFLOW_REQUEST_STATES or state == "pending":
            raise ValueError(f"a workflow request cannot finish as {state!r}")
        message = _bounded(error)
        with self._db.write() as conn:
            row = _load_request(conn, request_id)
            if row is None:
                return LostRace(request_id, "not_found")
            if row["attempt"] != attempt:
                return LostRace(request_id, "stale_attempt", row["state"])
            current = row["state"]
            if current in REQUEST_FINISHED_STATES:
                if (current, row["error"]) == (state, message):
                    return request_from_row(row)
                return LostRace(request_id, "wrong_status", current)
            if state not in _FINISH_FROM[current]:
                return LostRace(request_id, "wrong_status", current)
            finished = conn.execute(
                "UPDATE workflow_requests SET state = %s, error = %s, updated_at = %s"
                " WHERE request_id = %s AND attempt = %s AND state = %s RETURNING *",
                (state, message, self._db.now_ms(conn), request_id, attempt,
                 current)).fetchone()
        assert finished is not None
        return request_from_row(finished)

    def get(self, request_id: str) -> WorkflowRequest | None:
        rows = self._db.read("SELECT * FROM workflow_requests WHERE request_id = %s",
                             (request_id,))
        return request_from_row(rows[0]) if rows else None

    def find_by_run(self, run_id: str) -> WorkflowRequest | None:
        rows = self._db.read("SELECT * FROM workflow_requests WHERE run_id = %s", (run_id,))
        return request_from_row(rows[0]) if rows else None

    def list(self, resource_uid: str | None = None,
             states: Iterable[RequestState] | None = None) -> list[WorkflowRequest]:
        clauses: list[str] = []
        params: list[object] = []
        if resource_uid is not None:
            clauses.append("resource_uid = %s")
            params.append(resource_uid)
        if states is not None:
            wanted = list(dict.fromkeys(states))
            unknown = [s for s in wanted if s not in WORKFLOW_REQUEST_STATES]
            if unknown:
                raise ValueError(f"unknown workflow request state(s) {unknown}")
            clauses.append("state = ANY(%s)")
            params.append(wanted)
        where = " AND ".join(clauses) or "TRUE"
        rows = self._db.read(
            f"SELECT * FROM workflow_requests WHERE {where} ORDER BY created_at, request_id",
            params)
        return [request_from_row(row) for row in rows]
