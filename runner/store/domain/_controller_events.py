"""`controller_events`, backend-neutral: the controller runtime's append-only
lifecycle feed. The payload is a JSON object (canonical, at most 64 KiB) whose
top-level `error` and `message` strings are cut to 8,192 bytes. Events written
with a queue change go through `insert_event` inside that change's transaction."""

from __future__ import annotations

import json
from collections.abc import Mapping

from runner.store._connector import Connector, Params, Row
from runner.store._connector import Transaction as Tx
from runner.store._controller_interface import ControllerEvent
from runner.store._records import PAYLOAD_MAX_BYTES, bounded_message, check_id, json_object
from runner.store._states import CONTROLLER_ERROR_MAX_BYTES

_BOUNDED_PAYLOAD_FIELDS = ("error", "message")
_NO_PARAMS: Params = {}

_INSERT = (
    "INSERT INTO controller_events (recorded_at, controller, resource_key, type,"
    " reconcile_id, payload_json) VALUES (:now, :controller, :key, :type, :rid, :payload)"
)


def read_all(connector: Connector, sql: str, params: Params = _NO_PARAMS) -> list[Row]:
    """One read statement in its own snapshot: every row."""
    with connector.read() as tx:
        return tx.all(sql, params)


def event_from_row(row: Row) -> ControllerEvent:
    return ControllerEvent(
        seq=row["seq"],
        recorded_at=row["recorded_at"],
        controller=row["controller"],
        key=row["resource_key"],
        type=row["type"],
        reconcile_id=row["reconcile_id"],
        payload=json.loads(row["payload_json"]),
    )


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


def event_params(now: int, controller: str, key: str, event_type: str, payload_json: str,
                 reconcile_id: str | None) -> dict[str, object]:
    return {"now": now, "controller": controller, "key": key, "type": event_type,
            "rid": reconcile_id, "payload": payload_json}


def insert_event(tx: Tx, controller: str, key: str, event_type: str, payload_json: str,
                 reconcile_id: str | None) -> ControllerEvent:
    """Insert one event inside the caller's transaction (so it commits with it)."""
    row = tx.one(_INSERT + " RETURNING *", event_params(
        tx.now_ms(), controller, key, event_type, payload_json, reconcile_id))
    assert row is not None
    return event_from_row(row)


def insert_events(tx: Tx, rows: list[dict[str, object]]) -> None:
    """Several events (from `event_params`) in one statement batch."""
    if rows:
        tx.many(_INSERT, rows)


class ControllerEventFeed:
    """`ControllerEvents` on any backend."""

    def __init__(self, connector: Connector) -> None:
        self._c = connector

    def append(self, controller: str, key: str, event_type: str, payload: object = None, *,
               reconcile_id: str | None = None) -> ControllerEvent:
        text = event_payload(controller, key, event_type, payload, reconcile_id)
        with self._c.write() as tx:
            return insert_event(tx, controller, key, event_type, text, reconcile_id)

    def read(self, *, controller: str | None = None, key: str | None = None,
             after_seq: int = 0, limit: int = 1000) -> list[ControllerEvent]:
        """Events after `after_seq`, oldest first; `key` narrows within `controller`."""
        if limit < 1:
            raise ValueError(f"limit must be positive, got {limit!r}")
        clauses = ["seq > :after"]
        params: dict[str, object] = {"after": after_seq, "limit": limit}
        if controller is not None:
            clauses.append("controller = :controller")
            params["controller"] = controller
        if key is not None:
            clauses.append("resource_key = :key")
            params["key"] = key
        rows = read_all(self._c,
            f"SELECT * FROM controller_events WHERE {' AND '.join(clauses)}"
            " ORDER BY seq LIMIT :limit", params)
        return [event_from_row(row) for row in rows]
