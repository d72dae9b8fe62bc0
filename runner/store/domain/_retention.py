"""Retention for `wfrun prune`: forgetting pruned runs and trimming the tables that grow.

`wfrun prune` removes old run bundles; this side removes the rows that belong to
them, and trims history that only grows (`run_events`, `controller_events`,
finished `effects` and `workflow_requests`). Nothing here deletes a row that
anything still acts on:

- a launch row that is not terminal (queued, starting, running, parked), or a run
  with an unresolved turn intent, an undelivered notification (session or channel)
  or a workflow request pointing at it, is *pinned*: its run is neither forgotten nor pruned;
- an effect or a workflow request is removed only once it is final and its
  resource no longer exists: while the resource lives, the stored record is what
  keeps the next reconcile from applying the effect (or starting the child) again.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping

from runner.store._connector import Connector, in_params
from runner.store._states import TERMINAL_STATUSES
from runner.store._trimming import Trimmed, cutoffs

# Old SQLite builds allow 999 parameters per statement; chunks stay under it.
_CHUNK = 500
_TERMINAL, _TERMINAL_PARAMS = in_params("terminal", TERMINAL_STATUSES)

#: Why a run is pinned, per check (`{ids}` is the chunk's `IN (...)`).
_PINS = (
    (f"SELECT run_id, status FROM workflow_run_queue WHERE run_id IN {{ids}}"
     f" AND status NOT IN {_TERMINAL}", "its launch is {status}"),
    ("SELECT run_id, '' AS status FROM workflow_turn_intents WHERE run_id IN {ids}"
     " AND resolved_at IS NULL", "a follow-up turn is pending"),
    ("SELECT run_id, '' AS status FROM workflow_notifications WHERE run_id IN {ids}"
     " AND delivered_at IS NULL", "a notification is undelivered"),
    ("SELECT run_id, '' AS status FROM workflow_requests WHERE run_id IN {ids}",
     "a controller's workflow request points at it"),
    ("SELECT run_id, '' AS status FROM notification_deliveries WHERE run_id IN {ids}"
     " AND status = 'pending'", "a channel notification is undelivered"),
)
_FORGET = (
    f"DELETE FROM workflow_run_queue WHERE run_id IN {{ids}} AND status IN {_TERMINAL}",
    "DELETE FROM workflow_turn_intents WHERE run_id IN {ids} AND resolved_at IS NOT NULL",
    "DELETE FROM workflow_notifications WHERE run_id IN {ids} AND delivered_at IS NOT NULL",
    "DELETE FROM notification_deliveries WHERE run_id IN {ids} AND status <> 'pending'",
    "DELETE FROM run_events WHERE run_id IN {ids}",
    # A pruned run's rerun links, either way (the rerun's bundle still says what it reran).
    "DELETE FROM workflow_reruns WHERE run_id IN {ids} OR rerun_of IN {ids}",
    # A forgotten run's flow-control gate (its start no longer counts for a rate).
    "DELETE FROM launch_gates WHERE run_id IN {ids} AND NOT EXISTS ("
    "SELECT 1 FROM workflow_run_queue q WHERE q.run_id = launch_gates.run_id)",
    "DELETE FROM fanout_items WHERE run_id IN {ids}",
    "DELETE FROM fanout_nodes WHERE run_id IN {ids}",
    "DELETE FROM fanout_logs WHERE run_id IN {ids}",
)
_TRIM = {
    "run_events": "DELETE FROM run_events WHERE recorded_at < :cut AND run_id NOT IN ("
    f"SELECT run_id FROM workflow_run_queue WHERE status NOT IN {_TERMINAL})",
    "controller_events": "DELETE FROM controller_events WHERE recorded_at < :cut",
    "effects": "DELETE FROM effects WHERE state IN ('applied', 'rejected')"
    " AND completed_at < :cut AND resource_uid NOT IN (SELECT uid FROM resources)",
    "workflow_requests": "DELETE FROM workflow_requests WHERE state IN ('succeeded', 'failed')"
    " AND updated_at < :cut AND resource_uid NOT IN (SELECT uid FROM resources)",
    # Settled firings whose run is gone (a slot older than its trigger's cursor never
    # fires again; a webhook delivery replayed after this long would start anew).
    "trigger_firings": "DELETE FROM trigger_firings WHERE outcome <> 'pending'"
    " AND updated_at < :cut AND (run_id IS NULL OR NOT EXISTS ("
    "SELECT 1 FROM workflow_run_queue q WHERE q.run_id = trigger_firings.run_id))",
}


def _chunks(items: Iterable[str]) -> Iterator[list[str]]:
    batch: list[str] = []
    for item in items:
        batch.append(item)
        if len(batch) == _CHUNK:
            yield batch
            batch = []
    if batch:
        yield batch


class Retention:
    """Row retention for `wfrun prune`; every deletion is one transaction."""

    def __init__(self, connector: Connector) -> None:
        self._connector = connector

    def pinned(self, run_ids: Iterable[str]) -> dict[str, str]:
        """Of `run_ids`, those something still points at, each with why."""
        out: dict[str, str] = {}
        for batch in _chunks(run_ids):
            ids, params = in_params("id", batch)
            with self._connector.read() as tx:
                for sql, why in _PINS:
                    for row in tx.all(sql.format(ids=ids), {**params, **_TERMINAL_PARAMS}):
                        out.setdefault(str(row["run_id"]), why.format(status=row["status"]))
        return out

    def forget_runs(self, run_ids: Iterable[str]) -> int:
        """Delete the terminal launch rows of `run_ids` with their resolved intents,
        delivered notifications and run events; pinned runs are left whole. Returns
        how many launch rows went."""
        ids = list(run_ids)
        pinned = self.pinned(ids)
        gone = 0
        for batch in _chunks(i for i in ids if i not in pinned):
            marks, params = in_params("id", batch)
            with self._connector.write() as tx:
                launches, *rest = (sql.format(ids=marks) for sql in _FORGET)
                gone += tx.run(launches, {**params, **_TERMINAL_PARAMS})
                for sql in rest:
                    tx.run(sql, params)
        return gone

    def trim(self, before_ms: int, *, tables: Mapping[str, int] | None = None) -> Trimmed:
        """Remove history recorded before `before_ms`: run events of runs whose launch
        is terminal or gone, controller events, and final effects and workflow
        requests of resources that no longer exist. `tables` gives a table its own
        cut-off (the project's `retention:` settings); the rest use `before_ms`."""
        cut = cutoffs(before_ms, tables)
        with self._connector.write() as tx:
            done = {table: tx.run(sql, {"cut": cut[table], **_TERMINAL_PARAMS})
                    for table, sql in _TRIM.items()}
        return Trimmed(done["run_events"], done["controller_events"], done["effects"],
                       done["workflow_requests"], done["trigger_firings"])
