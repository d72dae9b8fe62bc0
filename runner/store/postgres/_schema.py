"""Postgres DDL for `wfrun.controller-store.v1`, the exact-layout check and reset.

The DDL is the SQLite DDL (`runner.store.sqlite._schema.DDL`, where the CHECK constraints and
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

That check builds the scratch schema and reads information_schema: ~0.6 s, paid by
every CLI command (issue 34 item 12). A store that passed it is marked: a comment on
`schema_info` holds a digest of this wfrun's DDL, the server version and a
fingerprint of the catalog rows of wfrun's tables (their pg_class, pg_attribute,
pg_attrdef, pg_constraint and pg_index rows, each with its xmin, which any DDL on
them changes) and of `schema_info`'s row. An open whose one fingerprint query
matches the mark skips the check; any difference, or no mark, takes the full check.
"""

from __future__ import annotations

import hashlib
import re
import secrets
from dataclasses import dataclass

import psycopg

from runner.store._ddl import DDL as SQLITE_DDL
from runner.store._ddl import index_ddl, indexes_of, table_ddl
from runner.store._errors import IncompatibleLayout
from runner.store._layout import (
    ADDED_INDEXES,
    ADDED_TABLES,
    RETIRED_INDEXES,
    SCHEMA_ID,
    TABLE_COLUMNS,
    TABLES,
    describe_column_drift,
)
from runner.store.postgres._bundles import BUNDLE_COLUMNS, BUNDLE_DDL, BUNDLE_TABLES
from runner.store.postgres._db import Conn, PostgresDatabase

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


# Run bundles (postgres/_bundles.py) are Postgres-only tables beside the contract's;
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
    # A table added within v1 may be missing: open_schema makes it (add_missing_indexes).
    missing = [t for t in ALL_TABLES if t not in actual.tables and t not in ADDED_TABLES]
    if missing:
        return "missing table(s) " + ", ".join(missing)
    for table in (t for t in ALL_TABLES if t in actual.tables):
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
            if name in ADDED_INDEXES or _on_missing_table(definition, actual.tables):
                continue  # made by open_schema (add_missing_indexes)
            return f"missing index {name}"
        if actual.indexes[name] != definition:
            return f"index {name} differs"
    extra = sorted(set(actual.indexes) - set(expected.indexes) - RETIRED_INDEXES)
    if extra:
        return "unexpected index(es) " + ", ".join(extra)
    rows = conn.execute("SELECT schema_id FROM schema_info").fetchall()
    if len(rows) != 1:
        return f"schema_info has {len(rows)} rows, expected 1"
    if rows[0]["schema_id"] != SCHEMA_ID:
        return f"schema id is {rows[0]['schema_id']!r}, expected {SCHEMA_ID!r}"
    return None


def _on_missing_table(index_definition: str, tables: tuple[str, ...]) -> bool:
    """Whether an index belongs to a table added within v1 that this store lacks (the
    table, its primary key included, comes with add_missing_indexes)."""
    found = re.search(r" ON (?:ONLY )?(\w+)", index_definition)
    return found is not None and found[1] in ADDED_TABLES and found[1] not in tables


_DDL_DIGEST = hashlib.sha256("\n".join(DDL).encode()).hexdigest()[:16]
_MARK_PREFIX = "wfrun layout checked: "

