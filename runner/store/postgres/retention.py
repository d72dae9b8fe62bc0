"""Retention on Postgres for `wfrun prune`: the same rules as on SQLite
(runner/store/sqlite/retention.py): a run something still points at is pinned and
kept whole; history is trimmed only where nothing acts on it any more."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from runner.store.postgres.db import PostgresDatabase
from runner.store.states import TERMINAL_STATUSES
from runner.store.trimming import Trimmed
from runner.store.trimming import cutoffs as _cutoffs

_TERMINAL = list(TERMINAL_STATUSES)


class PostgresRetention:
    """Row retention; every deletion is one transaction."""

    def __init__(self, db: PostgresDatabase) -> None:
        self._db = db

    def pinned(self, run_ids: Iterable[str]) -> dict[str, str]:
        ids = list(run_ids)
        if not ids:
            return {}
        checks = (
            ("SELECT run_id, status FROM workflow_run_queue WHERE run_id = ANY(%s)"
             " AND NOT (status = ANY(%s))", (ids, _TERMINAL), "its launch is {status}"),
            ("SELECT run_id, '' AS status FROM workflow_turn_intents WHERE run_id = ANY(%s)"
             " AND resolved_at IS NULL", (ids,), "a follow-up turn is pending"),
            ("SELECT run_id, '' AS status FROM workflow_notifications WHERE run_id = ANY(%s)"
             " AND delivered_at IS NULL", (ids,), "a notification is undelivered"),
            ("SELECT run_id, '' AS status FROM workflow_requests WHERE run_id = ANY(%s)",
             (ids,), "a controller's workflow request points at it"),
        )
        out: dict[str, str] = {}
        for sql, params, why in checks:
            for row in self._db.read(sql, params):
                out.setdefault(str(row["run_id"]), why.format(status=row["status"]))
        return out

    def forget_runs(self, run_ids: Iterable[str]) -> int:
        ids = list(run_ids)
        pinned = self.pinned(ids)
        free = [i for i in ids if i not in pinned]
        if not free:
            return 0
        with self._db.write() as conn:
            gone = conn.execute(
                "DELETE FROM workflow_run_queue WHERE run_id = ANY(%s) AND status = ANY(%s)",
                (free, _TERMINAL)).rowcount
            conn.execute("DELETE FROM workflow_turn_intents WHERE run_id = ANY(%s)"
                         " AND resolved_at IS NOT NULL", (free,))
            conn.execute("DELETE FROM workflow_notifications WHERE run_id = ANY(%s)"
                         " AND delivered_at IS NOT NULL", (free,))
            conn.execute("DELETE FROM run_events WHERE run_id = ANY(%s)", (free,))
        return gone

    def trim(self, before_ms: int, *,
             tables: Mapping[str, int] | None = None) -> Trimmed:
        cut = _cutoffs(before_ms, tables)
        with self._db.write() as conn:
            run_events = conn.execute(
                "DELETE FROM run_events WHERE recorded_at < %s AND run_id NOT IN ("
                "SELECT run_id FROM workflow_run_queue WHERE NOT (status = ANY(%s)))",
                (cut["run_events"], _TERMINAL)).rowcount
            controller_events = conn.execute(
                "DELETE FROM controller_events WHERE recorded_at < %s",
                (cut["controller_events"],)).rowcount
            effects = conn.execute(
                "DELETE FROM effects WHERE state IN ('applied', 'rejected')"
                " AND completed_at < %s AND resource_uid NOT IN (SELECT uid FROM resources)",
                (cut["effects"],)).rowcount
            requests = conn.execute(
                "DELETE FROM workflow_requests WHERE state IN ('succeeded', 'failed')"
                " AND updated_at < %s AND resource_uid NOT IN (SELECT uid FROM resources)",
                (cut["workflow_requests"],)).rowcount
        return Trimmed(run_events, controller_events, effects, requests)
