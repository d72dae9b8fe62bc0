"""SQLite only: the file, its permissions, settings, the layout check and reset."""

from __future__ import annotations

import hashlib
import os
import sqlite3
import stat
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from storekit import SECRET, FakeClock, launch

from runner.store import LaunchRecord, SqliteStore, StoreError, StoreUnavailable
from runner.store._errors import IncompatibleLayout, SqliteTooOld, StoreCorrupt
from runner.store._layout import SCHEMA_ID
from runner.store.sqlite._schema import DDL


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "project" / ".wfrun" / "state" / "store.sqlite3"


@pytest.fixture
def open_umask() -> Iterator[None]:
    """Run with umask 000, so only the store's own care makes files private."""
    old = os.umask(0)
    try:
        yield
    finally:
        os.umask(old)


def _mode(p: Path) -> int:
    return stat.S_IMODE(p.stat().st_mode)


def _snapshot(folder: Path) -> dict[str, tuple[str, int]]:
    """Every file in `folder`: its sha256 and mode."""
    return {
        p.name: (hashlib.sha256(p.read_bytes()).hexdigest(), _mode(p))
        for p in sorted(folder.iterdir())
    }


# --- permissions and settings ----------------------------------------------------------


@pytest.mark.usefixtures("open_umask")
def test_folder_is_0700_and_file_wal_and_shm_are_0600(path: Path) -> None:
    with SqliteStore(path) as store:
        store.launches.enqueue(launch("run-1"))
        wal, shm = Path(f"{path}-wal"), Path(f"{path}-shm")
        assert wal.exists()
        assert shm.exists()
        assert _mode(path.parent) == 0o700
        assert {_mode(p) for p in (path, wal, shm)} == {0o600}


@pytest.mark.usefixtures("open_umask")
def test_opening_tightens_loose_permissions_of_a_valid_store(path: Path) -> None:
    SqliteStore(path).close()
    path.parent.chmod(0o755)
    path.chmod(0o644)
    with SqliteStore(path) as store:
        store.launches.enqueue(launch("run-1"))
        assert _mode(path.parent) == 0o700
        assert _mode(path) == 0o600
        assert _mode(Path(f"{path}-wal")) == 0o600


def test_durability_settings(path: Path) -> None:
    with SqliteStore(path, busy_timeout_ms=4321) as store:
        assert store.settings() == {
            "journal_mode": "wal",
            "synchronous": 2,  # FULL
            "busy_timeout": 4321,
            "foreign_keys": 1,
            "secure_delete": 1,
        }


def test_every_write_is_a_begin_immediate_transaction(path: Path, clock: FakeClock) -> None:
    with SqliteStore(path, clock=clock) as store:
        statements: list[str] = []
        store._db.trace(statements.append)
        store.launches.enqueue(launch("run-1", origin_session_id="s"))
        claimed = store.launches.claim_next(runner_id="h", session_id="s")
        assert claimed is not None
        assert claimed.claim_token
        store.launches.mark_running("run-1", claimed.claim_token)
        store.run_events.append("run-1", "custom")
        store.launches.get("run-1")
    in_tx = False
    writes = 0
    for sql in statements:
        word = sql.split()[0].upper()
        if word == "BEGIN":
            assert sql.strip().upper() == "BEGIN IMMEDIATE"
            in_tx = True
        elif word in ("COMMIT", "ROLLBACK"):
            in_tx = False
        elif word in ("INSERT", "UPDATE", "DELETE"):
            assert in_tx, sql
            writes += 1
    assert writes >= 6


def test_a_held_write_lock_makes_writes_wait_then_report_unavailable(path: Path) -> None:
    with SqliteStore(path, busy_timeout_ms=100) as store:
        store.launches.enqueue(launch("run-1"))
        blocker = sqlite3.connect(path, isolation_level=None)
        try:
            blocker.execute("BEGIN IMMEDIATE")
            with pytest.raises(StoreUnavailable, match="locked"):
                store.launches.enqueue(launch("run-2"))
            record = store.launches.get("run-1")  # WAL readers are not blocked
            assert record is not None
            assert record.status == "queued"
        finally:
            blocker.execute("ROLLBACK")
            blocker.close()
        assert isinstance(store.launches.enqueue(launch("run-2")), LaunchRecord)


