"""Which launch commits wait for the disk on SQLite: the enqueue and the ending do;
claims, renewals and `mark_running` commit with `synchronous = NORMAL` (no fsync of
their own; tests/integration/launch/test_power_cut.py restarts on what a power cut
leaves of them). Seen through SQLite's own statement trace on a real store file."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

from runner.store import SqliteStore
from runner.store.records import LaunchRecord, NewLaunch


def _sync_levels(statements: list[str], level: str = "FULL") -> list[str]:
    """The synchronous level each COMMIT in `statements` ran under, from `level`."""
    seen = []
    for sql in statements:
        words = sql.split()
        if words[:2] == ["PRAGMA", "synchronous"] and len(words) > 2:
            level = words[-1]
        elif words[:1] == ["COMMIT"]:
            seen.append(level)
    return seen


def test_only_the_enqueue_and_the_ending_wait_for_the_disk(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "store.sqlite3")
    statements: list[str] = []
    store._db.connection().set_trace_callback(statements.append)
    launches = store.launches
    levels: dict[str, list[str]] = {}
    pragmas: dict[str, int] = {}
    trail: list[str] = []  # every statement so far: the level carries over steps

    def took(step: str) -> None:
        trail.extend(statements)
        levels[step] = _sync_levels(trail)[-1:]
        pragmas[step] = sum(sql.startswith("PRAGMA synchronous") for sql in statements)
        statements[:] = []

    launches.enqueue(NewLaunch("wf-20261201T000000Z-0000000a", "wf", {"kind": "file"},
                               "d" * 64, {"n": 1}))
    took("enqueue")
    claimed = launches.claim_next(runner_id="h1", lease_seconds=30)
    assert isinstance(claimed, LaunchRecord)
    token = claimed.claim_token
    assert token is not None
    took("claim")
    launches.renew_lease(claimed.run_id, token, lease_seconds=30)
    took("renew")
    launches.mark_running(claimed.run_id, token)
    took("running")
    launches.finish(claimed.run_id, token)
    took("finish")
    assert levels == {"enqueue": ["FULL"], "claim": ["NORMAL"], "renew": ["NORMAL"],
                      "running": ["NORMAL"], "finish": ["FULL"]}
    assert pragmas == {"enqueue": 0, "claim": 1, "renew": 0, "running": 0, "finish": 1}
    # The level stays until a write asks for another one; settings() reports the
    # durable writes' level, FULL.
    assert store._db.settings()["synchronous"] == 2
    store.close()


def test_a_durable_write_after_relaxed_ones_on_another_thread_still_waits(
        tmp_path: Path) -> None:
    # Relaxed writes (the claim, `mark_running`) leave their connection at NORMAL; it
    # goes back to the pool when its thread ends, and the next thread's durable commit
    # on it must set FULL first.
    store = SqliteStore(tmp_path / "store.sqlite3")
    launches = store.launches
    launches.enqueue(NewLaunch("wf-20261201T000000Z-0000000a", "wf", {"kind": "file"},
                               "d" * 64, {"n": 1}))
    def in_thread(work: Callable[[], object]) -> object:
        out: list[object] = []
        thread = threading.Thread(target=lambda: out.append(work()))
        thread.start()
        thread.join()
        return out[0]

    def claim() -> object:
        claimed = launches.claim_next(runner_id="h1", lease_seconds=30)
        assert isinstance(claimed, LaunchRecord)
        assert claimed.claim_token is not None
        return launches.mark_running(claimed.run_id, claimed.claim_token)

    record = in_thread(claim)
    assert isinstance(record, LaunchRecord)
    assert record.claim_token is not None
    token = record.claim_token
    statements: list[str] = []

    def finish() -> tuple[int, object]:
        conn = store._db.connection()  # the claim's connection, back from the pool
        level = conn.execute("PRAGMA synchronous").fetchone()[0]
        conn.set_trace_callback(statements.append)
        return level, launches.finish(record.run_id, token)

    level, finished = in_thread(finish)  # type: ignore[misc]
    assert level == 1  # the claim left it at NORMAL
    assert isinstance(finished, LaunchRecord)
    assert finished.status == "done"
    assert _sync_levels(statements, "NORMAL") == ["FULL"]
    store.close()


def test_the_fence_is_one_read_of_the_lease_columns(tmp_path: Path) -> None:
    # It runs before every irreversible write of a `starting` run: no transaction, no
    # write lock, and none of the row's JSON (the workflow source, the input) read.
    store = SqliteStore(tmp_path / "store.sqlite3")
    launches = store.launches
    launches.enqueue(NewLaunch("wf-20261201T000000Z-0000000a", "wf", {"kind": "file"},
                               "d" * 64, {"n": 1}))
    claimed = launches.claim_next(runner_id="h1", lease_seconds=30)
    assert isinstance(claimed, LaunchRecord)
    statements: list[str] = []
    store._db.connection().set_trace_callback(statements.append)
    assert launches.check_claim(claimed.run_id, claimed.claim_token or "") == "starting"
    assert len(statements) == 1
    columns = statements[0].split(" FROM ")[0].removeprefix("SELECT ").split(", ")
    assert columns[:3] == ["status", "claim_token", "claim_expires_at"]
    assert len(columns) == 4
    assert columns[3].endswith(" AS fence_now")
    store.close()
