"""`run_events` on SQLite: the append-only audit feed.

The store appends one event for every launch transition in the same
transaction (`launch.queued`, `launch.starting`, `launch.reclaimed`,
`launch.running`, `launch.parked`, `launch.done`, `launch.failed`,
`launch.cancelled`, `launch.recovered`); callers may append their own. Payloads
never carry launch input, options or prompts.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable

from runner.store.records import PAYLOAD_MAX_BYTES, RunEvent, json_object
from runner.store.sqlite.db import SqliteDatabase


def append_event(
    conn: sqlite3.Connection,
    *,
    now_ms: int,
    run_id: str,
    event_type: str,
    payload: object,
    workflow_ref: str | None = None,
    runner_id: str | None = None,
) -> int:
    """Append inside the caller's transaction; returns the new `seq`."""
    if not event_type:
        raise ValueError("a run event needs a type")
    body = json_object(
        {} if payload is None else payload, what="event payload", max_bytes=PAYLOAD_MAX_BYTES
    )
    cursor = conn.execute(
        "INSERT INTO run_events (recorded_at, run_id, workflow_ref, type, runner_id, payload_json)"
        " VALUES (?, ?, ?, ?, ?, ?)",
        (now_ms, run_id, workflow_ref, event_type, runner_id, body),
    )
    seq = cursor.lastrowid
    assert seq is not None
    return seq


def event_from_row(row: sqlite3.Row) -> RunEvent:
    return RunEvent(
        seq=row["seq"],
        recorded_at=row["recorded_at"],
        run_id=row["run_id"],
        workflow_ref=row["workflow_ref"],
        type=row["type"],
        runner_id=row["runner_id"],
        payload=json.loads(row["payload_json"]),
    )


class SqliteRunEvents:
    """`RunEvents` on SQLite."""

    def __init__(self, db: SqliteDatabase, now_ms: Callable[[], int]) -> None:
        self._db = db
        self._now_ms = now_ms

    def append(
        self,
        run_id: str,
        event_type: str,
        payload: object = None,
        *,
        workflow_ref: str | None = None,
        runner_id: str | None = None,
    ) -> RunEvent:
        with self._db.write() as conn:
            seq = append_event(
                conn,
                now_ms=self._now_ms(),
                run_id=run_id,
                event_type=event_type,
                payload=payload,
                workflow_ref=workflow_ref,
                runner_id=runner_id,
            )
            row = conn.execute("SELECT * FROM run_events WHERE seq = ?", (seq,)).fetchone()
        return event_from_row(row)

    def read(
        self, *, run_id: str | None = None, after_seq: int = 0, limit: int = 1000
    ) -> list[RunEvent]:
        if run_id is None:
            rows = self._db.read(
                "SELECT * FROM run_events WHERE seq > ? ORDER BY seq LIMIT ?", (after_seq, limit)
            )
        else:
            rows = self._db.read(
                "SELECT * FROM run_events WHERE run_id = ? AND seq > ? ORDER BY seq LIMIT ?",
                (run_id, after_seq, limit),
            )
        return [event_from_row(row) for row in rows]
