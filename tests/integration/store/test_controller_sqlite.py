"""SQLite only, controller side: two processes claiming from one file, and the
exact-layout check refusing the controller tables of another layout."""

from __future__ import annotations

import hashlib
import json
import multiprocessing
import os
import random
import sqlite3
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from runner.store import LostRace, SqliteStore
from runner.store._errors import IncompatibleLayout
from runner.store.sqlite._schema import DDL

C = "race"
KEYS = 40
MAX_EXTRA_PASSES = 3


def _claimer(path: str, name: str, holds: str, seed: int, start: Any, out: str) -> None:
    """One process: claim, hold (a marker file proves exclusivity), sometimes wake the
    key it holds (so it must come back exactly once more), complete."""
    rng = random.Random(seed)
    log: dict[str, Any] = {"passes": [], "dirtied": [], "overlaps": [], "lost": [], "clean": []}
    with SqliteStore(path) as store:
        q = store.reconcile_queue
        start.wait(timeout=30)
        while True:
            item = q.claim_next(runner_id=name, lease_seconds=600)
            if item is None:
                if not q.list(C):
                    break
                time.sleep(0.001)
                continue
            marker = Path(holds) / item.key
            try:
                os.close(os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
                mine = True
            except FileExistsError:
                log["overlaps"].append(item.key)
                mine = False
            time.sleep(rng.uniform(0.001, 0.004))
            if item.epoch <= MAX_EXTRA_PASSES and rng.random() < 0.5:
                woken = q.enqueue(C, item.key)
                log["dirtied" if woken.dirty else "clean"].append(item.key)
            if mine:
                marker.unlink()
            assert item.claim_token is not None
            done = q.complete(C, item.key, item.claim_token, outcome="settled")
            if isinstance(done, LostRace):
                log["lost"].append([item.key, done.reason])
            log["passes"].append([item.key, item.epoch, item.claim_token])
    Path(out).write_text(json.dumps(log))


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_two_processes_never_hold_the_same_key_at_once(tmp_path: Path) -> None:
    path = tmp_path / ".wfrun" / "state" / "store.sqlite3"
    holds = tmp_path / "holds"
    holds.mkdir()
    with SqliteStore(path) as store:
        assert store.reconcile_queue.enqueue_many((C, f"k{i:02}") for i in range(KEYS)) == KEYS
    ctx = multiprocessing.get_context("spawn")
    start = ctx.Barrier(2)
    outs = [tmp_path / f"w{n}.json" for n in range(2)]
    procs = [
        ctx.Process(
            target=_claimer, args=(str(path), f"w{n}", str(holds), n, start, str(outs[n]))
        )
        for n in range(2)
    ]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join(timeout=100)
        assert proc.exitcode == 0
    logs = [json.loads(out.read_text()) for out in outs]

    assert [key for log in logs for key in log["overlaps"]] == []
    assert [key for log in logs for key in log["clean"]] == []  # held keys always go dirty
    assert [lost for log in logs for lost in log["lost"]] == []
    assert all(log["passes"] for log in logs), "one process did all the work"
    passes = [tuple(p) for log in logs for p in log["passes"]]
    dirtied = [key for log in logs for key in log["dirtied"]]
    # every key once, plus exactly one more pass per wake-up during a claim
    assert len(passes) == KEYS + len(dirtied)
    assert len({token for _, _, token in passes}) == len(passes)
    epochs: dict[str, list[int]] = defaultdict(list)
    for key, epoch, _ in passes:
        epochs[key].append(epoch)
    assert set(epochs) == {f"k{i:02}" for i in range(KEYS)}
    for key, seen in epochs.items():
        assert sorted(seen) == list(range(1, len(seen) + 1)), key
        assert len(seen) == 1 + dirtied.count(key), key
    with SqliteStore(path) as store:
        assert store.reconcile_queue.list() == []


# --- the exact-layout check on the controller tables ----------------------------------------


def _snapshot(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir())}


def _refused(path: Path, fragment: str) -> None:
    before = _snapshot(path.parent)
    with pytest.raises(IncompatibleLayout) as caught:
        SqliteStore(path)
    assert fragment in str(caught.value)
    assert "wfrun store reset --yes" in str(caught.value)
    assert _snapshot(path.parent) == before


def _alter(path: Path, *statements: str) -> None:
    SqliteStore(path).close()
    conn = sqlite3.connect(path, isolation_level=None)
    for statement in statements:
        conn.execute(statement)
    conn.close()


@pytest.mark.parametrize(
    ("statements", "fragment"),
    [
        (
            ["ALTER TABLE reconcile_queue ADD COLUMN claim_version INTEGER"],
            "table reconcile_queue: unexpected column(s) claim_version",
        ),
        (
            ["ALTER TABLE effects ADD COLUMN epoch INTEGER NOT NULL DEFAULT 0"],
            "table effects: unexpected column(s) epoch",
        ),
        (
            [
                "DROP INDEX controller_events_by_resource",
                "ALTER TABLE controller_events DROP COLUMN reconcile_id",
            ],
            "table controller_events: missing column(s) reconcile_id",
        ),
        (["DROP INDEX workflow_requests_by_run"], "missing index workflow_requests_by_run"),
    ],
)
def test_a_foreign_controller_layout_is_refused_untouched(
    tmp_path: Path, statements: list[str], fragment: str
) -> None:
    path = tmp_path / "store.sqlite3"
    _alter(path, *statements)
    _refused(path, fragment)


def test_the_old_alpha_reconcile_queue_is_refused(tmp_path: Path) -> None:
    """The first alpha layout: `version`/`claim_version` columns and a foreign key."""
    old_queue = """CREATE TABLE reconcile_queue (
    controller TEXT NOT NULL,
    resource_key TEXT NOT NULL,
    available_at INTEGER NOT NULL,
    version INTEGER NOT NULL CHECK (version > 0),
    consecutive_errors INTEGER NOT NULL DEFAULT 0 CHECK (consecutive_errors >= 0),
    last_error TEXT,
    claim_token TEXT,
    claim_version INTEGER,
    claim_expires_at INTEGER,
    epoch INTEGER NOT NULL DEFAULT 0 CHECK (epoch >= 0),
    PRIMARY KEY (controller, resource_key),
    FOREIGN KEY (controller, resource_key)
        REFERENCES resources (controller, resource_key) ON DELETE CASCADE
)"""
    ddl = [old_queue if s.startswith("CREATE TABLE reconcile_queue") else s for s in DDL]
    assert ddl != list(DDL)
    path = tmp_path / "store.sqlite3"
    conn = sqlite3.connect(path, isolation_level=None)
    for statement in ddl:
        conn.execute(statement)
    conn.execute("INSERT INTO schema_info VALUES (1, 'wfrun.controller-store.v1', 0)")
    conn.close()
    _refused(path, "table reconcile_queue: missing column(s) dirty, runner_id")


def test_a_loosened_controller_contract_is_refused(tmp_path: Path) -> None:
    """Same columns, but a dirty row no longer needs a claim."""
    ddl = [
        s.replace(",\n    CHECK (dirty = 0 OR claim_token IS NOT NULL)", "")
        if s.startswith("CREATE TABLE reconcile_queue")
        else s
        for s in DDL
    ]
    assert ddl != list(DDL)
    path = tmp_path / "store.sqlite3"
    conn = sqlite3.connect(path, isolation_level=None)
    for statement in ddl:
        conn.execute(statement)
    conn.execute("INSERT INTO schema_info VALUES (1, 'wfrun.controller-store.v1', 0)")
    conn.close()
    _refused(path, "table reconcile_queue: constraints differ")
