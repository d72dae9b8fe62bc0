"""`run_events`, the append-only audit feed, written once over the store seam.

The store appends one event for every launch transition in the same transaction
(`launch.queued`, `launch.starting`, `launch.reclaimed`, `launch.running`,
`launch.parked`, `launch.done`, `launch.failed`, `launch.cancelled`,
`launch.recovered`); callers may append their own. Payloads never carry launch
input, options or prompts.

Commit order = `seq` order. A reader pages with `read(after_seq=last seen)`, so an
event must never become visible after one with a higher `seq`. SQLite writers are
serialized anyway. On Postgres a sequence hands out numbers at INSERT time, and a
transaction that drew seq 11 may commit after one that drew 12; a reader that saw
12 would never read 11. So a transaction appends its events *last*, after taking
the `order_appends` lock (a transaction-scoped advisory lock, released at commit):
numbers are drawn in commit order. Nothing is locked after it, so it cannot take
part in a deadlock; the cost is that appends (the tail of each transition and its
commit) take turns.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass

from runner.store._connector import Connector, Row, Transaction, named
from runner.store._records import PAYLOAD_MAX_BYTES, RunEvent, json_object

SQL: Mapping[str, str] = {
    # Empty: the backend's writers are serialized already (SQLite's BEGIN IMMEDIATE).
    "order_appends": "",
    "append": "INSERT INTO run_events (recorded_at, run_id, workflow_ref, type, runner_id,"
    " payload_json) VALUES (:now, :run_id, :workflow_ref, :type, :runner_id, :payload)",
    "read_all": "SELECT * FROM run_events WHERE seq > :after ORDER BY seq LIMIT :limit",
    "read_run": "SELECT * FROM run_events WHERE run_id = :run_id AND seq > :after"
    " ORDER BY seq LIMIT :limit",
}


def event_from_row(row: Row) -> RunEvent:
    return RunEvent(seq=row["seq"], recorded_at=row["recorded_at"], run_id=row["run_id"],
                    workflow_ref=row["workflow_ref"], type=row["type"],
                    runner_id=row["runner_id"], payload=json.loads(row["payload_json"]))


@dataclass(frozen=True)
class _Pending:
    run_id: str
    event_type: str
    body: str
    workflow_ref: str | None
    runner_id: str | None


class EventLog:
    """The events of one transaction, appended together at its end (`flush`)."""

    def __init__(self, tx: Transaction, sql: Mapping[str, str]) -> None:
        self._tx = tx
        self._sql = sql
        self._pending: list[_Pending] = []

    def add(self, run_id: str, event_type: str, payload: object, *,
            workflow_ref: str | None = None, runner_id: str | None = None) -> None:
        """Queue one event (checked now, so a bad payload fails before any write)."""
        if not event_type:
            raise ValueError("a run event needs a type")
        body = json_object({} if payload is None else payload, what="event payload",
                           max_bytes=PAYLOAD_MAX_BYTES)
        self._pending.append(_Pending(run_id, event_type, body, workflow_ref, runner_id))

    def flush(self, *, rows: bool = False) -> list[Row]:
        """Take the append-order lock and insert every queued event; with `rows`, their
        rows (a transaction's own events need none back: RETURNING cost SQLite ~8 µs
        per insert, four per run)."""
        if not self._pending:
            return []
        if self._sql["order_appends"]:
            self._tx.one(self._sql["order_appends"])
        now = self._tx.now_ms()
        sql = self._sql["append"] + (" RETURNING *" if rows else "")
        params = [{"now": now, "run_id": event.run_id, "workflow_ref": event.workflow_ref,
                   "type": event.event_type, "runner_id": event.runner_id,
                   "payload": event.body} for event in self._pending]
        self._pending.clear()
        written: list[Row] = []
        if not rows and len(params) == 1:
            self._tx.run(sql, params[0])
        elif not rows:  # one call for all (a batch's: one per launch), in order
            self._tx.many(sql, params)
        else:
            for one in params:
                row = self._tx.one(sql, one)
                assert row is not None
                written.append(row)
        return written


class RunEvents:
    """`RunEvents` over a connector."""

    def __init__(self, connector: Connector, overrides: Mapping[str, str] | None = None) -> None:
        self._connector = connector
        self._sql = named(SQL, overrides)

    @contextmanager
    def writing(self, *, durable: bool = True,
                shared_sync: bool = False) -> Iterator[tuple[Transaction, EventLog]]:
        """A write transaction whose queued events are appended last, before commit
        (`durable`, `shared_sync`: `Connector.write`)."""
        with self._connector.write(durable=durable, shared_sync=shared_sync) as tx:
            log = EventLog(tx, self._sql)
            yield tx, log
            log.flush()

    def append(self, run_id: str, event_type: str, payload: object = None, *,
               workflow_ref: str | None = None, runner_id: str | None = None) -> RunEvent:
        with self._connector.write() as tx:
            log = EventLog(tx, self._sql)
            log.add(run_id, event_type, payload, workflow_ref=workflow_ref,
                    runner_id=runner_id)
            (row,) = log.flush(rows=True)
        return event_from_row(row)

    def read(self, *, run_id: str | None = None, after_seq: int = 0,
             limit: int = 1000) -> list[RunEvent]:
        params = {"run_id": run_id, "after": after_seq, "limit": limit}
        with self._connector.read() as tx:
            rows = tx.all(self._sql["read_all" if run_id is None else "read_run"], params)
        return [event_from_row(row) for row in rows]

