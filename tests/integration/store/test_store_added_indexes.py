"""The claim-order indexes, added to `wfrun.controller-store.v1` after stores were
made without them (`layout.ADDED_INDEXES`): a store that lacks them opens and gains
them, and a claim reads the first claimable launch instead of sorting the queue. A
retired index (`layout.RETIRED_INDEXES`) and a table made WITHOUT ROWID since
(`layout.ROWID_DROPPED`): a store with the old form opens and loses it."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

from storekit import Backend, launch

from runner.clock import FakeClock
from runner.store import SqliteStore, Store
from runner.store._ddl import table_ddl
from runner.store._layout import ADDED_INDEXES
from runner.store.domain._fanout import ItemKey, ItemLog
from runner.store.domain._launch_queries import FIXED as _FIXED


def _indexes(store: Any, backend: Backend) -> set[str]:
    with store._db.write() as conn:
        if backend.name == "sqlite":
            rows = conn.execute("SELECT name FROM sqlite_master WHERE type = 'index'")
            return {str(r[0]) for r in rows.fetchall()}
        rows = conn.execute("SELECT indexname FROM pg_indexes"
                            " WHERE schemaname = current_schema()")
        return {str(r["indexname"]) for r in rows.fetchall()}


def test_a_store_made_before_the_claim_order_indexes_gains_them_at_open(
        backend: Backend, clock: FakeClock) -> None:
    store = backend.open(clock)
    for name in ("a", "b", "c"):
        store.launches.enqueue(launch(name))
        clock.advance(1)
    store.launches.enqueue(launch("mine", affinity_runner_id="h1"))
    assert _indexes(store, backend) >= ADDED_INDEXES
    with store._db.write() as conn:  # as a store made before them is
        for name in sorted(ADDED_INDEXES):
            conn.execute(f"DROP INDEX {name}")
    store.close()

    again: Store = backend.open(clock)  # not refused as another layout
    try:
        assert _indexes(again, backend) >= ADDED_INDEXES
        order = []
        while (claimed := again.launches.claim_next(runner_id="h1")) is not None:
            order.append(claimed.run_id)
        assert order == ["mine", "a", "b", "c"]  # own affinity first, then the oldest
    finally:
        again.close()


def test_a_claim_reads_the_claim_order_index_without_sorting(tmp_path: Path) -> None:
    """SQLite has no statistics: the claim names its index (`Dialect.indexed_by`), and
    its plan reads it in order, with no sort of the queue (a backlog of 3,000 cost
    1.2 ms per claim that way)."""
    store = SqliteStore(tmp_path / "store.sqlite3")
    try:
        for i in range(300):
            store.launches.enqueue(launch(f"run-{i:04d}"))
        params = {**_FIXED, "session": None, "runner": "h1", "now": 10**13}
        probes = store.launches.claim_probes(None)
        assert store.launches.claim_probes(None) is probes  # built once, not per claim
        [sql] = probes  # both looks in one statement on SQLite (one UNION ALL)
        with store._db.write() as conn:
            plan = [str(r[3]) for r in conn.execute("EXPLAIN QUERY PLAN " + sql,
                                                    params).fetchall()]
        for index in ("workflow_run_queue_ready_affinity", "workflow_run_queue_ready"):
            assert any(f"USING INDEX {index}" in step for step in plan), plan
        assert not any("TEMP B-TREE" in step for step in plan), plan
    finally:
        store.close()


def test_the_run_list_page_reads_the_ended_index_without_sorting_ended_runs(
        tmp_path: Path) -> None:
    """`wfrun runs`' first page stays flat as finished runs pile up: the `done` rows of
    each ending are one range of `workflow_run_queue_ended`, read in order for at most
    a page's entries; only the other statuses' rows are sorted."""
    store = SqliteStore(tmp_path / "store.sqlite3")
    try:
        for i in range(300):
            store.launches.enqueue(launch(f"run-{i:04d}"))
        with store._db.write() as conn:
            conn.execute("UPDATE workflow_run_queue SET status = 'done', ending = 'completed',"
                         " input_json = NULL, launch_options_json = NULL,"
                         " started_at = created_at, finished_at = created_at")
        statements: list[str] = []
        conn = store._db.connection()
        conn.set_trace_callback(statements.append)
        page = store.launches.page(limit=5)
        conn.set_trace_callback(None)
        assert [r.run_id for r in page] == [f"run-{i:04d}" for i in range(299, 294, -1)]
        [sql] = [s for s in statements if s.startswith("SELECT")]
        plan = [str(r[3]) for r in conn.execute("EXPLAIN QUERY PLAN " + sql).fetchall()]
        ended = [step for step in plan if "workflow_run_queue_ended (ending=?)" in step]
        assert len(ended) == 2, plan  # done: completed, waiting
        # The sorts are of the other statuses' rows and of the merged page entries,
        # never a scan of the table.
        assert not any(step.startswith("SCAN workflow_run_queue") for step in plan), plan
    finally:
        store.close()


def test_a_page_of_the_live_launches_reads_the_claim_order_index(tmp_path: Path) -> None:
    """`wfrun status` lists a page of the queued, starting, running and parked launches:
    it reads the claim-order index in order (at 100,000 queued, the status index and a
    sort of the whole queue cost 0.9 s), and a store opened read-only before a
    write-mode open added that index is still read, without it."""
    path = tmp_path / "store.sqlite3"
    store = SqliteStore(path)
    live = ["queued", "starting", "running", "parked"]
    try:
        for i in range(300):
            store.launches.enqueue(launch(f"run-{i:04d}"))
        seen: list[str] = []
        store._db.connection().set_trace_callback(seen.append)
        page = store.launches.query(statuses=live, limit=10)
        store._db.connection().set_trace_callback(None)
        assert [r.run_id for r in page] == [f"run-{i:04d}" for i in range(10)]
        [select] = [s for s in seen if s.startswith("SELECT * FROM workflow_run_queue")]
        with store._db.write() as conn:
            plan = [str(r[3]) for r in conn.execute("EXPLAIN QUERY PLAN " + select)]
            conn.execute("DROP INDEX workflow_run_queue_ready")  # as an older store
        assert any("USING INDEX workflow_run_queue_ready" in step for step in plan), plan
        assert not any("TEMP B-TREE" in step for step in plan), plan
    finally:
        store.close()
    old = SqliteStore(path, read_only=True)
    try:
        assert [r.run_id for r in old.launches.query(statuses=live, limit=3)] == [
            "run-0000", "run-0001", "run-0002"]
    finally:
        old.close()


def test_a_store_made_before_fanout_items_opens_and_gains_the_table(
        backend: Backend, clock: FakeClock) -> None:
    """`layout.ADDED_TABLES`: not refused as another layout; the writing open makes it."""
    store = backend.open(clock)
    with store._db.write() as conn:  # type: ignore[attr-defined]
        conn.execute("DROP TABLE fanout_items")
    store.close()
    again: Store = backend.open(clock)
    try:
        assert {"fanout_items", "fanout_items_open"} <= (
            _indexes(again, backend) | _tables(again, backend))
    finally:
        again.close()


def _tables(store: Any, backend: Backend) -> set[str]:
    with store._db.write() as conn:
        if backend.name == "sqlite":
            rows = conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
            return {str(r[0]) for r in rows.fetchall()}
        rows = conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = current_schema()")
        return {str(r["tablename"]) for r in rows.fetchall()}


def test_a_holder_renews_its_item_leases_by_their_keys(tmp_path: Path) -> None:
    """A host renews the leases of the fan-out items it runs every half second: each is
    found by its key, not by reading every running item of every map on the store (and
    no index by holder costs every item's claim and settle a page)."""
    store = SqliteStore(tmp_path / "store.sqlite3")
    try:
        store.launches.enqueue(launch("parent"))
        with store._db.write() as conn:
            conn.executemany(
                "INSERT INTO fanout_items (run_id, node_id, visit, item_index, state,"
                " claim_token, starts, created_at, updated_at)"
                " VALUES ('parent', 'm', 1, ?, 'running', ?, 1, 0, 0)",
                [(i, "h1" if i < 3 else "other") for i in range(400)])
        key = ItemKey("parent", "m", 1)
        seen: list[str] = []
        conn = store._db.connection()
        store._db.trace(seen.append)
        held = store.fanout.renew_held("h1", {(key, i) for i in (0, 1, 2, 3)})
        store._db.trace(None)
        assert held == {(key, 0), (key, 1), (key, 2)}  # 3 is another holder's
        writes = [s for s in seen if s.startswith("UPDATE fanout_items")]
        assert len(writes) == 4, seen
        for sql in writes:
            plan = [str(r[3]) for r in conn.execute("EXPLAIN QUERY PLAN " + sql).fetchall()]
            assert any("fanout_items USING INDEX sqlite_autoindex_fanout_items_1 (run_id=?"
                       " AND node_id=? AND visit=? AND item_index=?)" in step
                       for step in plan), plan
    finally:
        store.close()


def test_a_store_with_the_holder_index_and_rowid_logs_opens_and_loses_them(
        backend: Backend, clock: FakeClock) -> None:
    """A store made before `fanout_items_holder` was retired and `fanout_logs` made
    WITHOUT ROWID (SQLite) opens, read-only too, with its logs; opening it for writing
    drops the index and rebuilds the table with its rows."""
    store = backend.open(clock)
    store.launches.enqueue(launch("parent"))
    key = ItemKey("parent", "m", 1)
    with store._db.write() as conn:  # type: ignore[attr-defined]
        for i in range(3):
            conn.execute(
                "INSERT INTO fanout_logs (run_id, node_id, visit, item_index, seq, attempt,"
                f" log_json, created_at) VALUES ('parent', 'm', 1, {i}, 0, 'a{i}',"
                f" '{{\"stdout\":\"item {i}\"}}', 0)")
        conn.execute("CREATE INDEX fanout_items_holder ON fanout_items (claim_token)"
                     " WHERE state = 'running'")
        if backend.name == "sqlite":  # the rowid form, as v1 first made it
            conn.execute("ALTER TABLE fanout_logs RENAME TO logs_then")
            conn.execute(table_ddl("fanout_logs").replace(") WITHOUT ROWID", ")"))
            conn.execute("INSERT INTO fanout_logs SELECT * FROM logs_then")
            conn.execute("DROP TABLE logs_then")
    store.close()
    logs = [ItemLog(i, f"a{i}", f'{{"stdout":"item {i}"}}') for i in range(3)]
    if backend.name == "sqlite":
        path = store._db.path  # type: ignore[attr-defined]
        assert "WITHOUT ROWID" not in _logs_sql(path)
        old = SqliteStore(path, read_only=True)
        try:
            assert old.fanout.logs(key) == logs
        finally:
            old.close()
    again: Store = backend.open(clock)
    try:
        assert "fanout_items_holder" not in _indexes(again, backend)
        assert again.fanout.logs(key) == logs
    finally:
        again.close()
    if backend.name == "sqlite":
        assert _logs_sql(path).endswith("WITHOUT ROWID")


def _logs_sql(path: Path) -> str:
    conn = sqlite3.connect(path)
    try:
        return str(conn.execute("SELECT sql FROM sqlite_master WHERE name = 'fanout_logs'")
                   .fetchone()[0])
    finally:
        conn.close()