def test_each_thread_gets_its_own_connection_and_claims_stay_exclusive(path: Path) -> None:
    with SqliteStore(path) as store:
        for i in range(60):
            store.launches.enqueue(launch(f"run-{i:03}"))
        claims: dict[str, list[str]] = {}
        connections: set[int] = set()
        lock = threading.Lock()
        # Every thread holds its connection before any claims: a thread that ended
        # first would hand its connection to the pool, and a later one would reuse it.
        together = threading.Barrier(4, timeout=30)

        def work(name: str) -> None:
            mine = []
            with lock:
                connections.add(id(store._db.connection()))
            together.wait()
            while (claimed := store.launches.claim_next(runner_id=name)) is not None:
                mine.append(claimed.run_id)
            with lock:
                claims[name] = mine

        threads = [threading.Thread(target=work, args=(f"t{i}",)) for i in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=30)
        taken = [run for runs in claims.values() for run in runs]
        assert sorted(taken) == [f"run-{i:03}" for i in range(60)]  # each exactly once
        assert len(connections) == 4


def test_sqlite_older_than_3_35_is_refused_before_any_file_exists(
    path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sqlite3, "sqlite_version_info", (3, 34, 1))
    monkeypatch.setattr(sqlite3, "sqlite_version", "3.34.1")
    with pytest.raises(SqliteTooOld, match=r"SQLite 3\.34\.1 is too old.*3\.35\.0"):
        SqliteStore(path)
    assert not path.parent.exists()


def test_a_path_that_is_a_directory_is_refused(tmp_path: Path) -> None:
    with pytest.raises(StoreUnavailable, match="directory"):
        SqliteStore(tmp_path)


# --- layout check ---------------------------------------------------------------------


def _make_db(path: Path, statements: list[str], *, wal: bool) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    conn = sqlite3.connect(path, isolation_level=None)
    if wal:
        conn.execute("PRAGMA journal_mode = WAL")
    for statement in statements:
        conn.execute(statement)
    conn.close()
    assert not Path(f"{path}-wal").exists()


def _old_layout() -> list[str]:
    """Today's DDL with the queue's `epoch` column missing (an older alpha layout)."""
    ddl = [
        s.replace("    epoch INTEGER NOT NULL DEFAULT 0 CHECK (epoch >= 0),\n", "")
        if s.startswith("CREATE TABLE workflow_run_queue")
        else s
        for s in DDL
    ]
    assert ddl != list(DDL)
    return [*ddl, f"INSERT INTO schema_info VALUES (1, '{SCHEMA_ID}', 0)"]


def _refusal(path: Path) -> str:
    with pytest.raises(StoreError) as caught:
        SqliteStore(path)
    return str(caught.value)


def _assert_refused(path: Path, fragment: str) -> None:
    before = _snapshot(path.parent)
    with pytest.raises(IncompatibleLayout) as caught:
        SqliteStore(path)
    message = str(caught.value)
    assert fragment in message
    assert "Keep the run bundles you need (.wfrun/runs/)" in message
    assert "`wfrun store reset --yes`" in message
    assert "\n" not in message
    assert _snapshot(path.parent) == before  # byte-identical, no sidecar files either


@pytest.mark.parametrize("wal", [False, True], ids=["rollback-journal", "wal"])
def test_an_old_column_set_is_refused_and_left_byte_identical(path: Path, wal: bool) -> None:
    _make_db(path, _old_layout(), wal=wal)
    _assert_refused(path, "table workflow_run_queue: missing column(s) epoch")


def test_another_schema_id_is_refused(path: Path) -> None:
    SqliteStore(path).close()
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("UPDATE schema_info SET schema_id = 'pi-workflows.controller-store.v1'")
    conn.close()
    _assert_refused(path, "schema id is 'pi-workflows.controller-store.v1'")


