"""What only the Postgres backend has: its layout check and reset on a real cluster,
the database clock, SKIP LOCKED claims from several stores at once, LISTEN/NOTIFY
wake-ups, and connection loss as a retryable StoreUnreachable (with the URL's
password never shown). The shared conformance suite runs on it via conftest.py."""

from __future__ import annotations

import secrets
import threading
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from pgcluster import PgCluster
from storekit import FakeClock, launch
from waiting import wait_until

from runner.store import LaunchRecord, LostRace, StoreError, StoreUnreachable
from runner.store._errors import IncompatibleLayout
from runner.store._urls import mask_url
from runner.store.postgres import PostgresStore

PASSWORD = "hunter2-NOT-SHOWN"


@pytest.fixture
def url(pg_cluster: PgCluster) -> str:
    return pg_cluster.create_schema(f"pgs_{secrets.token_hex(4)}")


@pytest.fixture
def pg(url: str) -> Iterator[PostgresStore]:
    with PostgresStore(url, pool_size=2) as store:
        yield store


def _admin(url: str, sql: str) -> list[tuple[object, ...]]:
    with psycopg.connect(url, autocommit=True) as conn:
        cursor = conn.execute(sql)
        rows: list[tuple[object, ...]] = cursor.fetchall() if cursor.description else []
        return rows


def test_a_new_schema_gets_the_contract_tables_and_reopens(url: str) -> None:
    with PostgresStore(url) as first:
        first.launches.enqueue(launch("run-1"))
    tables = {r[0] for r in _admin(url, "SELECT table_name FROM information_schema.tables"
                                         " WHERE table_schema = current_schema()")}
    assert {"workflow_run_queue", "run_events", "reconcile_queue", "schema_info"} <= tables
    with PostgresStore(url) as again:  # the exact-layout check passes on its own tables
        record = again.launches.get("run-1")
        assert record is not None
        assert record.status == "queued"


