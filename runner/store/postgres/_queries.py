"""The named statements Postgres writes differently from the portable ones
(runner/store/domain/): only where the SQL really differs."""

from __future__ import annotations

from collections.abc import Mapping

#: The launch side's overrides, per domain module (`domain.launch_side.LaunchSide`).
LAUNCH_SIDE: Mapping[str, Mapping[str, str]] = {
    # Text order follows the database's collation, so a prefix is not a key range.
    "pages": {"prefix": "starts_with(run_id, :prefix)"},
    # Appends take turns until commit so `seq` order is commit order (domain/_launch_queries.py):
    # one transaction-scoped advisory lock per schema.
    "events": {"order_appends":
               "SELECT pg_advisory_xact_lock(hashtext(current_schema() || '.run_events'))"},
    # A launch queued in one statement, one round trip (was nine: BEGIN, the clock, a
    # savepoint and its release, the insert, the append lock, the event, the notice,
    # COMMIT): the row, then, once it is in (a unique index may make the insert wait
    # for another writer, who may hold the append lock: so the lock comes after),
    # the append-order lock (domain/_launch_queries.py), the notice of a detached launch and
    # its `launch.queued` event. The main query reads `q` first; `e` (data-modifying)
    # runs at the end, pulling `turn`, whose volatile calls keep it a real step.
    "launches": {"enqueue_one":
                 "WITH q AS (INSERT INTO workflow_run_queue (run_id, workflow_ref,"
                 " workflow_path, workflow_source_json, definition_digest, input_json,"
                 " launch_options_json, status, affinity_runner_id, origin_session_id,"
                 " parent_run_id, created_at, updated_at) VALUES (:run_id, :workflow_ref,"
                 " :workflow_path, :source, :digest, :input, :options, 'queued', :affinity,"
                 " :origin, :parent, {now}, {now}) RETURNING *),"
                 " turn AS (SELECT pg_advisory_xact_lock(hashtext(current_schema()"
                 " || '.run_events')) AS locked, CASE WHEN q.origin_session_id IS NULL"
                 " THEN pg_notify(:channel || '_' || current_schema(), q.run_id) END"
                 " AS noticed FROM q),"
                 " e AS (INSERT INTO run_events (recorded_at, run_id, workflow_ref, type,"
                 " runner_id, payload_json) SELECT q.created_at, q.run_id, q.workflow_ref,"
                 " 'launch.queued', q.runner_id, :payload FROM q, turn)"
                 " SELECT * FROM q"},
    # Every Postgres open creates the tables added within v1: the audit trail is there.
    "audit": {"has_table": "SELECT 1 AS n"},
}
