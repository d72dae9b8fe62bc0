"""SQLite only: machine faults under the store, with real faults (issue 10).

A small tmpfs filled to its last page (full disk), a read-only bind mount (root
ignores file modes), pages overwritten with garbage, a foreign WAL-mode file with a
leftover `-wal`: each raises its own class, says what to do, never advises a
reset, and changes nothing (byte- and file-identical where the file is refused).
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import stat
from collections.abc import Iterator
from pathlib import Path

import machinefaults as mf
import pytest
from storekit import SECRET, launch

from runner.store import LaunchRecord, SqliteStore, StoreDiskFull, StoreError, StoreReadOnly
from runner.store._errors import IncompatibleLayout, StoreCorrupt

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "project" / ".wfrun" / "state" / "store.sqlite3"


@pytest.fixture
def disk(tmp_path: Path) -> Iterator[Path]:
    with mf.tmpfs(tmp_path / "disk", "2m") as where:
        yield where


def _no_reset_advice(exc: StoreError) -> None:
    assert "store reset" not in exc.message
    assert "\n" not in exc.message


def _foreign_wal_store_with_a_leftover_wal(path: Path) -> None:
    """Another program's WAL-mode file whose writer died: its commits are in the -wal
    (never checkpointed), and nobody has it open (no -shm)."""
    path.parent.mkdir(parents=True)
    live = path.parent / "live" / path.name
    live.parent.mkdir()
    conn = sqlite3.connect(live, isolation_level=None)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA wal_autocheckpoint = 0")
    conn.execute("CREATE TABLE notes (body TEXT)")
    conn.execute("INSERT INTO notes VALUES ('keep me')")
    shutil.copyfile(live, path)  # while it is open: the crash image
    shutil.copyfile(f"{live}-wal", f"{path}-wal")
    conn.close()
    shutil.rmtree(live.parent)
    assert Path(f"{path}-wal").stat().st_size > 0
    assert not Path(f"{path}-shm").exists()


def test_refusing_a_foreign_wal_store_with_a_leftover_wal_creates_no_shm(path: Path) -> None:
    _foreign_wal_store_with_a_leftover_wal(path)
    before = mf.snapshot(path.parent)
    with pytest.raises(IncompatibleLayout) as caught:
        SqliteStore(path)
    assert "unexpected table(s) notes" in caught.value.message
    assert str(path) in caught.value.message
    assert mf.snapshot(path.parent) == before  # byte- and file-identical: no -shm


def test_our_store_with_a_leftover_wal_opens_with_its_commits(path: Path) -> None:
    """The private copy is only for the check: the real open replays the -wal."""
    with SqliteStore(path) as store:
        store.launches.enqueue(launch("run-1"))
    live = path.parent / "live"
    live.mkdir()
    shutil.copyfile(path, live / path.name)
    conn = sqlite3.connect(live / path.name, isolation_level=None)
    conn.execute("PRAGMA wal_autocheckpoint = 0")
    conn.execute("UPDATE workflow_run_queue SET workflow_ref = 'later' WHERE run_id = 'run-1'")
    shutil.copyfile(live / path.name, path)
    shutil.copyfile(live / f"{path.name}-wal", f"{path}-wal")
    conn.close()
    with SqliteStore(path) as store:
        record = store.launches.get("run-1")
        assert record is not None
        assert record.workflow_ref == "later"


def test_a_damaged_page_is_corrupt_never_a_layout(path: Path) -> None:
    with SqliteStore(path) as store:
        for n in range(3):
            store.launches.enqueue(launch(f"run-{n}"))
        store.checkpoint()
    mf.overwrite_page(path, mf.root_pages(path)["workflow_run_queue"])
    damaged = mf.sha256(path)
    with SqliteStore(path) as store:  # the layout itself is readable
        with pytest.raises(StoreCorrupt) as caught:
            store.launches.query()
        _no_reset_advice(caught.value)
        assert "is damaged" in caught.value.message
        assert "keep a copy of the file" in caught.value.message
        assert store.integrity_problems()
    assert mf.sha256(path) == damaged


def test_a_damaged_header_page_is_corrupt_at_open(path: Path) -> None:
    SqliteStore(path).close()
    mf.overwrite_page(path, 1)
    before = mf.snapshot(path.parent)
    with pytest.raises(StoreCorrupt) as caught:
        SqliteStore(path)
    _no_reset_advice(caught.value)
    assert mf.snapshot(path.parent) == before


def test_a_truncated_store_is_corrupt(path: Path) -> None:
    with SqliteStore(path) as store:
        for n in range(20):
            store.launches.enqueue(launch(f"run-{n}", input={"blob": "x" * 8000}))
        store.checkpoint()
    mf.truncate(path, path.stat().st_size // 3)
    try:  # the open finds it (schema pages gone) or the page check does
        with SqliteStore(path, read_only=True) as store:
            assert store.integrity_problems()
    except StoreCorrupt as exc:
        _no_reset_advice(exc)
    mf.truncate(path, 60)
    with pytest.raises(StoreCorrupt) as caught:
        SqliteStore(path)
    assert "truncated to 60 bytes" in caught.value.message
    _no_reset_advice(caught.value)


def test_a_full_disk_refuses_the_write_and_loses_nothing(disk: Path) -> None:
    path = disk / "state" / "store.sqlite3"
    with SqliteStore(path) as store:
        for n in range(3):
            assert isinstance(store.launches.enqueue(launch(f"run-{n}")), LaunchRecord)
        filler = mf.fill(disk)
        with pytest.raises(StoreDiskFull) as caught:
            store.launches.enqueue(launch("big", input={"blob": "y" * 600_000}))
        _no_reset_advice(caught.value)
        assert "no space left" in caught.value.message
        assert [r.run_id for r in store.launches.query()] == ["run-0", "run-1", "run-2"]
        filler.unlink()
        assert isinstance(store.launches.enqueue(launch("big", input={"blob": "y" * 600_000})),
                          LaunchRecord)
        record = store.launches.get("run-0")
        assert record is not None
        assert record.input()["token"] == SECRET


def test_opening_on_a_full_disk_is_disk_full_and_reading_still_works(disk: Path) -> None:
    path = disk / "state" / "store.sqlite3"
    with SqliteStore(path) as store:
        store.launches.enqueue(launch("run-1"))
    mf.fill(disk)
    with pytest.raises(StoreDiskFull):
        SqliteStore(path)  # a writer needs room for its -wal and -shm
    with SqliteStore(path, read_only=True) as store:  # a view does not
        assert [r.run_id for r in store.launches.query()] == ["run-1"]


def test_a_read_only_mount_is_read_only_and_a_view_still_reads(path: Path) -> None:
    with SqliteStore(path) as store:
        store.launches.enqueue(launch("run-1"))
    before = mf.snapshot(path.parent)
    with mf.read_only(path.parent):
        with pytest.raises(StoreReadOnly) as caught:
            SqliteStore(path)
        _no_reset_advice(caught.value)
        assert "read-only" in caught.value.message
        with SqliteStore(path, read_only=True) as store:
            record = store.launches.get("run-1")
            assert record is not None
            assert record.status == "queued"
            with pytest.raises(StoreReadOnly):
                store.launches.cancel("run-1")
        assert mf.snapshot(path.parent) == before  # not a byte, not a -shm


def test_a_read_only_view_on_a_writable_folder_changes_nothing(path: Path) -> None:
    with SqliteStore(path) as store:
        store.launches.enqueue(launch("run-1"))
    before = mf.snapshot(path.parent)
    with SqliteStore(path, read_only=True) as store:
        assert [r.run_id for r in store.launches.query()] == ["run-1"]
        with pytest.raises(StoreReadOnly):
            store.launches.cancel("run-1")
    after = mf.snapshot(path.parent)
    assert {k: v for k, v in after.items() if not k.endswith(("-shm", "-wal"))} == before


def test_every_folder_the_store_creates_is_0700_under_umask_000(tmp_path: Path) -> None:
    old = os.umask(0)
    try:
        path = tmp_path / "home" / "deep" / "state" / "store.sqlite3"
        SqliteStore(path).close()
    finally:
        os.umask(old)
    for folder in (tmp_path / "home", tmp_path / "home" / "deep", path.parent):
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700, folder
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
