"""The claim-order indexes, added to `wfrun.controller-store.v1` after stores were
made without them (`layout.ADDED_INDEXES`): a store that lacks them opens and gains
them, and a claim reads the first claimable launch instead of sorting the queue."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from storekit import Backend, launch

from runner.clock import FakeClock
from runner.store import SqliteStore, Store
from runner.store.domain.launch_queries import FIXED as _FIXED
from runner.store.layout import ADDED_INDEXES


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
        with store._db.write() as conn:
            for sql, index in zip(probes, ("workflow_run_queue_ready_affinity",
                                           "workflow_run_queue_ready"), strict=True):
                plan = [str(r[3]) for r in conn.execute("EXPLAIN QUERY PLAN " + sql,
                                                        params).fetchall()]
                assert any(f"USING INDEX {index}" in step for step in plan), plan
                assert not any("TEMP B-TREE" in step for step in plan), plan
    finally:
        store.close()
