"""The SQLite DDL matches the backend-neutral layout contract."""

from __future__ import annotations

import sqlite3

import pytest

from runner.store._layout import (
    ADDED_TABLES,
    SCHEMA_ID,
    TABLE_COLUMNS,
    TABLES,
    describe_column_drift,
    describe_table_drift,
)
from runner.store.sqlite._schema import (
    DDL,
    create_schema,
    expected_layout,
    layout_drift,
    read_layout,
    schema_id_drift,
    sql_in,
)

DESIGN_TABLES = {
    "schema_info",
    "workflow_run_queue",
    "workflow_turn_intents",
    "workflow_notifications",
    "run_events",
    "resources",
    "reconcile_queue",
    "effects",
    "workflow_requests",
    "controller_events",
}
#: Added within v1 since (layout.ADDED_TABLES; ADR 0008).
ADDED = {"fanout_items", "fanout_nodes", "fanout_logs", "workflow_reruns", "step_cache",
         "audit_log", "notification_deliveries", "trigger_firings", "launch_gates",
         "trigger_states"}


def test_the_contract_names_the_design_tables() -> None:
    assert set(TABLES) == DESIGN_TABLES | ADDED
    assert set(ADDED_TABLES) == ADDED
    assert SCHEMA_ID == "wfrun.controller-store.v1"


def test_the_ddl_creates_exactly_the_contract_columns() -> None:
    layout = expected_layout()
    assert set(layout.tables) == DESIGN_TABLES | ADDED
    for table in TABLES:
        assert layout.columns[table] == TABLE_COLUMNS[table], table
    assert "epoch" in TABLE_COLUMNS["workflow_run_queue"]


def test_a_fresh_schema_has_no_drift() -> None:
    conn = sqlite3.connect(":memory:")
    create_schema(conn, 123)
    assert layout_drift(read_layout(conn)) is None
    assert schema_id_drift(conn) is None
    assert conn.execute("SELECT schema_id, created_at FROM schema_info").fetchall() == [
        (SCHEMA_ID, 123)
    ]


def test_schema_info_is_a_singleton() -> None:
    conn = sqlite3.connect(":memory:")
    create_schema(conn, 0)
    with pytest.raises(sqlite3.IntegrityError):
        conn.execute("INSERT INTO schema_info VALUES (2, 'x', 0)")


