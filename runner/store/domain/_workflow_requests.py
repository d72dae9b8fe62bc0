"""`workflow_requests`, backend-neutral: the child workflows a resource asked for.

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
another outcome `LostRace(wrong_status)`. A child run's ending settles its
request and wakes the parent's key in the launch's own transaction (`settle_child`,
in _settle.py).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

from runner.store._connector import Connector, Row, UniqueViolation, in_params
from runner.store._connector import Transaction as Tx
from runner.store._controller_interface import RequestState, WorkflowRequest
from runner.store._errors import IdentityConflict
from runner.store._records import LostRace, bounded_message, check_id
from runner.store._states import (
    CONTROLLER_ERROR_MAX_BYTES,
    REQUEST_FINISHED_STATES,
    WORKFLOW_REQUEST_STATES,
)
from runner.store.domain._controller_events import read_all

REQUEST_ID_HEX = 32
#: Where `finish` may start from, and where it may go.
_FINISH_FROM: dict[str, tuple[RequestState, ...]] = {
    "pending": ("failed",),
    "running": ("running", "waiting", "succeeded", "failed", "interrupted"),
    "waiting": ("running", "waiting", "succeeded", "failed", "interrupted"),
}
_STARTABLE: tuple[RequestState, ...] = ("pending", "interrupted")
_LOAD = "SELECT * FROM workflow_requests WHERE request_id = :id"


def request_id_for(resource_uid: str, request_key: str) -> str:
    """The deterministic id of (resource uid, request key): a sha256 hex prefix."""
    digest = hashlib.sha256(f"{resource_uid}\x00{request_key}".encode()).hexdigest()
    return digest[:REQUEST_ID_HEX]


def request_from_row(row: Row) -> WorkflowRequest:
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


def _load(tx: Tx, request_id: str) -> Row | None:
    return tx.one(_LOAD + tx.dialect.lock, {"id": request_id})


def _attempt_row(tx: Tx, request_id: str, attempt: int) -> Row | LostRace:
    """The request's row (locked) if `attempt` is its current attempt."""
    row = _load(tx, request_id)
    if row is None:
        return LostRace(request_id, "not_found")
    if row["attempt"] != attempt:
        return LostRace(request_id, "stale_attempt", row["state"])
    return row


def _bounded(error: str | None) -> str | None:
    return None if error is None else bounded_message(error, CONTROLLER_ERROR_MAX_BYTES)


class RequestBook:
    """`WorkflowRequests` on any backend."""

    def __init__(self, connector: Connector) -> None:
        self._c = connector

    def ensure(self, resource_uid: str, request_key: str, *, workflow: str,
               input_fingerprint: str) -> WorkflowRequest:
        check_id(resource_uid, "resource uid")
        check_id(request_key, "request key")
        check_id(workflow, "workflow")
        check_id(input_fingerprint, "input fingerprint")
        request_id = request_id_for(resource_uid, request_key)
        with self._c.write() as tx:
            now = tx.now_ms()
            tx.run(
                "INSERT INTO workflow_requests (request_id, resource_uid, request_key,"
                " input_fingerprint, workflow, state, attempt, created_at, updated_at)"
                " VALUES (:id, :uid, :key, :fingerprint, :workflow, 'pending', 0, :now, :now)"
                " ON CONFLICT DO NOTHING",
                {"id": request_id, "uid": resource_uid, "key": request_key,
                 "fingerprint": input_fingerprint, "workflow": workflow, "now": now})
            row = _load(tx, request_id)
        if row is None or (row["resource_uid"], row["request_key"]) != (resource_uid,
                                                                         request_key):
            raise IdentityConflict(f"request id {request_id} belongs to another request")
        if row["input_fingerprint"] != input_fingerprint or row["workflow"] != workflow:
            raise IdentityConflict(
                f"child workflow request {request_key!r} of resource {resource_uid} was made "
                f"for {row['workflow']!r} with another input; use a new request key"
            )
        return request_from_row(row)

    def start_attempt(self, request_id: str, *, expected_attempt: int,
                      run_id: str) -> WorkflowRequest | LostRace:
        check_id(run_id, "run_id")
        with self._c.write() as tx:
            row = _attempt_row(tx, request_id, expected_attempt)
            if isinstance(row, LostRace):
                return row
            if row["state"] not in _STARTABLE:
                return LostRace(request_id, "wrong_status", row["state"])
            try:
                with tx.statement():  # the run id's unique index may refuse it
                    started = tx.one(
                        "UPDATE workflow_requests SET attempt = attempt + 1, run_id = :run,"
                        " state = 'running', error = NULL, updated_at = :now"
                        " WHERE request_id = :id AND attempt = :attempt AND state = :was"
                        " RETURNING *",
                        {"run": run_id, "now": tx.now_ms(), "id": request_id,
                         "attempt": expected_attempt, "was": row["state"]})
            except UniqueViolation:
                raise IdentityConflict(
                    f"run id {run_id} already belongs to another workflow request") from None
        assert started is not None
        return request_from_row(started)

    def finish(self, request_id: str, *, attempt: int, state: RequestState,
               error: str | None = None) -> WorkflowRequest | LostRace:
        if state not in WORKFLOW_REQUEST_STATES or state == "pending":
            raise ValueError(f"a workflow request cannot finish as {state!r}")
        message = _bounded(error)
        with self._c.write() as tx:
            row = _attempt_row(tx, request_id, attempt)
            if isinstance(row, LostRace):
                return row
            current = row["state"]
            if current in REQUEST_FINISHED_STATES:
                if (current, row["error"]) == (state, message):
                    return request_from_row(row)
                return LostRace(request_id, "wrong_status", current)
            if state not in _FINISH_FROM[current]:
                return LostRace(request_id, "wrong_status", current)
            finished = tx.one(
                "UPDATE workflow_requests SET state = :state, error = :error, updated_at = :now"
                " WHERE request_id = :id AND attempt = :attempt AND state = :was RETURNING *",
                {"state": state, "error": message, "now": tx.now_ms(), "id": request_id,
                 "attempt": attempt, "was": current})
        assert finished is not None
        return request_from_row(finished)

    def get(self, request_id: str) -> WorkflowRequest | None:
        rows = read_all(self._c, _LOAD, {"id": request_id})
        return request_from_row(rows[0]) if rows else None

    def find_by_run(self, run_id: str) -> WorkflowRequest | None:
        """The request whose *current* attempt is `run_id` (older runs are not found)."""
        rows = read_all(self._c, "SELECT * FROM workflow_requests WHERE run_id = :run",
                            {"run": run_id})
        return request_from_row(rows[0]) if rows else None

    def list(self, resource_uid: str | None = None,
             states: Iterable[RequestState] | None = None) -> list[WorkflowRequest]:
        clauses: list[str] = []
        params: dict[str, object] = {}
        if resource_uid is not None:
            clauses.append("resource_uid = :uid")
            params["uid"] = resource_uid
        if states is not None:
            wanted = list(dict.fromkeys(states))
            unknown = [s for s in wanted if s not in WORKFLOW_REQUEST_STATES]
            if unknown:
                raise ValueError(f"unknown workflow request state(s) {unknown}")
            if wanted:
                marks, more = in_params("s", wanted)
                clauses.append(f"state IN {marks}")
                params.update(more)
            else:
                clauses.append("1 = 0")
        where = " AND ".join(clauses) or "1 = 1"
        rows = read_all(self._c,
            f"SELECT * FROM workflow_requests WHERE {where} ORDER BY created_at, request_id",
            params)
        return [request_from_row(row) for row in rows]
