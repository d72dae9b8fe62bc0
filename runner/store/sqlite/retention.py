"""Retention on SQLite: forgetting pruned runs and trimming the tables that grow.

`wfrun prune` removes old run bundles; this side removes the rows that belong to
them, and trims history that only grows (`run_events`, `controller_events`,
finished `effects` and `workflow_requests`). Nothing here deletes a row that
anything still acts on:

- a launch row that is not terminal (queued, starting, running, parked), or a run
  with an unresolved turn intent, an undelivered notification or a workflow
  request pointing at it, is *pinned*: its run is neither forgotten nor pruned;
- an effect or a workflow request is removed only once it is final and its
  resource no longer exists: while the resource lives, the stored record is what
  keeps the next reconcile from applying the effect (or starting the child) again.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping

from runner.store.sqlite.db import SqliteDatabase
from runner.store.states import TERMINAL_STATUSES
from runner.store.trimming import Trimmed
from runner.store.trimming import cutoffs as _cutoffs

# SQLite's default limit on `?` parameters is 999 (older builds); chunks stay under it.
_CHUNK = 500


def _chunks(items: Iterable[str]) -> Iterator[list[str]]:
    batch: list[str] = []
    for item in items:
        batch.append(item)
        if len(batch) == _CHUNK:
            yield batch
            batch = []
    if batch:
        yield batch


def _marks(batch: list[str]) -> str:
    return ", ".join("?" for _ in batch)


class SqliteRetention:
    """Row retention for `wfrun prune`; every deletion is one transaction."""

    def __init__(self, db: SqliteDatabase, now_ms: Callable[[], int]) -> None:
        self._db = db
        self._now_ms = now_ms

    def pinned(self, run_ids: Iterable[str]) -> dict[str, str]:
        """Of `run_ids`, those something still points at, each with why."""
        terminal = _marks(list(TERMINAL_STATUSES))
        out: dict[str, str] = {}
        for batch in _chunks(run_ids):
            marks = _marks(batch)
            checks = (
                (f"SELECT run_id, status FROM workflow_run_queue WHERE run_id IN ({marks})"
                 f" AND status NOT IN ({terminal})", (*batch, *TERMINAL_STATUSES),
                 "its launch is {status}"),
                (f"SELECT run_id FROM workflow_turn_intents WHERE run_id IN ({marks})"
                 " AND resolved_at IS NULL", tuple(batch), "a follow-up turn is pending"),
                (f"SELECT run_id FROM workflow_notifications WHERE run_id IN ({marks})"
                 " AND delivered_at IS NULL", tuple(batch), "a notification is undelivered"),
                (f"SELECT run_id FROM workflow_requests WHERE run_id IN ({marks})",
                 tuple(batch), "a controller's workflow request points at it"),
            )
            for sql, params, why in checks:
                for row in self._db.read(sql, params):
                    keys = row.keys()
                    status = row["status"] if "status" in keys else ""
                    out.setdefault(str(row["run_id"]), why.format(status=status))
        return out

    def forget_runs(self, run_ids: Iterable[str]) -> int:
        """Delete the terminal launch rows of `run_ids` with their resolved intents,
        delivered notifications and run events; pinned runs are left whole. Returns
        how many launch rows went."""
        ids = list(run_ids)
        pinned = self.pinned(ids)
        gone = 0
        for batch in _chunks(i for i in ids if i not in pinned):
            marks = _marks(batch)
            with self._db.write() as conn:
                gone += conn.execute(
                    f"DELETE FROM workflow_run_queue WHERE run_id IN ({marks})"
                    f" AND status IN ({_marks(list(TERMINAL_STATUSES))})",
                    (*batch, *TERMINAL_STATUSES)).rowcount
                conn.execute(f"DELETE FROM workflow_turn_intents WHERE run_id IN ({marks})"
                             " AND resolved_at IS NOT NULL", batch)
                conn.execute(f"DELETE FROM workflow_notifications WHERE run_id IN ({marks})"
                             " AND delivered_at IS NOT NULL", batch)
                conn.execute(f"DELETE FROM run_events WHERE run_id IN ({marks})", batch)
        return gone

    def trim(self, before_ms: int, *,
             tables: Mapping[str, int] | None = None) -> Trimmed:
        """Remove history recorded before `before_ms`: run events of runs whose launch
        is terminal or gone, controller events, and final effects and workflow
        requests of resources that no longer exist. `tables` gives a table its own
        cut-off (the project's `retention:` settings); the rest use `before_ms`."""
        cut = _cutoffs(before_ms, tables)
        terminal = _marks(list(TERMINAL_STATUSES))
        with self._db.write() as conn:
            run_events = conn.execute(
                "DELETE FROM run_events WHERE recorded_at < ? AND run_id NOT IN ("
                f"SELECT run_id FROM workflow_run_queue WHERE status NOT IN ({terminal}))",
                (cut["run_events"], *TERMINAL_STATUSES)).rowcount
            controller_events = conn.execute(
                "DELETE FROM controller_events WHERE recorded_at < ?",
                (cut["controller_events"],)).rowcount
            effects = conn.execute(
                "DELETE FROM effects WHERE state IN ('applied', 'rejected')"
                " AND completed_at < ? AND resource_uid NOT IN (SELECT uid FROM resources)",
                (cut["effects"],)).rowcount
            requests = conn.execute(
                "DELETE FROM workflow_requests WHERE state IN ('succeeded', 'failed')"
                " AND updated_at < ? AND resource_uid NOT IN (SELECT uid FROM resources)",
                (cut["workflow_requests"],)).rowcount
        return Trimmed(run_events, controller_events, effects, requests)