@pytest.mark.parametrize(
    ("sql", "params"),
    [
        # an unknown launch status
        (
            "INSERT INTO workflow_run_queue (run_id, workflow_ref, workflow_source_json,"
            " definition_digest, status, created_at, updated_at)"
            " VALUES ('r', 'w', '{}', 'd', 'claimed', 0, 0)",
            (),
        ),
        # running without a claim token
        (
            "INSERT INTO workflow_run_queue (run_id, workflow_ref, workflow_source_json,"
            " definition_digest, status, created_at, updated_at)"
            " VALUES ('r', 'w', '{}', 'd', 'running', 0, 0)",
            (),
        ),
        # done with private input still present
        (
            "INSERT INTO workflow_run_queue (run_id, workflow_ref, workflow_source_json,"
            " definition_digest, input_json, status, created_at, updated_at, finished_at)"
            " VALUES ('r', 'w', '{}', 'd', '{}', 'done', 0, 0, 0)",
            (),
        ),
        # done without how its run ended
        (
            "INSERT INTO workflow_run_queue (run_id, workflow_ref, workflow_source_json,"
            " definition_digest, status, created_at, updated_at, finished_at)"
            " VALUES ('r', 'w', '{}', 'd', 'done', 0, 0, 0)",
            (),
        ),
        # an ending on a row that is not done
        (
            "INSERT INTO workflow_run_queue (run_id, workflow_ref, workflow_source_json,"
            " definition_digest, status, created_at, updated_at, ending)"
            " VALUES ('r', 'w', '{}', 'd', 'queued', 0, 0, 'completed')",
            (),
        ),
        # failed without a code
        (
            "INSERT INTO workflow_run_queue (run_id, workflow_ref, workflow_source_json,"
            " definition_digest, status, created_at, updated_at, finished_at)"
            " VALUES ('r', 'w', '{}', 'd', 'failed', 0, 0, 0)",
            (),
        ),
        # an error message over 500 bytes
        (
            "INSERT INTO workflow_run_queue (run_id, workflow_ref, workflow_source_json,"
            " definition_digest, status, error_code, error_message, created_at, updated_at,"
            " finished_at) VALUES ('r', 'w', '{}', 'd', 'failed', 'cancelled', ?, 0, 0, 0)",
            ("x" * 501,),
        ),
        # a resolved turn intent without its resolution
        (
            "INSERT INTO workflow_turn_intents (intent_id, source_event_id, run_id, workflow_ref,"
            " target_session_id, cause, fallback_facts_json, requested_at, eligible_at,"
            " resolved_at) VALUES ('i', 'e', 'r', 'w', 's', 'failed', '{}', 0, 0, 0)",
            (),
        ),
        # a launch_failure notification kind (turn intents carry launch failures)
        (
            "INSERT INTO workflow_notifications (notification_id, run_id, node_id, attempt_id,"
            " notification_index, target_session_id, kind, content, created_at)"
            " VALUES ('n', 'r', 'x', 'a', 1, 's', 'launch_failure', 'c', 0)",
            (),
        ),
        # an unknown effect state
        (
            "INSERT INTO effects VALUES ('u', 'k', 1, 'kind', 'done', 'f', 0, NULL, NULL, NULL)",
            (),
        ),
        # a dirty reconcile queue row without a claim
        (
            "INSERT INTO reconcile_queue (controller, resource_key, available_at, dirty)"
            " VALUES ('c', 'k', 0, 1)",
            (),
        ),
        # a pending workflow request past attempt 0
        (
            "INSERT INTO workflow_requests (request_id, resource_uid, request_key,"
            " input_fingerprint, workflow, run_id, state, attempt, created_at, updated_at)"
            " VALUES ('r', 'u', 'k', 'f', 'w', 'run-1', 'pending', 1, 0, 0)",
            (),
        ),
    ],
)
def test_check_constraints_enforce_the_state_contract(sql: str, params: tuple[str, ...]) -> None:
    conn = sqlite3.connect(":memory:")
    create_schema(conn, 0)
    with pytest.raises(sqlite3.IntegrityError, match="CHECK"):
        conn.execute(sql, params)


def test_reconcile_queue_rows_do_not_need_their_resource() -> None:
    """A wake-up may name a key with no resource (the pass finds nothing to do)."""
    conn = sqlite3.connect(":memory:")
    conn.execute("PRAGMA foreign_keys = ON")
    create_schema(conn, 0)
    conn.execute(
        "INSERT INTO reconcile_queue (controller, resource_key, available_at)"
        " VALUES ('c', 'k', 0)"
    )
    assert conn.execute("SELECT dirty, epoch FROM reconcile_queue").fetchall() == [(0, 0)]


def test_drift_phrases_name_what_differs() -> None:
    assert describe_table_drift(("a", "b"), ("a", "b")) is None
    assert describe_table_drift(("a", "b"), ("b", "c")) == (
        "missing table(s) a; unexpected table(s) c"
    )
    assert describe_column_drift("t", ("x", "y"), ("x", "y")) is None
    assert describe_column_drift("t", ("x", "y"), ("x", "z")) == (
        "table t: missing column(s) y; unexpected column(s) z"
    )
    assert describe_column_drift("t", ("x", "y"), ("y", "x")) == (
        "table t: columns in a different order"
    )


def test_sql_in_takes_only_contract_words() -> None:
    assert sql_in(["queued", "done"]) == "('queued', 'done')"
    with pytest.raises(ValueError, match="contract word"):
        sql_in(["x'); DROP TABLE y; --"])


def test_every_ddl_statement_is_a_create() -> None:
    assert all(s.split()[0] == "CREATE" for s in DDL)
