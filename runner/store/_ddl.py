"""The store's tables, written once: `wfrun.controller-store.v1`'s DDL.

In SQLite's dialect (the embedded default, and the exact-layout check's reference);
`postgres/_schema.py` rewrites it mechanically (BIGINT, identity columns,
octet_length). The CHECK constraints carry the state contract (`states.py`) and the
partial unique indexes the reservation rules.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

from runner.store._records import CACHE_MAX_BYTES
from runner.store._states import (
    AUDIT_ACTIONS,
    AUDIT_DETAIL_MAX_BYTES,
    AUDIT_OUTCOMES,
    CLAIMED_STATUSES,
    CONTROLLER_ERROR_MAX_BYTES,
    DELIVERY_MESSAGE_MAX_BYTES,
    DELIVERY_STATUSES,
    EFFECT_STATES,
    ERROR_MESSAGE_MAX_BYTES,
    EVENT_MAX_BYTES,
    FIRING_OUTCOMES,
    INPUT_STATUSES,
    ITEM_OPEN_STATES,
    ITEM_STATES,
    LAUNCH_ENDINGS,
    LAUNCH_ERROR_CODES,
    LAUNCH_STATUSES,
    NOTIFICATION_KINDS,
    PARK_MODES,
    READY_STATUSES,
    RESERVING_STATUSES,
    SPEC_MAX_BYTES,
    STATUS_MAX_BYTES,
    TERMINAL_STATUSES,
    TURN_CAUSES,
    TURN_RESOLUTIONS,
    WORKFLOW_REQUEST_STATES,
)


def index_ddl(name: str) -> str:
    """The DDL statement that creates index `name`."""
    for statement in DDL:
        if re.match(rf"CREATE (UNIQUE )?INDEX {name}\b", statement):
            return statement
    raise KeyError(name)


def table_ddl(name: str) -> str:
    """The DDL statement that creates table `name`."""
    for statement in DDL:
        if re.match(rf"CREATE TABLE {name}\b", statement):
            return statement
    raise KeyError(name)


def indexes_of(table: str) -> list[str]:
    """The DDL statements of `table`'s indexes (made with a table added within v1)."""
    return [s for s in DDL if re.match(rf"CREATE (UNIQUE )?INDEX \w+\s+ON {table}\b", s)]


_PARAM = re.compile(r"(?<!:):([A-Za-z_]\w*)")


def values_rows(sql: str, rows: int, *, on_conflict: str = "") -> str:
    """A one-row `INSERT ... VALUES (:a, :b) [RETURNING ...]` made one statement for
    `rows` rows: the first row's parameters keep their names, row n's after it are
    named `a_n`, `b_n` (`row_params`), and `on_conflict` goes before the RETURNING.
    One statement for a batch: one call into SQLite (each releases and retakes the
    GIL) or one round trip to Postgres."""
    head, sep, tail = sql.partition(" VALUES (")
    row, close, returning = tail.rpartition(")")
    if not sep or not close:
        raise ValueError(f"not a one-row INSERT ... VALUES (...): {sql[:60]}")
    values = ", ".join("(" + (_PARAM.sub(rf":\1_{n}", row) if n else row) + ")"
                       for n in range(rows))
    return f"{head} VALUES {values}{on_conflict}{returning}"


def row_params(rows: Sequence[dict[str, object]]) -> dict[str, object]:
    """The parameters of `values_rows`: the first row's as they are, row n's `a` as
    `a_n` (a batch of one, the most common, is passed as it is)."""
    if len(rows) == 1:
        return rows[0]
    params = dict(rows[0]) if rows else {}
    params.update({f"{k}_{n}": v for n, row in enumerate(rows) if n for k, v in row.items()})
    return params


def sql_in(values: Iterable[str]) -> str:
    """`('a', 'b')` for a fixed set of contract words (never user input)."""
    words = list(values)
    for word in words:
        if not re.fullmatch(r"[a-z_]+", word):
            raise ValueError(f"not a contract word: {word!r}")
    return "(" + ", ".join(f"'{w}'" for w in words) + ")"


