"""`LaunchQueue.batch`'s add: launches queued in a caller's transaction, one at a
time or many in one multi-row statement (a webhook group commit's runs:
`TriggerLedger.fire_many`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import cache
from typing import Any, Protocol

from runner.store._connector import Transaction
from runner.store._ddl import row_params, values_rows
from runner.store._records import LaunchRecord, LostRace, NewLaunch
from runner.store.domain._launch_queries import (
    LAUNCH_CHANNEL,
    EventLog,
    launch_event,
    launch_from_row,
    launch_values,
)

Added = LaunchRecord | LostRace | ValueError  # what `batch`'s add made of a launch


class _Queue(Protocol):
    """What an Adder uses of its `LaunchQueue` (named structurally: the queue module
    imports this one)."""

    _sql: Mapping[str, str]

    def _insert(self, tx: Transaction, log: EventLog, launch: NewLaunch,
                values: dict[str, Any]) -> LaunchRecord | LostRace: ...


class Adder:
    """`LaunchQueue.batch`'s add: one launch, or many in one multi-row statement."""

    def __init__(self, queue: _Queue, tx: Transaction, log: EventLog) -> None:
        self._queue, self._tx, self._log = queue, tx, log

    def __call__(self, launch: NewLaunch) -> Added:
        try:
            values = launch_values(launch)
        except ValueError as exc:
            return exc
        return self._queue._insert(self._tx, self._log, launch, values)

    def many(self, launches: Sequence[NewLaunch]) -> list[Added]:
        """`add` for each, in order. The plain ones (no gate) are inserted by one
        statement that skips a conflicting row; a skipped one, and a gated one, take
        `add`'s own path, which names the conflict."""
        done: list[Added | None] = [None] * len(launches)
        plain: list[tuple[int, dict[str, Any]]] = []
        for n, launch in enumerate(launches):
            if launch.gate is not None:
                continue
            try:
                plain.append((n, launch_values(launch)))
            except ValueError as exc:
                done[n] = exc
        queue, tx = self._queue, self._tx
        for at in range(0, len(plain), MANY_ROWS):
            chunk = plain[at:at + MANY_ROWS]
            now = tx.now_ms()
            rows = tx.all(many_sql(queue._sql["insert"], len(chunk)),
                          row_params([{**values, "now": now} for _, values in chunk]))
            made = {row["run_id"]: row for row in rows}
            for n, values in chunk:
                row = made.pop(values["run_id"], None)  # a run id twice: the 2nd refused
                if row is None:
                    done[n] = queue._insert(tx, self._log, launches[n], values)
                    continue
                launch_event(self._log, row, None, "launch.queued")
                if launches[n].origin_session_id is None and tx.dialect.notices:
                    tx.notify(LAUNCH_CHANNEL, launches[n].run_id)
                done[n] = launch_from_row(row)
        return [self(launch) if d is None else d for launch, d in zip(launches, done,
                                                                     strict=True)]


#: The most launches one multi-row insert takes (Adder.many): well inside SQLite's
#: and Postgres's bounds on a statement's parameters.
MANY_ROWS = 100


@cache  # a few backends' inserts by up to MANY_ROWS rows
def many_sql(insert: str, rows: int) -> str:
    """The queue insert for `rows` launches at once; a row a unique index refuses
    is skipped (not returned), the rest kept."""
    return values_rows(insert, rows, on_conflict=" ON CONFLICT DO NOTHING")
