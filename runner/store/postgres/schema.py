"""Postgres DDL for `wfrun.controller-store.v1`, the exact-layout check and reset.

The DDL is the SQLite DDL (`runner.store.sqlite.schema.DDL`, where the CHECK constraints and
partial unique indexes of the state contract are written) rewritten for Postgres
word by word: 64-bit integers for millisecond times, `octet_length` for byte
bounds, identity columns for the event feeds. One text holds the contract.

The layout check compares the store's schema (the first schema on the URL's
search_path) with the same DDL built in a scratch schema inside a transaction
that is rolled back: the contract's tables, every column (type, NOT NULL,
default), every constraint definition and every index definition. Tables that are
not wfrun's are ignored (a database may be shared); any difference in wfrun's
refuses the store with IncompatibleLayout and nothing is migrated.

Creation and reset hold a transaction-scoped advisory lock on the schema, so
concurrent openers see no tables or all of them.
"""

from __future__ import annotations

import re
import secrets
from dataclasses import dataclass

from runner.store.ddl import DDL as SQLITE_DDL
from runner.store.ddl import index_ddl
from runner.store.errors import IncompatibleLayout
from runner.store.layout import (
    ADDED_INDEXES,
    SCHEMA_ID,
    TABLE_COLUMNS,
    TABLES,
    describe_column_drift,
)
from runner.store.postgres.bundles import BUNDLE_COLUMNS, BUNDLE_DDL, BUNDLE_TABLES
from runner.store.postgres.db import Conn, PostgresDatabase

_REWRITES: tuple[tuple[str, str], ...] = (
    (r"INTEGER PRIMARY KEY AUTOINCREMENT", "BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY"),
    (r"\bINTEGER\b", "BIGINT"),
    (r"length\(CAST\((\w+) AS BLOB\)\)", r"octet_length(\1)"),
    (r"\)\s*WITHOUT ROWID", ")"),
)


def _postgres(statement: str) -> str:
    for pattern, replacement in _REWRITES:
        statement = re.sub(pattern, replacement, statement)
    return statement


# Run bundles (postgres/bundles.py) are Postgres-only tables beside the contract's;
# a reset keeps them (`IF NOT EXISTS`), as it keeps a SQLite store's bundle folders.
DDL: tuple[str, ...] = tuple(_postgres(statement) for statement in SQLITE_DDL) + tuple(
    s.replace("CREATE TABLE ", "CREATE TABLE IF NOT EXISTS ", 1) for s in BUNDLE_DDL)
ALL_TABLES: tuple[str, ...] = (*TABLES, *BUNDLE_TABLES)
ALL_COLUMNS = {**TABLE_COLUMNS, **BUNDLE_COLUMNS}


@dataclass(frozen=True, slots=True)
class Layout:
    tables: tuple[str, ...]
    columns: dict[str, tuple[tuple[object, ...], ...]]
    constraints: dict[str, tuple[str, ...]]
    indexes: dict[str, str]


def _lock(conn: Conn) -> None:
    conn.execute("SELECT pg_advisory_xact_lock(hashtext('wfrun:' || current_schema()))")


def read_layout(conn: Conn) -> Layout:
    ours = list(ALL_TABLES)
    rows = conn.execute(
        "SELECT table_name FROM information_schema.tables"
        " WHERE table_schema = current_schema() AND table_name = ANY(%s) ORDER BY table_name",
        (ours,),
    ).fetchall()
    tables = tuple(str(r["table_name"]) for r in rows)
    columns: dict[str, list[tuple[object, ...]]] = {t: [] for t in tables}
    for r in conn.execute(
        "SELECT table_name, column_name, data_type, is_nullable, column_default, is_identity"
        " FROM information_schema.columns WHERE table_schema = current_schema()"
        " AND table_name = ANY(%s) ORDER BY table_name, ordinal_position",
        (ours,),
    ).fetchall():
        columns[str(r["table_name"])].append(
            (r["column_name"], r["data_type"], r["is_nullable"], r["column_default"],
             r["is_identity"]))
    constraints: dict[str, list[str]] = {t: [] for t in tables}
    for r in conn.execute(
        "SELECT c.relname AS t, k.conname AS name, pg_get_constraintdef(k.oid) AS def"
        " FROM pg_constraint k JOIN pg_class c ON c.oid = k.conrelid"
        " JOIN pg_namespace n ON n.oid = c.relnamespace"
        " WHERE n.nspname = current_schema() AND c.relname = ANY(%s)"
        " ORDER BY c.relname, k.conname",
        (ours,),
    ).fetchall():
        constraints[str(r["t"])].append(f"{r['name']}: {r['def']}")
    indexes: dict[str, str] = {}
    for r in conn.execute(
        "SELECT indexname, indexdef, current_schema() AS s FROM pg_indexes"
        " WHERE schemaname = current_schema() AND tablename = ANY(%s)",
        (ours,),
    ).fetchall():
        # The definition names the schema; the layout does not depend on it.
        indexes[str(r["indexname"])] = str(r["indexdef"]).replace(f" {r['s']}.", " ")
    return Layout(
        tables,
        {t: tuple(c) for t, c in columns.items()},
        {t: tuple(c) for t, c in constraints.items()},
        indexes,
    )


