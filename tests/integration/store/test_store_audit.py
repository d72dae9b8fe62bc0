"""`audit_log` (who did what through the HTTP API), on every backend, and the tables
added within v1 (the audit trail, reruns, the step cache): a store made before them
opens and gains them with their indexes; a read-only open reads an empty trail."""

from __future__ import annotations

from pathlib import Path

import pytest
from storekit import Backend

from runner.clock import FakeClock
from runner.store import SqliteStore
from runner.store._layout import ADDED_TABLES


def test_actions_are_appended_and_read_newest_first_per_run_and_paged(
        backend: Backend, clock: FakeClock) -> None:
    store = backend.open(clock)
    try:
        first = store.audit.append(actor="token:ab12cd34", action="start", outcome="ok",
                                   run_id="run-1", workflow_ref="deploy",
                                   origin="127.0.0.1", detail={"input": True})
        clock.advance(2)
        store.audit.append(actor="token:ab12cd34", action="cancel", outcome="failed",
                           run_id="run-2", origin="10.0.0.5",
                           detail={"error": "run 'run-2' has ended"})
        clock.advance(2)
        store.audit.append(actor="local:ann", action="answer", outcome="ok", run_id="run-1")
        assert first.seq >= 1
        assert first.recorded_at == store.now_ms() - 4000
        assert first.detail == {"input": True}
        rows = store.audit.newest()
        assert [(r.action, r.run_id, r.outcome) for r in rows] == [
            ("answer", "run-1", "ok"), ("cancel", "run-2", "failed"),
            ("start", "run-1", "ok")]
        assert [r.action for r in store.audit.newest(run_id="run-1")] == ["answer", "start"]
        older = store.audit.newest(limit=1, before_seq=rows[0].seq)
        assert [r.action for r in older] == ["cancel"]
        assert rows[1].to_json()["origin"] == "10.0.0.5"
    finally:
        store.close()


@pytest.mark.parametrize(("change", "message"), [
    ({"action": "delete"}, "unknown audit action"),
    ({"outcome": "maybe"}, "unknown audit outcome"),
    ({"actor": ""}, "actor must be"),
    ({"detail": {"blob": "x" * 5000}}, "audit detail"),
])
def test_a_bad_row_is_refused_and_nothing_is_written(
        backend: Backend, clock: FakeClock, change: dict[str, object], message: str) -> None:
    store = backend.open(clock)
    try:
        wanted: dict[str, object] = {"actor": "token:x", "action": "start", "outcome": "ok"}
        with pytest.raises(ValueError, match=message):
            store.audit.append(**{**wanted, **change})  # type: ignore[arg-type]
        assert store.audit.newest() == []
    finally:
        store.close()


def test_a_store_made_before_the_audit_table_gains_it_at_open(
        backend: Backend, clock: FakeClock) -> None:
    store = backend.open(clock)
    with store._db.write() as conn:  # type: ignore[attr-defined]  # as an older store is
        for name in sorted(ADDED_TABLES):
            conn.execute(f"DROP TABLE {name}")
    store.close()
    again = backend.open(clock)  # not refused as another layout
    try:
        again.audit.append(actor="token:x", action="start", outcome="ok", run_id="r")
        assert [r.run_id for r in again.audit.newest()] == ["r"]
    finally:
        again.close()
    backend.open(clock).close()  # the added tables came with their indexes: not refused


def test_a_read_only_open_of_an_older_store_reads_an_empty_trail(tmp_path: Path) -> None:
    path = tmp_path / "store.sqlite3"
    with SqliteStore(path) as store, store._db.write() as conn:
        conn.execute("DROP TABLE audit_log")
    with SqliteStore(path, read_only=True) as viewer:
        assert viewer.audit.newest() == []
    assert "audit_log" not in _tables(path)  # the read-only open made nothing


def _tables(path: Path) -> set[str]:
    import sqlite3

    conn = sqlite3.connect(path)
    try:
        return {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    finally:
        conn.close()
