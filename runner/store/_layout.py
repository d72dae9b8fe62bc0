"""The backend-neutral layout contract: schema id, table names and their columns.

Table and column names are part of the contract (DESIGN §5): every backend
creates exactly these tables with exactly these columns, in this order, and
refuses to open a store whose layout differs. There are no migrations beyond what
v1 added (ADDED_*) and cut (RETIRED_INDEXES, ROWID_DROPPED) within itself: a store
with another layout is reset (after keeping the run bundles that matter).
"""

from __future__ import annotations

from collections.abc import Mapping

SCHEMA_ID = "wfrun.controller-store.v1"
#: Indexes added to v1 after stores were made without them. Nothing about the data
#: changes, so opening a store for writing creates a missing one (inside the open's
#: transaction) instead of refusing the store, and a read-only open does without it.
ADDED_INDEXES: frozenset[str] = frozenset({"workflow_run_queue_ready",
                                           "workflow_run_queue_ready_affinity",
                                           "workflow_run_queue_ended",
                                           "fanout_items_running"})
#: Indexes v1 had and no longer makes: a store that has one still opens (a read-only
#: open reads past it) and opening it for writing drops it. `fanout_items_holder`
#: (running items by claim token) cost every item's claim and settle a page; a host
#: renews its item leases by their keys instead (domain/_fanout.py renew_held).
RETIRED_INDEXES: frozenset[str] = frozenset({"fanout_items_holder"})
#: Tables v1 made as rowid tables and now makes WITHOUT ROWID (SQLite only; nothing
#: about the columns or the data changes): a store with the rowid form opens, and
#: opening it for writing rebuilds the table in the open's transaction.
ROWID_DROPPED: frozenset[str] = frozenset({"fanout_logs"})
#: Tables added to v1 after stores were made without them: new tables only, never a
#: column of an existing one. Opening a store for writing creates a missing one (as
#: it does an added index); a read-only open reads it as empty.
ADDED_TABLES: frozenset[str] = frozenset({"workflow_reruns", "step_cache", "audit_log",
                                          "notification_deliveries", "trigger_firings",
                                          "launch_gates", "trigger_states",
                                          "fanout_items", "fanout_nodes",
                                          "fanout_logs"})