@pytest.mark.parametrize(
    ("change", "fragment"),
    [
        ("CREATE TABLE queue (controller TEXT)", "unexpected table(s) queue"),
        (
            "DROP INDEX workflow_run_queue_session_reservation",
            "missing index workflow_run_queue_session_reservation",
        ),
        ("CREATE INDEX extra_idx ON run_events (type)", "unexpected index(es) extra_idx"),
        ("CREATE VIEW v AS SELECT 1", "unexpected schema object(s) view v"),
        ("DROP TABLE controller_events", "missing table(s) controller_events"),
    ],
)
def test_other_layout_changes_are_refused(path: Path, change: str, fragment: str) -> None:
    SqliteStore(path).close()
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute(change)
    conn.close()
    _assert_refused(path, fragment)


def test_a_changed_state_contract_is_refused(path: Path) -> None:
    """Same columns, but the old alpha status set (with `claimed`) in the CHECK."""
    ddl = [
        s.replace("'queued', 'starting'", "'queued', 'claimed', 'starting'", 1)
        if s.startswith("CREATE TABLE workflow_run_queue")
        else s
        for s in DDL
    ]
    _make_db(path, [*ddl, f"INSERT INTO schema_info VALUES (1, '{SCHEMA_ID}', 0)"], wal=True)
    _assert_refused(path, "table workflow_run_queue: constraints differ")


def _assert_refused_as_damaged(path: Path, fragment: str) -> None:
    """Refused, untouched, and never with the reset advice (it would delete the file)."""
    before = _snapshot(path.parent)
    with pytest.raises(StoreCorrupt) as caught:
        SqliteStore(path)
    message = str(caught.value)
    assert fragment in message
    assert "store reset" not in message
    assert "\n" not in message
    assert _snapshot(path.parent) == before


def test_a_file_that_is_not_sqlite_is_refused_as_damaged(path: Path) -> None:
    path.parent.mkdir(parents=True)
    path.write_bytes(b"this is not a database, keep it\n" * 10)
    _assert_refused_as_damaged(path, "not a SQLite database")
    assert "keep a copy of the file" in _refusal(path)


def test_an_empty_file_becomes_a_store(path: Path) -> None:
    path.parent.mkdir(parents=True)
    path.touch()
    with SqliteStore(path) as store:
        assert isinstance(store.launches.enqueue(launch("run-1")), LaunchRecord)


def test_reopening_keeps_the_data(path: Path) -> None:
    with SqliteStore(path) as store:
        store.launches.enqueue(launch("run-1"))
    with SqliteStore(path) as store:
        record = store.launches.get("run-1")
        assert record is not None
        assert record.input()["token"] == SECRET


