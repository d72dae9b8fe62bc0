"""Which launch commits wait for the disk on SQLite: the enqueue and the ending do;
claims, renewals and `mark_running` commit with `synchronous = NORMAL` (no fsync of
their own; tests/integration/launch/test_power_cut.py restarts on what a power cut
leaves of them). Seen through SQLite's own statement trace on a real store file."""

from __future__ import annotations

from pathlib import Path

from runner.store import SqliteStore
from runner.store.records import LaunchRecord, NewLaunch


def _sync_levels(statements: list[str]) -> list[str]:
    """The synchronous level each COMMIT in `statements` ran under."""
    level, seen = "FULL", []
    for sql in statements:
        words = sql.split()
        if words[:2] == ["PRAGMA", "synchronous"]:
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
    launches.enqueue(NewLaunch("wf-20261201T000000Z-0000000a", "wf", {"kind": "file"},
                               "d" * 64, {"n": 1}))
    levels["enqueue"], statements[:] = _sync_levels(statements), []
    claimed = launches.claim_next(runner_id="h1", lease_seconds=30)
    assert isinstance(claimed, LaunchRecord)
    token = claimed.claim_token
    assert token is not None
    levels["claim"], statements[:] = _sync_levels(statements), []
    launches.renew_lease(claimed.run_id, token, lease_seconds=30)
    levels["renew"], statements[:] = _sync_levels(statements), []
    launches.mark_running(claimed.run_id, token)
    levels["running"], statements[:] = _sync_levels(statements), []
    launches.finish(claimed.run_id, token)
    levels["finish"], statements[:] = _sync_levels(statements), []
    assert levels == {"enqueue": ["FULL"], "claim": ["NORMAL"], "renew": ["NORMAL"],
                      "running": ["NORMAL"], "finish": ["FULL"]}
    # Each relaxed commit puts the connection back: every other write is FULL.
    assert store._db.settings()["synchronous"] == 2
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