# One row: the fingerprint of wfrun's catalog rows and schema_info's content, and the
# mark left by the last full check. Catalog reads by oid: a few milliseconds.
_FINGERPRINT = """
WITH ours AS (
  SELECT c.oid FROM pg_class c
  WHERE c.relnamespace = (SELECT oid FROM pg_namespace WHERE nspname = current_schema())
    AND c.relkind IN ('r', 'p') AND c.relname = ANY(%(tables)s)
), parts AS (
  SELECT 'c' || c.oid || ':' || c.relname || ':' || c.xmin::text AS part FROM pg_class c
    WHERE c.oid IN (SELECT oid FROM ours)
       OR c.oid IN (SELECT indexrelid FROM pg_index WHERE indrelid IN (SELECT oid FROM ours))
  UNION ALL SELECT 'i' || i.indexrelid || ':' || i.xmin::text FROM pg_index i
    WHERE i.indrelid IN (SELECT oid FROM ours)
  UNION ALL SELECT 'a' || a.attrelid || '.' || a.attnum || ':' || a.xmin::text
    FROM pg_attribute a WHERE a.attrelid IN (SELECT oid FROM ours) AND a.attnum > 0
  UNION ALL SELECT 'd' || d.adrelid || '.' || d.adnum || ':' || d.xmin::text
    FROM pg_attrdef d WHERE d.adrelid IN (SELECT oid FROM ours)
  UNION ALL SELECT 'k' || k.oid || ':' || k.xmin::text FROM pg_constraint k
    WHERE k.conrelid IN (SELECT oid FROM ours)
)
SELECT (SELECT md5(string_agg(part, ',' ORDER BY part)) FROM parts) AS catalog,
       (SELECT count(*) FROM ours) AS tables,
       obj_description(to_regclass('schema_info'), 'pg_class') AS mark
"""


def _fingerprint(conn: Conn) -> tuple[str, str | None, int]:
    """(the mark this store would carry if its layout is the one last checked, the
    mark it carries, how many of wfrun's tables it has)."""
    row = conn.execute(_FINGERPRINT, {"tables": list(ALL_TABLES)}).fetchone()
    assert row is not None
    info = ""
    if row["tables"]:
        info = ",".join(str(r["schema_id"]) for r in
                        conn.execute("SELECT schema_id FROM schema_info").fetchall())
    basis = f"{_DDL_DIGEST}|{conn.info.server_version}|{row['catalog']}|{info}"
    wanted = _MARK_PREFIX + hashlib.sha256(basis.encode()).hexdigest()
    return wanted, row["mark"], int(row["tables"])


def _mark(conn: Conn) -> None:
    """Record that the layout as it is now passed the check (in the caller's
    transaction). A role that may not comment on the table just goes without."""
    wanted, _, _ = _fingerprint(conn)
    try:
        with conn.transaction():  # a savepoint: a refusal keeps the open's transaction
            conn.execute(f"COMMENT ON TABLE schema_info IS '{wanted}'")  # hex digest
    except psycopg.errors.InsufficientPrivilege:
        pass


def open_schema(db: PostgresDatabase) -> None:
    """Create the tables in a schema without any of wfrun's, or check the existing
    ones; raises IncompatibleLayout (changing nothing) when they differ. A store
    whose catalog is as its last passed check left it is not checked again."""
    with db.connection() as conn:
        try:
            wanted, mark, tables = _fingerprint(conn)
        except psycopg.errors.UndefinedTable:  # our tables but no schema_info: drift
            wanted, mark, tables = "", None, 1
        if tables and mark == wanted:
            return
        expected_layout(conn)
    with db.write() as conn:
        _lock(conn)
        present = read_layout(conn).tables
        if not present:
            create_schema(conn, db.now_ms(conn))
            _mark(conn)
            return
        drift = layout_drift(conn)
        if drift is None:
            add_missing_indexes(conn)
            _mark(conn)
    if drift:
        raise IncompatibleLayout(db.where, drift)


def add_missing_indexes(conn: Conn) -> None:
    """Create the tables and indexes added to v1 that a store made before them lacks
    and drop the retired indexes it has (under the open's advisory lock and in its
    transaction)."""
    for name in sorted(ADDED_TABLES - set(read_layout(conn).tables)):
        conn.execute(_postgres(table_ddl(name)))  # fixed contract text
        for statement in indexes_of(name):
            conn.execute(_postgres(statement))
    present = set(read_layout(conn).indexes)
    for name in sorted(ADDED_INDEXES - present):
        conn.execute(_postgres(index_ddl(name)))  # fixed contract text
    for name in sorted(RETIRED_INDEXES & present):
        conn.execute(f"DROP INDEX {name}")  # a fixed name


def reset_schema(db: PostgresDatabase) -> None:
    """Drop wfrun's tables (only those) and create them again, in one transaction."""
    with db.write() as conn:
        _lock(conn)
        for table in TABLES:
            conn.execute(f"DROP TABLE IF EXISTS {table} CASCADE")
        create_schema(conn, db.now_ms(conn))
