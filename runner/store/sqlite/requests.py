"""`workflow_requests` on SQLite: the child workflows a resource asked for.

A request is identified by (resource uid, request key); its `request_id` is
derived from that pair (`request_id_for`), so every process computes the same
id. The input fingerprint and workflow are fixed at the first `ensure`: asking
again with other ones raises IdentityConflict.

Attempts are immutable. Attempt 0 is the request before any run (`pending`);
`start_attempt` moves `pending` or `interrupted` to attempt+1 with a new run id
(`running`), saved before the run is scheduled. `finish` records the outcome of
the *current* attempt only (an older attempt loses with `stale_attempt`):

    pending (attempt 0)  -> failed                       (the request could not start)
    running | waiting    -> running | waiting | succeeded | failed | interrupted

`succeeded`, `failed` and `interrupted` end an attempt; finishing it again with
the same outcome returns the record unchanged (a retried completion), with
another outcome `LostRace(wrong_status)`.
"""

from __future__ import annotations

import hashlib
import sqlite3
from collections.abc import Callable, Iterable

from runner.store.controller_interface import RequestState, WorkflowRequest
from runner.store.errors import IdentityConflict
from runner.store.records import LostRace, bounded_message, check_id
from runner.store.sqlite.db import SqliteDatabase
from runner.store.sqlite.queue import wake
from runner.store.states import (
    CONTROLLER_ERROR_MAX_BYTES,
    REQUEST_FINISHED_STATES,
    WORKFLOW_REQUEST_STATES,
)

REQUEST_ID_HEX = 32
#: Where `finish` may start from, and where it may go.
_FINISH_FROM: dict[str, tuple[RequestState, ...]] = {
    "pending": ("failed",),
    "running": ("running", "waiting", "succeeded", "failed", "interrupted"),
    "waiting": ("running", "waiting", "succeeded", "failed", "interrupted"),
}
_STARTABLE: tuple[RequestState, ...] = ("pending", "interrupted")


def request_id_for(resource_uid: str, request_key: str) -> str:
    """The deterministic id of (resource uid, request key): a sha256 hex prefix."""
    digest = hashlib.sha256(f"{resource_uid}\x00{request_key}".encode()).hexdigest()
    return digest[:REQUEST_ID_HEX]


def request_from_row(row: sqlite3.Row) -> WorkflowRequest:
    return WorkflowRequest(
        request_id=row["request_id"],
        resource_uid=row["resource_uid"],
        request_key=row["request_key"],
        input_fingerprint=row["input_fingerprint"],
        workflow=row["workflow"],
        run_id=row["run_id"],
        state=row["state"],
        attempt=row["attempt"],
        error=row["error"],
        created_at=row["created_at"],
        updated_at=row["updated_at"],
    )


def _load(conn: sqlite3.Connection, request_id: str) -> sqlite3.Row | None:
    row: sqlite3.Row | None = conn.execute(
        "SELECT * FROM workflow_requests WHERE request_id = ?", (request_id,)
    ).fetchone()
    return row