def test_a_store_that_passed_the_check_is_not_checked_again(
        url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The full check (a scratch schema, information_schema reads: ~0.6 s) ran on
    every CLI command (issue 34 item 12); a store whose catalog is as the last passed
    check left it opens on one fingerprint query. Any change is checked in full: the
    test below this one changes the layout after such a mark."""
    from runner.store.postgres import _schema as schema

    PostgresStore(url).close()  # creates and marks
    PostgresStore(url).close()  # a fresh process's check would mark it anyway

    def full_check(*_: object) -> None:
        raise AssertionError("the full layout check ran")

    monkeypatch.setattr(schema, "expected_layout", full_check)
    monkeypatch.setattr(schema, "layout_drift", full_check)
    with PostgresStore(url) as store:
        store.launches.enqueue(launch("run-1"))
    _admin(url, "COMMENT ON TABLE schema_info IS NULL")  # no mark: the full check
    with pytest.raises(AssertionError, match="the full layout check ran"):
        PostgresStore(url)


@pytest.mark.parametrize(
    ("change", "phrase"),
    [
        ("ALTER TABLE workflow_run_queue ADD COLUMN extra TEXT", "unexpected column(s) extra"),
        ("ALTER TABLE workflow_run_queue DROP CONSTRAINT workflow_run_queue_check",
         "constraints differ"),
        ("DROP INDEX workflow_run_queue_session_reservation",
         "missing index workflow_run_queue_session_reservation"),
        ("UPDATE schema_info SET schema_id = 'wfrun.other.v9'", "schema id is 'wfrun.other.v9'"),
        ("ALTER TABLE run_events ALTER COLUMN type TYPE VARCHAR(200)", "column types"),
        ("ALTER TABLE run_events ALTER COLUMN type SET DEFAULT 'x'", "column types"),
        ("ALTER TABLE run_events ALTER COLUMN type DROP NOT NULL", "column types"),
        ("CREATE INDEX extra_one ON run_events (type)", "unexpected index(es) extra_one"),
        ("ALTER TABLE run_events RENAME COLUMN type TO kind", "run_events"),
    ],
)
def test_another_layout_is_refused_unchanged_and_reset_rebuilds_it(
    url: str, change: str, phrase: str
) -> None:
    with PostgresStore(url) as store:
        store.launches.enqueue(launch("run-1"))
    PostgresStore(url).close()  # passed again: the store carries the mark of its layout
    _admin(url, change)
    with pytest.raises(IncompatibleLayout) as refused:
        PostgresStore(url)
    assert phrase in str(refused.value)
    assert "wfrun store reset" in str(refused.value)
    assert _admin(url, "SELECT count(*) FROM workflow_run_queue") == [(1,)]  # nothing touched
    with PostgresStore.reset(url) as fresh:
        assert fresh.launches.query() == []
    with PostgresStore(url) as reopened:
        assert reopened.launches.counts() == {}


def test_reset_drops_only_wfruns_tables(url: str) -> None:
    _admin(url, "CREATE TABLE users_own_table (id int)")
    PostgresStore(url).close()
    PostgresStore.reset(url).close()
    assert _admin(url, "SELECT count(*) FROM users_own_table") == [(0,)]


def _db_now(url: str) -> int:
    value = _admin(url, "SELECT (extract(epoch FROM now()) * 1000)::bigint")[0][0]
    assert isinstance(value, int)
    return value


def test_leases_use_the_database_clock(pg: PostgresStore, url: str) -> None:
    pg.launches.enqueue(launch("run-1"))
    before = _db_now(url)
    claim = pg.launches.claim_next(runner_id="host-a", lease_seconds=600)
    after = _db_now(url)
    assert claim is not None
    assert claim.claim_expires_at is not None
    assert before + 600_000 <= claim.claim_expires_at <= after + 600_000
    assert before <= pg.now_ms()
    # A lease that ran out on the database clock is taken over (waited for, not timed).
    pg.launches.enqueue(launch("run-2"))
    short = pg.launches.claim("run-2", runner_id="host-a", lease_seconds=0.2)
    assert isinstance(short, LaunchRecord)
    taken = wait_until(lambda: _taken(pg.launches.claim("run-2", runner_id="host-b")),
                       what="the short lease to run out on the database clock")
    assert taken is not None
    assert taken.runner_id == "host-b"
    assert taken.epoch == short.epoch + 1


def _taken(result: LaunchRecord | LostRace) -> LaunchRecord | None:
    if isinstance(result, LostRace):
        assert result.reason == "lease_active"
        return None
    return result


def test_many_stores_claim_every_launch_exactly_once(url: str) -> None:
    with PostgresStore(url) as seed:
        for n in range(60):
            seed.launches.enqueue(launch(f"run-{n:02d}"))
    claimed: dict[str, list[str]] = {}
    lock = threading.Lock()
    errors: list[BaseException] = []

    def drain(host: str) -> None:
        try:
            with PostgresStore(url, pool_size=1) as store:
                while (record := store.launches.claim_next(runner_id=host)) is not None:
                    running = store.launches.mark_running(record.run_id, record.claim_token or "")
                    assert isinstance(running, LaunchRecord)
                    with lock:
                        claimed.setdefault(record.run_id, []).append(host)
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=drain, args=(f"host-{i}",)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert sorted(claimed) == [f"run-{n:02d}" for n in range(60)]
    assert all(len(hosts) == 1 for hosts in claimed.values())
    with PostgresStore(url) as check:
        assert check.launches.counts() == {"running": 60}
        assert {r.epoch for r in check.launches.query()} == {1}


def test_wakeups_carry_detached_launch_ids_only(pg: PostgresStore) -> None:
    wakeups = pg.launch_wakeups()
    try:
        assert wakeups.wait(0) == []  # connects and listens before anything is queued
        pg.launches.enqueue(launch("run-session", origin_session_id="session-a"))
        pg.launches.enqueue(launch("run-detached"))
        assert wakeups.wait(30) == ["run-detached"]  # a session's launch is not announced
        claim = pg.launches.claim_next(runner_id="host-a")
        assert claim is not None
        pg.launches.release(claim.run_id, claim.claim_token or "")  # claimable again
        assert wakeups.wait(30) == ["run-detached"]
    finally:
        wakeups.close()


def test_an_enqueue_is_one_statement_with_its_event_and_notice(
        pg: PostgresStore, monkeypatch: pytest.MonkeyPatch) -> None:
    wakeups = pg.launch_wakeups()
    sent: list[str] = []
    blocks: list[int] = []
    real_execute, real_transaction = psycopg.Connection.execute, psycopg.Connection.transaction

    def execute(self: Any, query: Any, *args: Any, **kwargs: Any) -> Any:
        sent.append(str(query))
        return real_execute(self, query, *args, **kwargs)

    def transaction(self: Any, *args: Any, **kwargs: Any) -> Any:
        blocks.append(1)
        return real_transaction(self, *args, **kwargs)

    try:
        assert wakeups.wait(0) == []
        pg.launches.enqueue(launch("run-0"))  # the pool's connection, opened
        assert wakeups.wait(30) == ["run-0"]
        monkeypatch.setattr(psycopg.Connection, "execute", execute)
        monkeypatch.setattr(psycopg.Connection, "transaction", transaction)
        queued = pg.launches.enqueue(launch("run-1"))
        monkeypatch.undo()
        assert len(sent) == 1
        assert sent[0].startswith("WITH q AS (INSERT")
        assert blocks == []  # no BEGIN ... COMMIT: the statement commits by itself
        assert isinstance(queued, LaunchRecord)
        assert (queued.status, queued.epoch) == ("queued", 0)
        assert pg.launches.get("run-1") == queued
        events = pg.run_events.read(run_id="run-1")
        assert [(e.type, e.payload) for e in events] == [
            ("launch.queued", {"from": None, "to": "queued", "epoch": 0})]
        assert events[0].recorded_at == queued.created_at
        assert wakeups.wait(30) == ["run-1"]
        # A refused insert still names the conflict, and leaves no event behind.
        again = pg.launches.enqueue(launch("run-1"))
        assert again == LostRace("run-1", "already_exists", "queued")
        assert len(pg.run_events.read(run_id="run-1")) == 1
    finally:
        monkeypatch.undo()
        wakeups.close()


def test_a_lost_connection_is_store_unavailable_and_the_next_call_reconnects(
    url: str,
) -> None:
    with_password = url.replace("postgres@", f"postgres:{PASSWORD}@")
    store = PostgresStore(with_password, pool_size=1)
    try:
        store.launches.enqueue(launch("run-1"))
        _admin(url, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                    " WHERE pid <> pg_backend_pid() AND datname = current_database()"
                    " AND application_name <> 'keep'")
        with pytest.raises(StoreUnreachable) as lost:
            store.launches.get("run-1")
        assert PASSWORD not in str(lost.value)
        assert "***" in str(lost.value)
        record = store.launches.get("run-1")  # the broken connection was dropped
        assert record is not None
        assert record.status == "queued"
    finally:
        store.close()


def test_one_connection_until_two_operations_overlap(url: str) -> None:
    """A CLI command connects once (issue 34 item 12): the store keeps the connection
    it opened with; an operation that starts while another holds it gets its own
    from a pool made then, and neither waits for the other."""
    from runner.store.postgres._db import PostgresDatabase

    db = PostgresDatabase(url, pool_size=3)
    try:
        def backend() -> int:
            return int(db.read("SELECT pg_backend_pid() AS pid")[0]["pid"])

        first = backend()
        assert [backend() for _ in range(3)] == [first] * 3
        assert db._pool is None
        inside = threading.Event()
        release = threading.Event()
        seen: list[int] = []

        def hold() -> None:
            with db.write() as conn:
                row = conn.execute("SELECT pg_backend_pid() AS pid").fetchone()
                assert row is not None
                seen.append(int(row["pid"]))
                inside.set()
                assert release.wait(30)

        holder = threading.Thread(target=hold)
        holder.start()
        assert inside.wait(30)
        other = backend()  # while the kept connection is in a transaction
        release.set()
        holder.join(30)
        assert seen == [first]
        assert other != first
        assert db._pool is not None
        assert backend() == first  # free again: the kept one first
    finally:
        db.close()
    with pytest.raises(StoreError, match="closed"):
        db.read("SELECT 1")


@pytest.mark.timeout(300)  # the restart's own bound is 240 s (PgCluster.restart)
def test_the_server_restarting_is_survived(pg_cluster: PgCluster, url: str) -> None:
    with PostgresStore(url, pool_size=2) as store:
        store.launches.enqueue(launch("run-1"))
        pg_cluster.restart()
        outcomes = []
        for _ in range(3):  # each pooled connection fails once, then reconnects
            try:
                outcomes.append(store.launches.get("run-1"))
            except StoreUnreachable:
                outcomes.append(None)
        assert isinstance(outcomes[-1], LaunchRecord)
        store.launches.enqueue(launch("run-2"))
        assert [r.run_id for r in store.launches.query()] == ["run-1", "run-2"]


def test_an_unreachable_server_is_one_masked_line(pg_cluster: PgCluster) -> None:
    dead = f"postgresql://wfrun:{PASSWORD}@127.0.0.1:1/wfrun"
    with pytest.raises(StoreUnreachable) as refused:
        PostgresStore(dead, connect_timeout=1.0)
    message = str(refused.value)
    assert PASSWORD not in message
    assert "wfrun:***@127.0.0.1:1" in message
    assert "\n" not in message


@pytest.mark.parametrize(
    ("raw", "shown"),
    [
        ("postgresql://u:secret@h:5432/db", "postgresql://u:***@h:5432/db"),
        ("postgresql://u@h/db?password=secret&sslmode=require",
         "postgresql://u@h/db?password=***&sslmode=require"),
        ("postgres://h/db", "postgres://h/db"),
    ],
)
def test_mask_url(raw: str, shown: str) -> None:
    assert mask_url(raw) == shown


FP = "sha256:" + "ab" * 32
GONE_UID = "f" * 32


def test_retention_pins_forgets_and_trims_as_on_sqlite(url: str) -> None:
    clock = FakeClock()
    with PostgresStore(url, clock=clock) as s:
        s.launches.enqueue(launch("run-queued"))
        s.launches.enqueue(launch("run-cancelled"))
        s.launches.cancel("run-cancelled")
        ids = ["run-queued", "run-cancelled", "run-unknown"]
        assert s.retention.pinned(ids) == {"run-queued": "its launch is queued"}
        assert s.retention.forget_runs(ids) == 1
        assert s.launches.get("run-queued") is not None
        assert s.launches.get("run-cancelled") is None
        assert s.run_events.read(run_id="run-cancelled") == []

        live = s.resources.apply("ctl", "live", {"n": 1})
        for uid in (live.uid, GONE_UID):
            s.effects.reserve(uid, "done", generation=1, kind="k", request_fingerprint=FP)
            s.effects.complete(uid, "done", state="applied")
            s.effects.reserve(uid, "open", generation=1, kind="k", request_fingerprint=FP)
        s.launches.enqueue(launch("run-old-done"))
        s.launches.cancel("run-old-done")
        clock.advance(100)
        cutoff = s.now_ms()
        s.launches.enqueue(launch("run-new"))
        s.launches.cancel("run-new")
        trimmed = s.retention.trim(cutoff)
        assert trimmed.effects == 1
        assert s.effects.get(GONE_UID, "done") is None
        assert s.effects.get(GONE_UID, "open") is not None
        assert s.effects.get(live.uid, "done") is not None
        assert s.run_events.read(run_id="run-old-done") == []
        assert s.run_events.read(run_id="run-queued") != []
        assert s.run_events.read(run_id="run-new") != []