def create_schema(conn: Conn, now_ms: int) -> None:
    for statement in DDL:
        conn.execute(statement)  # fixed contract text
    conn.execute(
        "INSERT INTO schema_info (singleton, schema_id, created_at) VALUES (1, %s, %s)",
        (SCHEMA_ID, now_ms),
    )


_EXPECTED: dict[int, Layout] = {}


def expected_layout(conn: Conn) -> Layout:
    """The layout a fresh store has on this server, built once per process in a
    scratch schema that is rolled back."""
    version = conn.info.server_version
    cached = _EXPECTED.get(version)
    if cached is not None:
        return cached
    scratch = f"wfrun_layout_{secrets.token_hex(6)}"
    with conn.transaction(force_rollback=True):
        conn.execute(f"CREATE SCHEMA {scratch}")  # random hex
        conn.execute(f"SET LOCAL search_path TO {scratch}")
        create_schema(conn, 0)
        layout = read_layout(conn)
    _EXPECTED[version] = layout
    return layout


def layout_drift(conn: Conn) -> str | None:
    """One phrase naming the first way the store differs from the contract."""
    actual = read_layout(conn)
    expected = expected_layout(conn)
    missing = [t for t in ALL_TABLES if t not in actual.tables]
    if missing:
        return "missing table(s) " + ", ".join(missing)
    for table in ALL_TABLES:
        names = tuple(str(c[0]) for c in actual.columns[table])
        drift = describe_column_drift(table, ALL_COLUMNS[table], names)
        if drift:
            return drift
        if actual.columns[table] != expected.columns[table]:
            return f"table {table}: column types or defaults differ"
        if actual.constraints[table] != expected.constraints[table]:
            return f"table {table}: constraints differ from the state contract"
    for name, definition in expected.indexes.items():
        if name not in actual.indexes:
            if name in ADDED_INDEXES:
                continue  # made by open_schema (add_missing_indexes)
            return f"missing index {name}"
        if actual.indexes[name] != definition:
            return f"index {name} differs"
    extra = sorted(set(actual.indexes) - set(expected.indexes))
    if extra:
        return "unexpected index(es) " + ", ".join(extra)
    rows = conn.execute("SELECT schema_id FROM schema_info").fetchall()
    if len(rows) != 1:
        return f"schema_info has {len(rows)} rows, expected 1"
    if rows[0]["schema_id"] != SCHEMA_ID:
        return f"schema id is {rows[0]['schema_id']!r}, expected {SCHEMA_ID!r}"
    return None


def open_schema(db: PostgresDatabase) -> None:
    """Create the tables in a schema without any of wfrun's, or check the existing
    ones; raises IncompatibleLayout (changing nothing) when they differ."""
    with db.connection() as conn:
        expected_layout(conn)
    with db.write() as conn:
        _lock(conn)
        present = read_layout(conn).tables
        if not present:
            create_schema(conn, db.now_ms(conn))
            return
        drift = layout_drift(conn)
        if drift is None:
            add_missing_indexes(conn)
    if drift:
        raise IncompatibleLayout(db.where, drift)


def add_missing_indexes(conn: Conn) -> None:
    """Create the indexes added to v1 that a store made before them lacks (under the
    open's advisory lock and in its transaction)."""
    present = set(read_layout(conn).indexes)
    for name in sorted(ADDED_INDEXES - present):
        conn.execute(_postgres(index_ddl(name)))  # fixed contract text


def reset_schema(db: PostgresDatabase) -> None:
    """Drop wfrun's tables (only those) and create them again, in one transaction."""
    with db.write() as conn:
        _lock(conn)
        for table in TABLES:
            conn.execute(f"DROP TABLE IF EXISTS {table} CASCADE")
        create_schema(conn, db.now_ms(conn))