class SqliteWorkflowRequests:
    """`WorkflowRequests` on SQLite."""

    def __init__(self, db: SqliteDatabase, now_ms: Callable[[], int]) -> None:
        self._db = db
        self._now_ms = now_ms

    def ensure(
        self, resource_uid: str, request_key: str, *, workflow: str, input_fingerprint: str
    ) -> WorkflowRequest:
        check_id(resource_uid, "resource uid")
        check_id(request_key, "request key")
        check_id(workflow, "workflow")
        check_id(input_fingerprint, "input fingerprint")
        request_id = request_id_for(resource_uid, request_key)
        with self._db.write() as conn:
            now = self._now_ms()
            conn.execute(
                "INSERT INTO workflow_requests (request_id, resource_uid, request_key,"
                " input_fingerprint, workflow, state, attempt, created_at, updated_at)"
                " VALUES (?, ?, ?, ?, ?, 'pending', 0, ?, ?) ON CONFLICT DO NOTHING",
                (request_id, resource_uid, request_key, input_fingerprint, workflow, now, now),
            )
            row = _load(conn, request_id)
        if row is None or (row["resource_uid"], row["request_key"]) != (
            resource_uid,
            request_key,
        ):
            raise IdentityConflict(f"request id {request_id} belongs to another request")
        if row["input_fingerprint"] != input_fingerprint or row["workflow"] != workflow:
            raise IdentityConflict(
                f"child workflow request {request_key!r} of resource {resource_uid} was made "
                f"for {row['workflow']!r} with another input; use a new request key"
            )
        return request_from_row(row)

    def start_attempt(
        self, request_id: str, *, expected_attempt: int, run_id: str
    ) -> WorkflowRequest | LostRace:
        check_id(run_id, "run_id")
        with self._db.write() as conn:
            row = _load(conn, request_id)
            if row is None:
                return LostRace(request_id, "not_found")
            if row["attempt"] != expected_attempt:
                return LostRace(request_id, "stale_attempt", row["state"])
            if row["state"] not in _STARTABLE:
                return LostRace(request_id, "wrong_status", row["state"])
            try:
                started = conn.execute(
                    "UPDATE workflow_requests SET attempt = attempt + 1, run_id = ?,"
                    " state = 'running', error = NULL, updated_at = ?"
                    " WHERE request_id = ? AND attempt = ? AND state = ? RETURNING *",
                    (run_id, self._now_ms(), request_id, expected_attempt, row["state"]),
                ).fetchone()
            except sqlite3.IntegrityError:
                raise IdentityConflict(
                    f"run id {run_id} already belongs to another workflow request"
                ) from None
        return request_from_row(started)

    def finish(
        self, request_id: str, *, attempt: int, state: RequestState, error: str | None = None
    ) -> WorkflowRequest | LostRace:
        if state not in WORKFLOW_REQUEST_STATES or state == "pending":
            raise ValueError(f"a workflow request cannot finish as {state!r}")
        message = None if error is None else bounded_message(error, CONTROLLER_ERROR_MAX_BYTES)
        with self._db.write() as conn:
            row = _load(conn, request_id)
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
                "UPDATE workflow_requests SET state = ?, error = ?, updated_at = ?"
                " WHERE request_id = ? AND attempt = ? AND state = ? RETURNING *",
                (state, message, self._now_ms(), request_id, attempt, current),
            ).fetchone()
        return request_from_row(finished)

    def get(self, request_id: str) -> WorkflowRequest | None:
        rows = self._db.read("SELECT * FROM workflow_requests WHERE request_id = ?", (request_id,))
        return request_from_row(rows[0]) if rows else None

    def find_by_run(self, run_id: str) -> WorkflowRequest | None:
        """The request whose *current* attempt is `run_id` (older runs are not found)."""
        rows = self._db.read("SELECT * FROM workflow_requests WHERE run_id = ?", (run_id,))
        return request_from_row(rows[0]) if rows else None

    def list(
        self, resource_uid: str | None = None, states: Iterable[RequestState] | None = None
    ) -> list[WorkflowRequest]:
        clauses: list[str] = []
        params: list[object] = []
        if resource_uid is not None:
            clauses.append("resource_uid = ?")
            params.append(resource_uid)
        if states is not None:
            wanted = list(dict.fromkeys(states))
            unknown = [s for s in wanted if s not in WORKFLOW_REQUEST_STATES]
            if unknown:
                raise ValueError(f"unknown workflow request state(s) {unknown}")
            clauses.append(f"state IN ({', '.join('?' for _ in wanted)})" if wanted else "0")
            params.extend(wanted)
        where = " AND ".join(clauses) or "1"
        rows = self._db.read(
            f"SELECT * FROM workflow_requests WHERE {where} ORDER BY created_at, request_id",
            params,
        )
        return [request_from_row(row) for row in rows]


def settle_child(conn: sqlite3.Connection, row: sqlite3.Row, state: str, now: int) -> None:
    """A controller's child run ended: record it on its request and wake the parent's
    key, in the transaction that ends the launch (no crash can leave one without the
    other)."""
    request = conn.execute(
        "SELECT w.request_id, r.controller, r.resource_key FROM workflow_requests w"
        " JOIN resources r ON r.uid = w.resource_uid"
        " WHERE w.run_id = ? AND w.state IN ('running', 'waiting')",
        (row["run_id"],),
    ).fetchone()
    if request is None:
        return
    error = None
    if state != "succeeded" and state != "waiting":
        error = bounded_message(
            row["error_message"] or f"the child run ended {row['status']}",
            CONTROLLER_ERROR_MAX_BYTES,
        )
    conn.execute(
        "UPDATE workflow_requests SET state = ?, error = ?, updated_at = ? WHERE request_id = ?",
        (state, error, now, request["request_id"]),
    )
    wake(conn, request["controller"], request["resource_key"], now)
