"""Seed 000 tests 1-3: the controller store's exact layout, old-layout refusal, no migration.

The store is opened the way a session (and the CLI) opens it: the workspace's
`store_path`, through `open_store` or the session harness.

SQLite-only (no `store_url`): these tests read and forge the store file itself (its
sqlite_master, file mode and bytes); the Postgres layout check, refusal and reset
rule are tested in tests/integration/store/test_store_postgres.py.
"""

from __future__ import annotations

import hashlib
import sqlite3
import stat
from pathlib import Path

import pytest
from harness import Scripted, make_session, on_user, start_call

from runner.compiler import build_catalog
from runner.errors import OperationFailed
from runner.host.runtime._local import Workspace, open_store, store_path
from runner.store import LAUNCH_STATUSES
from runner.store._errors import RESET_INSTRUCTION, IncompatibleLayout
from runner.store._layout import SCHEMA_ID, TABLE_COLUMNS

pytestmark = pytest.mark.timeout(20)

OLD_ALPHA_DDL = [
    # The pre-seed alpha queue: `claimed` state, no source identity, no safe error.
    """CREATE TABLE workflow_run_queue (
        run_id TEXT PRIMARY KEY, workflow TEXT NOT NULL, input_json TEXT,
        status TEXT NOT NULL CHECK (status IN ('queued', 'claimed', 'parked', 'done')),
        claimed_by TEXT, claimed_at INTEGER, created_at INTEGER NOT NULL)""",
    "CREATE TABLE schema_info (singleton INTEGER PRIMARY KEY, schema_id TEXT, created_at INTEGER)",
    "INSERT INTO schema_info VALUES (1, 'wfrun.controller-store.v1', 1)",
    "INSERT INTO workflow_run_queue VALUES ('old-run-1', 'hello', '{\"task\":\"x\"}', 'claimed',"
    " 'r1', 5, 1)",
]


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _files(folder: Path) -> dict[str, str]:
    return {p.name: _digest(p) for p in sorted(folder.iterdir()) if p.is_file()}


def _project_with_store(tmp_path: Path, statements: list[str]) -> Path:
    """A project whose store file already exists with `statements` applied."""
    root = tmp_path / "proj"
    (root / ".wfrun" / "workflows").mkdir(parents=True)
    (root / ".wfrun" / "workflows" / "hello.yaml").write_text(
        "start: only\nnodes:\n  only: {compute: \"{{ 1 }}\"}\n")
    state = root / ".wfrun" / "state"
    state.mkdir(mode=0o700)
    conn = sqlite3.connect(state / "store.sqlite3")
    for statement in statements:
        conn.execute(statement)
    conn.commit()
    conn.close()
    return root


def _contract_drifted_ddl(tmp_path: Path) -> list[str]:
    """Today's exact columns, but the old status contract (`claimed` instead of `starting`)."""
    fresh = tmp_path / "fresh"
    s = make_session(fresh, Scripted(), {})
    s.close()
    conn = sqlite3.connect(store_path(s.ws))
    rows = conn.execute("SELECT type, sql FROM sqlite_master WHERE sql IS NOT NULL "
                        "AND name NOT LIKE 'sqlite_%' "
                        "ORDER BY type DESC").fetchall()
    conn.close()
    out = []
    for kind, sql in rows:
        if kind == "table" and "CREATE TABLE workflow_run_queue" in sql:
            assert "'starting'" in sql
            sql = sql.replace("'starting'", "'claimed'")
        out.append(sql)
    out.append(f"INSERT INTO schema_info VALUES (1, '{SCHEMA_ID}', 1)")
    return out


def test_seed01_clean_store_creation_with_the_exact_layout(tmp_path: Path) -> None:
    model = Scripted(on_user("go", start_call("hello", task=None)))
    s = make_session(tmp_path, model, {"hello": "start: a\nnodes:\n  a: {compute: \"{{ 1 }}\"}\n"})
    try:
        path = store_path(s.ws)
        assert path == s.root / ".wfrun" / "state" / "store.sqlite3"
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
        conn = sqlite3.connect(path)
        tables = {r[0] for r in conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'")}
        assert tables == set(TABLE_COLUMNS)
        for table, columns in TABLE_COLUMNS.items():
            found = tuple(r[1] for r in conn.execute(f"PRAGMA table_info({table})"))
            assert found == columns, table
        assert conn.execute("SELECT schema_id FROM schema_info").fetchall() == [(SCHEMA_ID,)]
        # The status contract is the seed's, and `claimed` is gone.
        ddl = conn.execute("SELECT sql FROM sqlite_master WHERE name = 'workflow_run_queue'"
                           ).fetchone()[0]
        for status in LAUNCH_STATUSES:
            assert f"'{status}'" in ddl
        assert "'claimed'" not in ddl
        conn.close()
        # The store works through the session path, and the CLI path opens the same file.
        s.host.prompt("go")
        s.settle()
        assert [r.status for r in s.launches()] == ["done"]
        again = open_store(s.ws)
        assert again.schema_id == SCHEMA_ID
        assert [r.status for r in again.launches.query()] == ["done"]
        again.close()
    finally:
        s.close()


@pytest.mark.parametrize("layout", ["old_columns", "old_status_contract"])
def test_seed02_old_layout_rejection_with_the_reset_instruction(tmp_path: Path,
                                                                layout: str) -> None:
    ddl = OLD_ALPHA_DDL if layout == "old_columns" else _contract_drifted_ddl(tmp_path)
    root = _project_with_store(tmp_path, ddl)
    with pytest.raises(IncompatibleLayout) as caught:
        make_session(tmp_path, Scripted(), {})
    message = caught.value.message
    assert "incompatible store layout" in message
    assert RESET_INSTRUCTION in message
    assert "wfrun store reset --yes" in message
    assert ".wfrun/runs/" in message
    # It names what differs, not just that something does.
    expected = "missing table" if layout == "old_columns" else "constraints differ"
    assert expected in message
    # The CLI's opener maps it to one clear operation failure with the same instruction.
    ws = Workspace(build_catalog("workflows", root, None), root, root / ".wfrun" / "state")
    with pytest.raises(OperationFailed) as cli_caught:
        open_store(ws)
    assert RESET_INSTRUCTION in cli_caught.value.message


def test_seed03_no_automatic_migration_or_silent_deletion(tmp_path: Path) -> None:
    root = _project_with_store(tmp_path, OLD_ALPHA_DDL)
    runs = root / ".wfrun" / "runs" / "old-run-1"
    runs.mkdir(parents=True)
    (runs / "manifest.json").write_text('{"status": "running"}')
    state = root / ".wfrun" / "state"
    before = _files(state)
    bundle_before = _digest(runs / "manifest.json")
    for _ in range(2):  # repeated opens change nothing either
        with pytest.raises(IncompatibleLayout):
            make_session(tmp_path, Scripted(), {})
    assert _files(state) == before  # same files, same bytes: no ALTER, no WAL, no rewrite
    assert _digest(runs / "manifest.json") == bundle_before
    conn = sqlite3.connect(state / "store.sqlite3")
    assert conn.execute("SELECT run_id, status FROM workflow_run_queue").fetchall() == [
        ("old-run-1", "claimed")]
    cols = [r[1] for r in conn.execute("PRAGMA table_info(workflow_run_queue)")]
    assert "claimed_by" in cols
    assert "claim_token" not in cols
    conn.close()