def _open_concurrently(path: Path, count: int) -> tuple[list[SqliteStore], list[BaseException]]:
    """Open `count` stores on `path` at the same moment from as many threads."""
    errors: list[BaseException] = []
    stores: list[SqliteStore] = []
    lock = threading.Lock()
    start = threading.Barrier(count)

    def open_one() -> None:
        start.wait()
        try:
            opened = SqliteStore(path)
        except BaseException as exc:
            with lock:
                errors.append(exc)
            return
        with lock:
            stores.append(opened)

    threads = [threading.Thread(target=open_one) for _ in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    return stores, errors


@pytest.mark.parametrize("precreated", [False, True], ids=["missing", "empty-file"])
def test_openers_racing_to_create_a_store_agree(tmp_path: Path, precreated: bool) -> None:
    for trial in range(10):
        path = tmp_path / f"trial-{trial}" / "store.sqlite3"
        if precreated:
            path.parent.mkdir()
            path.touch()
        stores, errors = _open_concurrently(path, 6)
        try:
            assert errors == []
            assert len(stores) == 6
            stores[0].launches.enqueue(launch("run-1"))
            assert stores[5].launches.get("run-1") is not None
        finally:
            for opened in stores:
                opened.close()
        # The writers' queue sidecar (writelock.py) stays: it holds no data.
        assert sorted(p.name for p in path.parent.iterdir()) == ["store.sqlite3",
                                                                  "store.sqlite3.wlock"]


def test_orphaned_sidecars_without_a_store_file_are_refused(path: Path) -> None:
    with SqliteStore(path) as store:
        store.launches.enqueue(launch("run-1"))
        wal = Path(f"{path}-wal").read_bytes()
    path.unlink()
    Path(f"{path}-wal").write_bytes(wal or b"x")
    _assert_refused_as_damaged(path, "is missing but store.sqlite3-wal remain(s)")
    assert "move the leftover file(s) aside" in _refusal(path)
    assert not path.exists()
    with SqliteStore.reset(path) as store:
        assert store.launches.query() == []


# --- reset ----------------------------------------------------------------------------


def test_reset_recreates_only_the_store_file(path: Path) -> None:
    project = path.parent.parent.parent
    bundle = project / ".wfrun" / "runs" / "review-20260101T000000Z-abcd1234"
    bundle.mkdir(parents=True)
    (bundle / "trace.jsonl").write_text('{"seq": 1}\n')
    neighbour = path.parent / "notes.txt"
    _make_db(path, _old_layout(), wal=True)
    neighbour.write_text("keep me")
    with pytest.raises(IncompatibleLayout):
        SqliteStore(path)
    with SqliteStore.reset(path) as store:
        assert store.launches.query() == []
        assert isinstance(store.launches.enqueue(launch("run-1")), LaunchRecord)
    assert (bundle / "trace.jsonl").read_text() == '{"seq": 1}\n'
    assert neighbour.read_text() == "keep me"
    with SqliteStore(path) as store:
        assert [r.run_id for r in store.launches.query()] == ["run-1"]


def test_reset_of_a_missing_store_creates_one(path: Path) -> None:
    with SqliteStore.reset(path) as store:
        assert store.schema_id == SCHEMA_ID
    assert _mode(path) == 0o600


# --- private input ----------------------------------------------------------------------


def _file_bytes(path: Path) -> bytes:
    wal = Path(f"{path}-wal")
    return path.read_bytes() + (wal.read_bytes() if wal.exists() else b"")


def _clear_secrets(store: SqliteStore, path: Path) -> bytes:
    """Enqueue secrets, drive each launch out of queued/starting, checkpoint; file bytes."""
    big = SECRET + "-overflow-" + "z" * 12_000  # spills into overflow pages
    for run_id, secret in (("small", SECRET), ("big", big), ("fails", SECRET), ("cancels", SECRET)):
        store.launches.enqueue(
            launch(run_id, input={"token": secret}, options={"header": f"Bearer {SECRET}"})
        )
    store.checkpoint()
    assert SECRET.encode() in _file_bytes(path)
    for run_id in ("small", "big"):
        claimed = store.launches.claim(run_id, runner_id="h")
        assert isinstance(claimed, LaunchRecord)
        assert claimed.claim_token
        store.launches.mark_running(run_id, claimed.claim_token)
    claimed = store.launches.claim("fails", runner_id="h")
    assert isinstance(claimed, LaunchRecord)
    assert claimed.claim_token
    store.launches.fail(
        "fails",
        claimed.claim_token,
        code="input_invalid",
        message="input does not match the schema",
    )
    store.launches.cancel("cancels")
    for run_id in ("small", "big", "fails", "cancels"):
        record = store.launches.get(run_id)
        assert record is not None
        assert record.input_cleared
        assert record.options_json is None
    store.checkpoint()
    assert Path(f"{path}-wal").stat().st_size == 0
    return _file_bytes(path)


def test_cleared_private_input_leaves_no_bytes_in_the_database_or_wal(path: Path) -> None:
    with SqliteStore(path) as store:
        data = _clear_secrets(store, path)
    assert SECRET.encode() not in data
    assert b"zzzzzzzzzzzzzzzz" not in data


def test_without_secure_delete_the_same_check_finds_the_secret(path: Path) -> None:
    """The control for the test above: SQLite keeps freed cell bytes unless told not to."""
    with SqliteStore(path) as store:
        store._db._writer_connection().execute("PRAGMA secure_delete = OFF")
        data = _clear_secrets(store, path)
    assert SECRET.encode() in data