DDL: tuple[str, ...] = (
    """CREATE TABLE schema_info (
    singleton INTEGER PRIMARY KEY CHECK (singleton = 1),
    schema_id TEXT NOT NULL,
    created_at INTEGER NOT NULL
)""",
    f"""CREATE TABLE workflow_run_queue (
    run_id TEXT PRIMARY KEY,
    workflow_ref TEXT NOT NULL,
    workflow_path TEXT,
    workflow_source_json TEXT NOT NULL,
    definition_digest TEXT NOT NULL,
    input_json TEXT,
    launch_options_json TEXT,
    status TEXT NOT NULL CHECK (status IN {sql_in(LAUNCH_STATUSES)}),
    runner_id TEXT,
    claim_token TEXT,
    claim_expires_at INTEGER,
    epoch INTEGER NOT NULL DEFAULT 0 CHECK (epoch >= 0),
    affinity_runner_id TEXT,
    origin_session_id TEXT,
    parent_run_id TEXT CHECK (parent_run_id IS NULL OR parent_run_id <> run_id),
    error_code TEXT CHECK (error_code IS NULL OR error_code IN {sql_in(LAUNCH_ERROR_CODES)}),
    error_message TEXT CHECK (
        error_message IS NULL
        OR length(CAST(error_message AS BLOB)) <= {ERROR_MESSAGE_MAX_BYTES}),
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL,
    started_at INTEGER,
    finished_at INTEGER,
    park_mode TEXT CHECK (park_mode IS NULL OR park_mode IN {sql_in(PARK_MODES)}),
    crash_count INTEGER NOT NULL DEFAULT 0 CHECK (crash_count >= 0),
    ending TEXT CHECK (ending IS NULL OR ending IN {sql_in(LAUNCH_ENDINGS)}),
    CHECK ((status = 'parked') = (park_mode IS NOT NULL)),
    CHECK ((status = 'done') = (ending IS NOT NULL)),
    CHECK ((status IN {sql_in(CLAIMED_STATUSES)}) = (claim_token IS NOT NULL)),
    CHECK ((claim_token IS NULL) = (claim_expires_at IS NULL)),
    CHECK ((status = 'failed') = (error_code IS NOT NULL)),
    CHECK ((error_code IS NULL) = (error_message IS NULL)),
    CHECK (status IN {sql_in(INPUT_STATUSES)}
           OR (input_json IS NULL AND launch_options_json IS NULL)),
    CHECK ((status IN {sql_in(TERMINAL_STATUSES)}) = (finished_at IS NOT NULL))
)""",
    """CREATE INDEX workflow_run_queue_claimable
    ON workflow_run_queue (status, claim_expires_at)""",
    # The claim's order (oldest first) over the launches not yet ended: a claim reads
    # the first claimable entry instead of sorting every queued launch (a backlog of
    # 3,000 cost 1.2 ms per claim). Added within v1 (layout.ADDED_INDEXES).
    f"""CREATE INDEX workflow_run_queue_ready
    ON workflow_run_queue (created_at, run_id)
    WHERE status IN {sql_in(READY_STATUSES)}""",
    f"""CREATE INDEX workflow_run_queue_ready_affinity
    ON workflow_run_queue (affinity_runner_id, created_at, run_id)
    WHERE affinity_runner_id IS NOT NULL AND status IN {sql_in(READY_STATUSES)}""",
    # The run list's order (newest first) over the runs that completed or wait at a
    # checkpoint (`done` rows, by ending): a page reads its rows' entries instead of
    # sorting every finished run (domain/_pages.py). One entry per run, made by the
    # transaction that finishes it; no other write touches these columns, so the
    # claim and `running` updates never maintain it. Added within v1.
    """CREATE INDEX workflow_run_queue_ended
    ON workflow_run_queue (ending, created_at, run_id)
    WHERE ending IS NOT NULL""",
    f"""CREATE UNIQUE INDEX workflow_run_queue_session_reservation
    ON workflow_run_queue (origin_session_id)
    WHERE origin_session_id IS NOT NULL AND status IN {sql_in(RESERVING_STATUSES)}""",
    """CREATE UNIQUE INDEX workflow_run_queue_parent
    ON workflow_run_queue (parent_run_id)
    WHERE parent_run_id IS NOT NULL
      AND NOT (status IN ('failed', 'cancelled') AND started_at IS NULL)""",
    f"""CREATE TABLE workflow_turn_intents (
    intent_id TEXT PRIMARY KEY,
    source_event_id TEXT NOT NULL,
    run_id TEXT NOT NULL,
    workflow_ref TEXT NOT NULL,
    target_session_id TEXT NOT NULL,
    cause TEXT NOT NULL CHECK (cause IN {sql_in(TURN_CAUSES)}),
    node_id TEXT,
    attempt_id TEXT,
    fallback_facts_json TEXT NOT NULL,
    requested_at INTEGER NOT NULL,
    eligible_at INTEGER,
    resolved_at INTEGER,
    resolution TEXT CHECK (resolution IS NULL OR resolution IN {sql_in(TURN_RESOLUTIONS)}),
    resolution_message_id TEXT,
    delivery_claim_token TEXT,
    delivery_claim_expires_at INTEGER,
    CHECK ((resolved_at IS NULL) = (resolution IS NULL)
           AND (resolved_at IS NULL) = (resolution_message_id IS NULL)),
    CHECK ((delivery_claim_token IS NULL) = (delivery_claim_expires_at IS NULL)),
    CHECK (resolved_at IS NULL OR eligible_at IS NOT NULL)
)""",
    """CREATE UNIQUE INDEX workflow_turn_intents_one_pending
    ON workflow_turn_intents (run_id, target_session_id)
    WHERE resolved_at IS NULL""",
    """CREATE INDEX workflow_turn_intents_eligible
    ON workflow_turn_intents (target_session_id, eligible_at, intent_id)
    WHERE resolved_at IS NULL AND eligible_at IS NOT NULL""",
    f"""CREATE TABLE workflow_notifications (
    notification_id TEXT PRIMARY KEY,
    run_id TEXT NOT NULL,
    node_id TEXT NOT NULL,
    attempt_id TEXT NOT NULL,
    notification_index INTEGER NOT NULL CHECK (notification_index > 0),
    target_session_id TEXT NOT NULL,
    kind TEXT NOT NULL CHECK (kind IN {sql_in(NOTIFICATION_KINDS)}),
    content TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    delivery_claim_token TEXT,
    delivery_claim_expires_at INTEGER,
    delivered_at INTEGER,
    UNIQUE (run_id, node_id, notification_index),
    CHECK ((delivery_claim_token IS NULL) = (delivery_claim_expires_at IS NULL))
)""",
    """CREATE INDEX workflow_notifications_pending
    ON workflow_notifications (target_session_id, created_at, notification_id)
    WHERE delivered_at IS NULL""",
    """CREATE TABLE run_events (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    recorded_at INTEGER NOT NULL,
    run_id TEXT NOT NULL,
    workflow_ref TEXT,
    type TEXT NOT NULL,
    runner_id TEXT,
    payload_json TEXT NOT NULL
)""",
    """CREATE INDEX run_events_by_run ON run_events (run_id, seq)""",
    f"""CREATE TABLE resources (
    controller TEXT NOT NULL,
    resource_key TEXT NOT NULL,
    uid TEXT NOT NULL UNIQUE,
    resource_version INTEGER NOT NULL CHECK (resource_version > 0),
    generation INTEGER NOT NULL CHECK (generation > 0),
    spec_json TEXT NOT NULL CHECK (length(CAST(spec_json AS BLOB)) <= {SPEC_MAX_BYTES}),
    status_json TEXT NOT NULL CHECK (length(CAST(status_json AS BLOB)) <= {STATUS_MAX_BYTES}),
    deletion_timestamp INTEGER,
    finalizers_json TEXT NOT NULL DEFAULT '[]',
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL,
    PRIMARY KEY (controller, resource_key)
)""",
    f"""CREATE TABLE reconcile_queue (
    controller TEXT NOT NULL,
    resource_key TEXT NOT NULL,
    available_at INTEGER NOT NULL,
    dirty INTEGER NOT NULL DEFAULT 0 CHECK (dirty IN (0, 1)),
    claim_token TEXT,
    claim_expires_at INTEGER,
    epoch INTEGER NOT NULL DEFAULT 0 CHECK (epoch >= 0),
    runner_id TEXT,
    consecutive_errors INTEGER NOT NULL DEFAULT 0 CHECK (consecutive_errors >= 0),
    last_error TEXT CHECK (
        last_error IS NULL OR length(CAST(last_error AS BLOB)) <= {CONTROLLER_ERROR_MAX_BYTES}),
    PRIMARY KEY (controller, resource_key),
    CHECK ((claim_token IS NULL) = (claim_expires_at IS NULL)
           AND (claim_token IS NULL) = (runner_id IS NULL)),
    CHECK (dirty = 0 OR claim_token IS NOT NULL)
) WITHOUT ROWID""",
    """CREATE INDEX reconcile_queue_ready
    ON reconcile_queue (available_at, controller, resource_key)""",
    f"""CREATE TABLE effects (
    resource_uid TEXT NOT NULL,
    effect_key TEXT NOT NULL,
    generation INTEGER NOT NULL CHECK (generation > 0),
    kind TEXT NOT NULL,
    state TEXT NOT NULL CHECK (state IN {sql_in(EFFECT_STATES)}),
    request_fingerprint TEXT NOT NULL,
    started_at INTEGER NOT NULL,
    completed_at INTEGER,
    external_ref TEXT,
    error TEXT CHECK (error IS NULL OR length(CAST(error AS BLOB)) <= {CONTROLLER_ERROR_MAX_BYTES}),
    PRIMARY KEY (resource_uid, effect_key),
    CHECK ((state = 'pending') = (completed_at IS NULL))
)""",
    f"""CREATE TABLE workflow_requests (
    request_id TEXT PRIMARY KEY,
    resource_uid TEXT NOT NULL,
    request_key TEXT NOT NULL,
    input_fingerprint TEXT NOT NULL,
    workflow TEXT NOT NULL,
    run_id TEXT,
    state TEXT NOT NULL CHECK (state IN {sql_in(WORKFLOW_REQUEST_STATES)}),
    attempt INTEGER NOT NULL CHECK (attempt >= 0),
    error TEXT CHECK (error IS NULL OR length(CAST(error AS BLOB)) <= {CONTROLLER_ERROR_MAX_BYTES}),
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL,
    UNIQUE (resource_uid, request_key),
    CHECK ((run_id IS NULL) = (attempt = 0)),
    CHECK (state <> 'pending' OR attempt = 0),
    CHECK (state NOT IN ('running', 'waiting') OR attempt > 0)
)""",
    """CREATE UNIQUE INDEX workflow_requests_by_run
    ON workflow_requests (run_id) WHERE run_id IS NOT NULL""",
    """CREATE TABLE controller_events (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    recorded_at INTEGER NOT NULL,
    controller TEXT NOT NULL,
    resource_key TEXT NOT NULL,
    type TEXT NOT NULL,
    reconcile_id TEXT,
    payload_json TEXT NOT NULL
)""",
    """CREATE INDEX controller_events_by_resource
    ON controller_events (controller, resource_key, seq DESC)""",
    # One row per rerun, written before its launch is queued (a rerun whose launch
    # never committed has no launch row, and readers join on one).
    """CREATE TABLE workflow_reruns (
    run_id TEXT PRIMARY KEY,
    rerun_of TEXT NOT NULL CHECK (rerun_of <> run_id),
    from_node TEXT NOT NULL,
    forced INTEGER NOT NULL CHECK (forced IN (0, 1)),
    changed_nodes_json TEXT NOT NULL,
    created_at INTEGER NOT NULL
)""",
    """CREATE INDEX workflow_reruns_of ON workflow_reruns (rerun_of, created_at)""",
    f"""CREATE TABLE step_cache (
    cache_key TEXT PRIMARY KEY,
    workflow TEXT NOT NULL,
    node_id TEXT NOT NULL,
    run_id TEXT NOT NULL,
    output_json TEXT NOT NULL CHECK (length(CAST(output_json AS BLOB)) <= {CACHE_MAX_BYTES}),
    created_at INTEGER NOT NULL,
    expires_at INTEGER NOT NULL
)""",
    """CREATE INDEX step_cache_by_node ON step_cache (workflow, node_id, created_at)""",
    # Who did what through the HTTP API (`wfrun audit`); added within v1
    # (layout.ADDED_TABLES), so it has no index of its own beyond seq.
    f"""CREATE TABLE audit_log (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    recorded_at INTEGER NOT NULL,
    actor TEXT NOT NULL,
    action TEXT NOT NULL CHECK (action IN {sql_in(AUDIT_ACTIONS)}),
    run_id TEXT,
    workflow_ref TEXT,
    origin TEXT,
    outcome TEXT NOT NULL CHECK (outcome IN {sql_in(AUDIT_OUTCOMES)}),
    detail_json TEXT NOT NULL CHECK (length(CAST(detail_json AS BLOB)) <= {AUDIT_DETAIL_MAX_BYTES})
)""",
    # The channel outbox: one row per (notification, channel), so a `notify` node run
    # again after a crash (same notification id) adds nothing; delivered rows are
    # never sent again. Added within v1 (layout.ADDED_TABLES).
    f"""CREATE TABLE notification_deliveries (
    notification_id TEXT NOT NULL,
    channel TEXT NOT NULL,
    run_id TEXT NOT NULL,
    node_id TEXT NOT NULL,
    kind TEXT NOT NULL CHECK (kind IN {sql_in(NOTIFICATION_KINDS)}),
    message TEXT NOT NULL CHECK (length(CAST(message AS BLOB)) <= {DELIVERY_MESSAGE_MAX_BYTES}),
    status TEXT NOT NULL CHECK (status IN {sql_in(DELIVERY_STATUSES)}),
    attempts INTEGER NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    next_attempt_at INTEGER NOT NULL,
    last_error TEXT,
    claim_token TEXT,
    claim_expires_at INTEGER,
    created_at INTEGER NOT NULL,
    delivered_at INTEGER,
    PRIMARY KEY (notification_id, channel),
    CHECK ((status = 'delivered') = (delivered_at IS NOT NULL)),
    CHECK ((claim_token IS NULL) = (claim_expires_at IS NULL))
)""",
    """CREATE INDEX notification_deliveries_due
    ON notification_deliveries (status, next_attempt_at)""",
    # Triggers (DESIGN §10): one row per firing; the primary key is the idempotency key
    # (workflow, trigger, slot | delivery | file batch), so every host that sees a slot
    # tries the same insert and exactly one wins. Added within v1 (layout.ADDED_TABLES).
    f"""CREATE TABLE trigger_firings (
    workflow TEXT NOT NULL,
    trigger_name TEXT NOT NULL,
    firing_key TEXT NOT NULL,
    slot_at INTEGER,
    outcome TEXT NOT NULL CHECK (outcome IN {sql_in(FIRING_OUTCOMES)}),
    run_id TEXT,
    reason TEXT CHECK (reason IS NULL
        OR length(CAST(reason AS BLOB)) <= {CONTROLLER_ERROR_MAX_BYTES}),
    event_json TEXT CHECK (event_json IS NULL
        OR length(CAST(event_json AS BLOB)) <= {EVENT_MAX_BYTES}),
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL,
    PRIMARY KEY (workflow, trigger_name, firing_key)
)""",
    """CREATE INDEX trigger_firings_by_slot
    ON trigger_firings (workflow, trigger_name, slot_at)""",
    """CREATE INDEX trigger_firings_pending
    ON trigger_firings (workflow, trigger_name, slot_at) WHERE outcome = 'pending'""",
    """CREATE UNIQUE INDEX trigger_firings_by_run
    ON trigger_firings (run_id) WHERE run_id IS NOT NULL""",
    # Flow control (DESIGN §10): a launch's concurrency key and rate key, rendered when
    # it was queued; the claim skips a launch whose gate is shut (launch_queries.py).
    """CREATE TABLE launch_gates (
    run_id TEXT PRIMARY KEY,
    concurrency_key TEXT,
    concurrency_limit INTEGER CHECK (concurrency_limit IS NULL OR concurrency_limit > 0),
    strategy TEXT,
    rate_key TEXT,
    rate_limit INTEGER CHECK (rate_limit IS NULL OR rate_limit > 0),
    rate_per_ms INTEGER CHECK (rate_per_ms IS NULL OR rate_per_ms > 0),
    started_at INTEGER,
    CHECK ((concurrency_key IS NULL) = (concurrency_limit IS NULL)),
    CHECK ((rate_key IS NULL) = (rate_limit IS NULL) AND (rate_key IS NULL) = (rate_per_ms IS NULL))
)""",
    """CREATE INDEX launch_gates_by_concurrency
    ON launch_gates (concurrency_key) WHERE concurrency_key IS NOT NULL""",
    """CREATE INDEX launch_gates_by_rate
    ON launch_gates (rate_key, started_at) WHERE rate_key IS NOT NULL""",
    # Per trigger: paused or not, and the slot time up to which it was evaluated (the
    # catch-up after an outage starts there).
    """CREATE TABLE trigger_states (
    workflow TEXT NOT NULL,
    trigger_name TEXT NOT NULL,
    paused INTEGER NOT NULL CHECK (paused IN (0, 1)),
    cursor_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL,
    PRIMARY KEY (workflow, trigger_name)
)""",
    # Fan-out branches and items (ADR 0008), one row per (run, node, visit, index).
    # Added within v1 (layout.ADDED_TABLES). `claim_token` is the claim of the parent's
    # launch that runs the item; `starts` counts its starts (a third is refused).
    f"""CREATE TABLE fanout_items (
    run_id TEXT NOT NULL,
    node_id TEXT NOT NULL,
    visit INTEGER NOT NULL CHECK (visit > 0),
    item_index INTEGER NOT NULL CHECK (item_index >= 0),
    state TEXT NOT NULL CHECK (state IN {sql_in(ITEM_STATES)}),
    claim_token TEXT,
    starts INTEGER NOT NULL DEFAULT 0 CHECK (starts >= 0),
    child_run_id TEXT,
    output_json TEXT,
    error_json TEXT,
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL,
    finished_at INTEGER,
    PRIMARY KEY (run_id, node_id, visit, item_index),
    CHECK ((state = 'running') = (claim_token IS NOT NULL)),
    CHECK ((state IN {sql_in(ITEM_OPEN_STATES)}) = (finished_at IS NULL))
)""",
    # The open items of a node in index order: a claim reads the first ones, and the
    # index shrinks as items end (a 10,000-item map does not rescan its ended rows).
    f"""CREATE INDEX fanout_items_open
    ON fanout_items (run_id, node_id, visit, item_index)
    WHERE state IN {sql_in(ITEM_OPEN_STATES)}""",
    # The running items of a node: every claim counts the live ones against the ceiling
    # and looks for a dead holder's, and a settle finds its own; without it each of
    # those read every row of the visit (10,000 for a large map). At most the ceiling
    # plus a dead holder's rows. Added within v1 (layout.ADDED_INDEXES).
    """CREATE INDEX fanout_items_running
    ON fanout_items (run_id, node_id, visit, item_index)
    WHERE state = 'running'""",
    # A fan-out node visit whose items any host may run (ADR 0008 phase 2): its ceiling
    # and the item lease a host's claim holds. `active` goes to 0 once no item is open
    # (hosts look only at active ones); `waiting`: the parent parked until its items end
    # (the settle that ends the last one re-queues it); `refused`: a host could not run
    # them (a secret or a definition it lacks), so the parent runs the rest itself.
    # Added within v1 (layout.ADDED_TABLES).
    """CREATE TABLE fanout_nodes (
    run_id TEXT NOT NULL,
    node_id TEXT NOT NULL,
    visit INTEGER NOT NULL CHECK (visit > 0),
    max_concurrency INTEGER NOT NULL CHECK (max_concurrency > 0),
    lease_ms INTEGER NOT NULL CHECK (lease_ms > 0),
    fail_fast INTEGER NOT NULL DEFAULT 0 CHECK (fail_fast IN (0, 1)),
    active INTEGER NOT NULL DEFAULT 1 CHECK (active IN (0, 1)),
    waiting INTEGER NOT NULL DEFAULT 0 CHECK (waiting IN (0, 1)),
    refused INTEGER NOT NULL DEFAULT 0 CHECK (refused IN (0, 1)),
    created_at INTEGER NOT NULL,
    PRIMARY KEY (run_id, node_id, visit)
)""",
    # The logs (`node_log` payloads) of items another host ran: the parent's trace has
    # one writer, so the parent records them when its node ends. Added within v1.
    # WITHOUT ROWID: the rows live in their key's b-tree, so an item's settle writes
    # one page for its log, not a rowid table's and its key index's (made so within
    # v1: layout.ROWID_DROPPED; Postgres' DDL drops the clause).
    """CREATE TABLE fanout_logs (
    run_id TEXT NOT NULL,
    node_id TEXT NOT NULL,
    visit INTEGER NOT NULL CHECK (visit > 0),
    item_index INTEGER NOT NULL CHECK (item_index >= 0),
    seq INTEGER NOT NULL CHECK (seq >= 0),
    attempt TEXT NOT NULL,
    log_json TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    PRIMARY KEY (run_id, node_id, visit, item_index, seq)
) WITHOUT ROWID""",
)
