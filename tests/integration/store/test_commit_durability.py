"""Which launch commits wait for the disk on SQLite: the enqueue does (FULL), and the
ending does after it lets the write lock go (group commit: a WAL sync shared with the
writers after it); claims, renewals (item leases too) and `mark_running` commit with
`synchronous = NORMAL` (no fsync of their own; tests/integration/launch/test_power_cut.py
restarts on what a power cut leaves of them). Seen through SQLite's own statement trace and the
WAL syncs made from Python, on a real store file."""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys
import threading
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest
from waiting import LineReader

from runner.store import SqliteStore, StoreUnreachable
from runner.store._records import LaunchRecord, NewLaunch
from runner.store.domain._triggers import NewFiring

RUN = "wf-20261201T000000Z-0000000a"


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


@pytest.fixture
def wal_syncs(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The files wfrun fdatasyncs from Python, by name (SQLite's own syncs are in C)."""
    synced: list[str] = []
    real = os.fdatasync

    def spy(fd: int) -> None:
        real(fd)
        synced.append(os.path.basename(os.readlink(f"/proc/self/fd/{fd}")))

    monkeypatch.setattr(os, "fdatasync", spy)
    return synced


def _running(store: SqliteStore) -> LaunchRecord:
    store.launches.enqueue(NewLaunch(RUN, "wf", {"kind": "file"}, "d" * 64, {"n": 1}))
    claimed = store.launches.claim_next(runner_id="h1", lease_seconds=30)
    assert isinstance(claimed, LaunchRecord)
    running = store.launches.mark_running(RUN, claimed.claim_token or "")
    assert isinstance(running, LaunchRecord)
    return running


def test_only_the_enqueue_and_the_ending_wait_for_the_disk(
        tmp_path: Path, wal_syncs: list[str]) -> None:
    store = SqliteStore(tmp_path / "store.sqlite3")
    statements: list[str] = []
    store._db.trace(statements.append)
    launches = store.launches
    levels: dict[str, list[str]] = {}
    pragmas: dict[str, int] = {}
    syncs: dict[str, list[str]] = {}
    trail: list[str] = []  # every statement so far: the level carries over steps

    def took(step: str) -> None:
        trail.extend(statements)
        levels[step] = _sync_levels(trail)[-1:]
        pragmas[step] = sum(sql.startswith("PRAGMA synchronous") for sql in statements)
        syncs[step] = wal_syncs[:]
        statements[:] = []
        wal_syncs[:] = []

    launches.enqueue(NewLaunch(RUN, "wf", {"kind": "file"}, "d" * 64, {"n": 1}))
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
                      "running": ["NORMAL"], "finish": ["NORMAL"]}
    # The ending's commit is made durable by a WAL sync of its own after the commit
    # (and before `finish` returns); no other step syncs from Python.
    assert syncs == {"enqueue": [], "claim": [], "renew": [], "running": [],
                     "finish": ["store.sqlite3-wal"]}
    assert pragmas == {"enqueue": 0, "claim": 1, "renew": 0, "running": 0, "finish": 0}
    # The level stays until a write asks for another one; settings() reports the
    # durable writes' level, FULL.
    assert store._db.settings()["synchronous"] == 2
    store.close()


def test_an_ending_syncs_after_letting_the_write_lock_go(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Group commit: while one ending waits for its WAL sync, another writer commits
    (the sync holds no lock), and the ending returns only once its sync is done."""
    store = SqliteStore(tmp_path / "store.sqlite3")
    running = _running(store)
    syncing, release = threading.Event(), threading.Event()
    real = os.fdatasync

    def slow_sync(fd: int) -> None:
        syncing.set()
        assert release.wait(30)
        real(fd)

    monkeypatch.setattr(os, "fdatasync", slow_sync)
    returned = threading.Event()
    ending = threading.Thread(target=lambda: (
        store.launches.finish(RUN, running.claim_token or ""), returned.set()))
    ending.start()
    assert syncing.wait(30)
    # The ending committed (another connection sees it) but has not returned: its
    # sync is still under way, and the writers' turn is free meanwhile.
    other = SqliteStore(tmp_path / "store.sqlite3", busy_timeout_ms=2000)
    try:
        seen = other.launches.get(RUN)
        assert seen is not None
        assert seen.status == "done"
        assert not returned.is_set()
        queued = other.launches.enqueue(NewLaunch("wf-20261201T000001Z-0000000b", "wf",
                                                  {"kind": "file"}, "d" * 64, {}))
        assert isinstance(queued, LaunchRecord)  # committed while the ending syncs
        assert not returned.is_set()
    finally:
        release.set()
        ending.join(30)
        other.close()
    assert returned.is_set()
    store.close()


def test_a_failed_wal_sync_is_a_one_line_store_error(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = SqliteStore(tmp_path / "store.sqlite3")
    running = _running(store)

    def broken(fd: int) -> None:
        raise OSError(errno.EIO, os.strerror(errno.EIO))

    monkeypatch.setattr(os, "fdatasync", broken)
    with pytest.raises(StoreUnreachable) as raised:  # not a disk-full or read-only fault
        store.launches.finish(RUN, running.claim_token or "")
    assert "\n" not in raised.value.message
    assert raised.value.message.startswith("cannot sync the store at ")
    assert raised.value.message.endswith(os.strerror(errno.EIO))
    store.close()


def test_a_durable_write_after_relaxed_ones_on_another_thread_still_waits(
        tmp_path: Path) -> None:
    # Relaxed writes (the claim, `mark_running`) leave their connection at NORMAL; it
    # goes back to the pool when its thread ends, and the next thread's durable commit
    # on it must set FULL first.
    store = SqliteStore(tmp_path / "store.sqlite3")
    launches = store.launches
    launches.enqueue(NewLaunch(RUN, "wf", {"kind": "file"}, "d" * 64, {"n": 1}))

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

    def park() -> tuple[int, object]:
        conn = store._db._writer_connection()  # the writes' one connection
        level = conn.execute("PRAGMA synchronous").fetchone()[0]
        conn.set_trace_callback(statements.append)
        return level, launches.park(record.run_id, token)

    level, parked = in_thread(park)  # type: ignore[misc]
    assert level == 1  # the claim left it at NORMAL
    assert isinstance(parked, LaunchRecord)
    assert parked.status == "parked"
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
    store._db.trace(statements.append)
    assert launches.check_claim(claimed.run_id, claimed.claim_token or "") == "starting"
    assert len(statements) == 1
    columns = statements[0].split(" FROM ")[0].removeprefix("SELECT ").split(", ")
    assert columns[:3] == ["status", "claim_token", "claim_expires_at"]
    assert len(columns) == 4
    assert columns[3].endswith(" AS fence_now")
    store.close()


def test_launches_queued_together_share_one_durable_commit(
        tmp_path: Path, wal_syncs: list[str]) -> None:
    """Group commit (webhook deliveries that arrive together): five launches, one
    `BEGIN IMMEDIATE ... COMMIT`, made durable by one WAL sync after the writers' turn
    is let go (`shared_sync`), so one sync for all five and none under the lock."""
    store = SqliteStore(tmp_path / "store.sqlite3")
    wal_syncs.clear()
    statements: list[str] = []
    store._db.trace(statements.append)
    done = store.triggers.fire_many([NewFiring(
        "wf", "push", f"delivery:{n}", f"wf-20261201T000000Z-0000000{n}",
        NewLaunch(f"wf-20261201T000000Z-0000000{n}", "wf", {"kind": "file"}, "d" * 64,
                  {"n": n})) for n in range(5)])
    assert all(isinstance(d.launch, LaunchRecord) for d in done)
    assert _sync_levels(statements) == ["NORMAL"]  # no sync while the lock is held
    assert wal_syncs == ["store.sqlite3-wal"]  # ... and one after, before it returned
    assert sum(sql.startswith("BEGIN") for sql in statements) == 1
    # One multi-row statement for the five firings and one for their launches.
    assert sum(sql.startswith("INSERT INTO trigger_firings") for sql in statements) == 1
    assert sum(sql.startswith("INSERT INTO workflow_run_queue") for sql in statements) == 1
    assert len(store.launches.query()) == 5
    store.close()


#: A process that queues batches of 20 deliveries (`fire_many`) one after another,
#: printing each batch's number once `fire_many` returned (when a sender is answered).
_BATCHES = """
import sys
from runner.store import SqliteStore
from runner.store._records import NewLaunch
from runner.store.domain._triggers import NewFiring
store = SqliteStore(sys.argv[1])
for b in range(10_000):
    runs = [f"wf-20261201T000000Z-{b:04d}{n:04d}" for n in range(20)]
    store.triggers.fire_many([NewFiring("wf", "push", f"delivery:{r}", r, NewLaunch(
        r, "wf", {"kind": "file"}, "d" * 64, {"n": n})) for n, r in enumerate(runs)])
    print(b, flush=True)
"""


def test_a_batch_returned_by_fire_many_survives_sigkill_and_a_cut_one_leaves_nothing(
        tmp_path: Path) -> None:
    """The multi-row path's durability: a batch `fire_many` returned (its senders
    were answered) is all in the store after the process is SIGKILLed, firings,
    runs and their queued events; the batch the kill cut is all or nothing."""
    path = tmp_path / "store.sqlite3"
    SqliteStore(path).close()
    child = subprocess.Popen([sys.executable, "-c", _BATCHES, str(path)],
                             stdout=subprocess.PIPE, text=True)
    assert child.stdout is not None
    lines = LineReader(child.stdout)
    returned = -1
    while returned < 5:  # a few batches in: the kill lands amid the next ones
        line = lines.next_line()
        assert line is not None, "the batch process ended early"
        returned = int(line)
    child.send_signal(signal.SIGKILL)
    child.wait(timeout=30)
    while (line := lines.next_line()) is not None:  # batches returned before the kill
        returned = int(line)
    child.stdout.close()
    store = SqliteStore(path)
    try:
        firings = store.triggers.firings("wf", "push", limit=100_000)
        launches = {r.run_id for r in store.launches.query(limit=100_000)}
        assert {f.run_id for f in firings} == launches  # no firing without its run
        assert all(f.outcome == "launched" for f in firings)
        batches = Counter((r or "")[-8:-4] for r in launches)
        assert set(batches.values()) == {20}  # whole batches only
        assert {f"{b:04d}" for b in range(returned + 1)} <= set(batches)
        events = store.run_events.read(limit=1_000_000)
        assert Counter(e.run_id for e in events if e.type == "launch.queued") == \
            Counter(launches)
    finally:
        store.close()


def test_an_item_lease_renewal_does_not_wait_for_the_disk_and_a_settle_does(
        tmp_path: Path, wal_syncs: list[str]) -> None:
    """A host renews its item leases every half second: a relaxed commit (a renewal a
    power cut loses only shortens a dead holder's lease). The settle that hands the
    slot its next item is durable (its WAL sync) before the next item may start."""
    from runner.store.domain._fanout import ItemEnding, ItemKey, SharedNode

    store = SqliteStore(tmp_path / "store.sqlite3")
    running = _running(store)
    key = ItemKey(RUN, "each", 1)
    store.fanout.open(key, 3, owner=running.claim_token or "",
                      shared=SharedNode(2, 30_000, False))
    holder = "item:h2:1"
    claimed = store.fanout.claim_for_host(holder, 1)
    assert [c.index for c in claimed] == [0]
    # A durable write (FULL) last, so a relaxed renewal has to say so.
    assert store.fanout.wait_for_hosts(key, owner=running.claim_token or "") is True
    statements: list[str] = []
    store._db.trace(statements.append)
    wal_syncs[:] = []
    held = store.fanout.renew_held(holder, {(key, 0): None})
    assert held == {(key, 0)}
    assert _sync_levels(statements)[-1:] == ["NORMAL"]
    assert wal_syncs == []
    _, more = store.fanout.settle_and_claim(key, [ItemEnding(0, "ok", output_json="1")],
                                            holder=holder, want=1)
    assert [c.index for c in more] == [1]
    assert wal_syncs == ["store.sqlite3-wal"]
    store.close()
