"""The SQLite store's open procedure (see docs/store.md); the connections it hands
back are db.py's, the file's creation and inspection files.py's.

1. Refuse SQLite older than 3.35 (RETURNING, partial indexes, UPSERT).
2. An existing file is inspected through a read-only connection before anything
   writes to it: a file in WAL mode that nobody has open (no `-shm` beside it) is
   read with `immutable=1` so not even the `-shm`/`-wal` sidecars appear; otherwise
   `mode=ro`. Another layout raises IncompatibleLayout and leaves the file
   byte-identical. A damaged, full, read-only or forbidden file raises its own
   class (`runner.store._faults`), never IncompatibleLayout.
3. A missing store is built complete (WAL, schema) in a private temporary file
   created 0600 (folder 0700) before its first SQLite open, so SQLite creates
   `-wal`/`-shm` with the same mode, and hard-linked into place: others see no
   store or a finished one. An existing empty file is set up in place.
4. Every connection sets WAL, `synchronous=FULL`, `busy_timeout`, `foreign_keys=ON`
   and `secure_delete=ON` (`_files.connect`).

A read-only database (`read_only=True`, for views such as `wfrun status`) never
creates, sets up or tightens anything and opens `mode=ro`, or `immutable=1` when
its folder cannot be written and no `-wal` exists (a read-only project).
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from runner.store._errors import IncompatibleLayout, StoreCorrupt, StoreUnavailable
from runner.store._layout import ADDED_INDEXES, ADDED_TABLES, RETIRED_INDEXES, ROWID_DROPPED
from runner.store.sqlite._db import SqliteDatabase, translate
from runner.store.sqlite._files import (
    check_sqlite_version,
    create_store_file,
    inspect_existing,
    sidecar_paths,
    tighten_permissions,
)
from runner.store.sqlite._schema import (
    add_missing_indexes,
    create_schema,
    layout_drift,
    read_layout,
    schema_id_drift,
)


def open_database(path: Path, *, now_ms: int, busy_timeout_ms: int,
                  read_only: bool = False) -> SqliteDatabase:
    """Run the open procedure and return a ready database. `read_only` opens an
    existing, set-up store for reading only (it creates and changes nothing)."""
    check_sqlite_version()
    if path.is_dir():
        raise StoreUnavailable(f"the store path {path} is a directory")
    if not path.exists():
        orphans = [p.name for p in sidecar_paths(path) if p.exists()]
        if orphans and not path.exists():  # SQLite could replay an orphaned WAL
            # Not a layout mismatch: resetting would delete the commits in the orphan.
            raise StoreCorrupt(
                f"the store file {path} is missing but {', '.join(orphans)} remain(s) beside "
                "it; nothing was changed. Restore the store file from a backup, or move the "
                "leftover file(s) aside to start a new, empty store"
            )
        if read_only:
            raise StoreUnavailable(f"no store at {path} yet; it is created on the first start")
        create_store_file(path, now_ms)
    state = inspect_existing(path)
    if read_only:
        if state == "empty":
            raise StoreUnavailable(f"the store {path} is empty (not set up yet); "
                                   "any command that writes sets it up")
        db = SqliteDatabase(path, busy_timeout_ms=busy_timeout_ms, read_only=True)
        try:
            db.connection()
        except BaseException:
            db.close()
            raise
        return db
    tighten_permissions(path)
    db = SqliteDatabase(path, busy_timeout_ms=busy_timeout_ms)
    try:
        db.connection()
        if state == "empty":
            _initialize(db, now_ms)
        else:
            _add_missing_indexes(db)
        tighten_permissions(path)
    except BaseException:
        db.close()
        raise
    return db


def _initialize(db: SqliteDatabase, now_ms: int) -> None:
    """Create the schema in an empty store, or verify what another process made."""
    with db.write() as conn:
        layout = read_layout(conn)
        if layout.empty:
            create_schema(conn, now_ms)
            return
        drift = layout_drift(layout) or schema_id_drift(conn)
        if drift:
            raise IncompatibleLayout(str(db.path), drift)
        add_missing_indexes(conn, layout)


def _add_missing_indexes(db: SqliteDatabase) -> None:
    """Create what `layout.ADDED_INDEXES` and `ADDED_TABLES` name and this store
    lacks, drop the `RETIRED_INDEXES` it has and rebuild the `ROWID_DROPPED` tables
    it has with rowids (one read when there is nothing to do)."""
    wanted = sorted(ADDED_INDEXES | ADDED_TABLES)
    looked = [*wanted, *sorted(RETIRED_INDEXES)]
    marks = ", ".join("?" * len(looked))
    try:
        rows = db.connection().execute(
            "SELECT name, sql FROM sqlite_master WHERE type IN ('index', 'table')"
            f" AND name IN ({marks})", looked).fetchall()
    except sqlite3.Error as exc:
        raise translate(exc, db.path) from None
    present = {str(name): str(sql) for name, sql in rows}
    if len(set(wanted) & set(present)) != len(wanted) \
            or RETIRED_INDEXES & set(present) or any(
                not present[t].rstrip().endswith("WITHOUT ROWID")
                for t in ROWID_DROPPED if t in present):
        with db.write() as conn:
            add_missing_indexes(conn, read_layout(conn))