TABLE_COLUMNS: Mapping[str, tuple[str, ...]] = {
    "schema_info": ("singleton", "schema_id", "created_at"),
    "workflow_run_queue": (
        "run_id",
        "workflow_ref",
        "workflow_path",
        "workflow_source_json",
        "definition_digest",
        "input_json",
        "launch_options_json",
        "status",
        "runner_id",
        "claim_token",
        "claim_expires_at",
        "epoch",
        "affinity_runner_id",
        "origin_session_id",
        "parent_run_id",
        "error_code",
        "error_message",
        "created_at",
        "updated_at",
        "started_at",
        "finished_at",
        "park_mode",
        "crash_count",
        "ending",
    ),
    "workflow_turn_intents": (
        "intent_id",
        "source_event_id",
        "run_id",
        "workflow_ref",
        "target_session_id",
        "cause",
        "node_id",
        "attempt_id",
        "fallback_facts_json",
        "requested_at",
        "eligible_at",
        "resolved_at",
        "resolution",
        "resolution_message_id",
        "delivery_claim_token",
        "delivery_claim_expires_at",
    ),
    "workflow_notifications": (
        "notification_id",
        "run_id",
        "node_id",
        "attempt_id",
        "notification_index",
        "target_session_id",
        "kind",
        "content",
        "created_at",
        "delivery_claim_token",
        "delivery_claim_expires_at",
        "delivered_at",
    ),
    "run_events": (
        "seq",
        "recorded_at",
        "run_id",
        "workflow_ref",
        "type",
        "runner_id",
        "payload_json",
    ),
    "resources": (
        "controller",
        "resource_key",
        "uid",
        "resource_version",
        "generation",
        "spec_json",
        "status_json",
        "deletion_timestamp",
        "finalizers_json",
        "created_at",
        "updated_at",
    ),
    "reconcile_queue": (
        "controller",
        "resource_key",
        "available_at",
        "dirty",
        "claim_token",
        "claim_expires_at",
        "epoch",
        "runner_id",
        "consecutive_errors",
        "last_error",
    ),
    "effects": (
        "resource_uid",
        "effect_key",
        "generation",
        "kind",
        "state",
        "request_fingerprint",
        "started_at",
        "completed_at",
        "external_ref",
        "error",
    ),
    "workflow_requests": (
        "request_id",
        "resource_uid",
        "request_key",
        "input_fingerprint",
        "workflow",
        "run_id",
        "state",
        "attempt",
        "error",
        "created_at",
        "updated_at",
    ),
    "controller_events": (
        "seq",
        "recorded_at",
        "controller",
        "resource_key",
        "type",
        "reconcile_id",
        "payload_json",
    ),
    # Issue 39: a rerun's link to the run it reran (`wfrun rerun`), both ways.
    "workflow_reruns": (
        "run_id",
        "rerun_of",
        "from_node",
        "forced",
        "changed_nodes_json",
        "created_at",
    ),
    # Issue 39: a node's ok result kept for reuse (`cache:`), with the run that made it.
    "step_cache": (
        "cache_key",
        "workflow",
        "node_id",
        "run_id",
        "output_json",
        "created_at",
        "expires_at",
    ),
    "audit_log": (
        "seq",
        "recorded_at",
        "actor",
        "action",
        "run_id",
        "workflow_ref",
        "origin",
        "outcome",
        "detail_json",
    ),
    "notification_deliveries": (
        "notification_id",
        "channel",
        "run_id",
        "node_id",
        "kind",
        "message",
        "status",
        "attempts",
        "next_attempt_at",
        "last_error",
        "claim_token",
        "claim_expires_at",
        "created_at",
        "delivered_at",
    ),
    "trigger_firings": (
        "workflow",
        "trigger_name",
        "firing_key",
        "slot_at",
        "outcome",
        "run_id",
        "reason",
        "event_json",
        "created_at",
        "updated_at",
    ),
    "launch_gates": (
        "run_id",
        "concurrency_key",
        "concurrency_limit",
        "strategy",
        "rate_key",
        "rate_limit",
        "rate_per_ms",
        "started_at",
    ),
    "trigger_states": (
        "workflow",
        "trigger_name",
        "paused",
        "cursor_at",
        "updated_at",
    ),
    "fanout_items": (
        "run_id",
        "node_id",
        "visit",
        "item_index",
        "state",
        "claim_token",
        "starts",
        "child_run_id",
        "output_json",
        "error_json",
        "created_at",
        "updated_at",
        "finished_at",
    ),
    "fanout_nodes": (
        "run_id",
        "node_id",
        "visit",
        "max_concurrency",
        "lease_ms",
        "fail_fast",
        "active",
        "waiting",
        "refused",
        "created_at",
    ),
    "fanout_logs": (
        "run_id",
        "node_id",
        "visit",
        "item_index",
        "seq",
        "attempt",
        "log_json",
        "created_at",
    ),
}

TABLES: tuple[str, ...] = tuple(TABLE_COLUMNS)


def describe_column_drift(
    table: str, expected: tuple[str, ...], actual: tuple[str, ...]
) -> str | None:
    """One phrase naming how a table's columns differ, or None when they match."""
    if expected == actual:
        return None
    missing = [c for c in expected if c not in actual]
    extra = [c for c in actual if c not in expected]
    parts = []
    if missing:
        parts.append("missing column(s) " + ", ".join(missing))
    if extra:
        parts.append("unexpected column(s) " + ", ".join(extra))
    if not parts:
        parts.append("columns in a different order")
    return f"table {table}: " + "; ".join(parts)


def describe_table_drift(expected: tuple[str, ...], actual: tuple[str, ...]) -> str | None:
    """One phrase naming missing and unexpected tables, or None when they match."""
    missing = [t for t in expected if t not in actual]
    extra = sorted(t for t in actual if t not in expected)
    parts = []
    if missing:
        parts.append("missing table(s) " + ", ".join(missing))
    if extra:
        parts.append("unexpected table(s) " + ", ".join(extra))
    return "; ".join(parts) or None
