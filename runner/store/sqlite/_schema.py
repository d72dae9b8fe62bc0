"""The SQLite schema: creating `wfrun.controller-store.v1` (runner/store/_ddl.py) and
the exact-layout check.

The check compares a store file with a fresh in-memory database built from the
DDL: the set of tables, every table's columns (name, type, NOT NULL,
default, primary key), and the normalized SQL of every table and index, which
carries the CHECK constraints of the state contract and the partial unique
indexes. Any difference refuses the file; nothing is migrated.
"""

from __future__ import annotations

import functools
import re
import sqlite3
from dataclasses import dataclass

# Re-exported: tests and postgres/_bundles.py import them from here.
from runner.store._ddl import DDL as DDL
from runner.store._ddl import index_ddl, indexes_of, table_ddl
from runner.store._ddl import sql_in as sql_in
from runner.store._layout import (
    ADDED_INDEXES,
    ADDED_TABLES,
    RETIRED_INDEXES,
    ROWID_DROPPED,
    SCHEMA_ID,
    TABLE_COLUMNS,
    TABLES,
    describe_column_drift,
    describe_table_drift,
)


def create_schema(conn: sqlite3.Connection, now_ms: int) -> None:
    """Create every table and index and the schema_info row (inside the caller's
    transaction)."""
    for statement in DDL:
        conn.execute(statement)
    conn.execute(
        "INSERT INTO schema_info (singleton, schema_id, created_at) VALUES (1, ?, ?)",
        (SCHEMA_ID, now_ms),
    )


def _normalize(sql: str | None) -> str:
    return " ".join((sql or "").split())


@dataclass(frozen=True, slots=True)
class Layout:
    """What a database holds: tables with columns, and table/index SQL."""

    tables: tuple[str, ...]
    columns: dict[str, tuple[str, ...]]
    column_info: dict[str, tuple[tuple[object, ...], ...]]
    table_sql: dict[str, str]
    index_sql: dict[str, str]

    @property
    def empty(self) -> bool:
        return not self.tables and not self.index_sql


def read_layout(conn: sqlite3.Connection) -> Layout:
    """Read the layout of the user tables and indexes (read-only)."""
    rows = conn.execute(
        "SELECT type, name, sql FROM sqlite_master "
        "WHERE name NOT LIKE 'sqlite\\_%' ESCAPE '\\' ORDER BY type, name"
    ).fetchall()
    tables = tuple(sorted(str(name) for kind, name, _ in rows if kind == "table"))
    table_sql = {str(name): _normalize(sql) for kind, name, sql in rows if kind == "table"}
    index_sql = {str(name): _normalize(sql) for kind, name, sql in rows if kind == "index"}
    other = sorted(f"{kind} {name}" for kind, name, _ in rows if kind not in ("table", "index"))
    for item in other:  # views and triggers are not part of the layout
        table_sql[item] = "unexpected"
    columns: dict[str, tuple[str, ...]] = {}
    column_info: dict[str, tuple[tuple[object, ...], ...]] = {}
    for table in tables:
        info = conn.execute("SELECT * FROM pragma_table_info(?)", (table,)).fetchall()
        columns[table] = tuple(str(row[1]) for row in info)
        column_info[table] = tuple(tuple(row) for row in info)
    return Layout(tables, columns, column_info, table_sql, index_sql)


@functools.cache
def expected_layout() -> Layout:
    """The layout a fresh store has, built once from the DDL in memory."""
    conn = sqlite3.connect(":memory:")
    try:
        create_schema(conn, 0)
        return read_layout(conn)
    finally:
        conn.close()


def layout_drift(actual: Layout) -> str | None:
    """One phrase naming the first way `actual` differs from the expected layout."""
    expected = expected_layout()
    # A table added within v1 may be missing: the next writing open makes it.
    present = tuple(t for t in TABLES if t in actual.tables or t not in ADDED_TABLES)
    drift = describe_table_drift(present, actual.tables)
    if drift:
        return drift
    for table in present:
        column_drift = describe_column_drift(table, TABLE_COLUMNS[table], actual.columns[table])
        if column_drift:
            return column_drift
        if actual.column_info[table] != expected.column_info[table]:
            return f"table {table}: column types or defaults differ"
        if actual.table_sql[table] != expected.table_sql[table] \
                and not _rowid_form(table, actual):
            return f"table {table}: constraints differ from the state contract"
    extra_objects = sorted(set(actual.table_sql) - set(expected.table_sql))
    missing_tables = set(TABLES) - set(present)
    if extra_objects:
        return "unexpected schema object(s) " + ", ".join(extra_objects)
    for name, sql in expected.index_sql.items():
        if name not in actual.index_sql:
            if name in ADDED_INDEXES or _table_of(sql) in missing_tables:
                continue  # made at the next writing open (add_missing_indexes)
            return f"missing index {name}"
        if actual.index_sql[name] != sql:
            return f"index {name} differs"
    extra_indexes = sorted(set(actual.index_sql) - set(expected.index_sql) - RETIRED_INDEXES)
    if extra_indexes:
        return "unexpected index(es) " + ", ".join(extra_indexes)
    return None


def _rowid_form(table: str, actual: Layout) -> bool:
    """Whether `table` is one v1 made as a rowid table, in that form (a writing open
    rebuilds it WITHOUT ROWID: add_missing_indexes)."""
    made = expected_layout().table_sql[table]
    return table in ROWID_DROPPED and made.endswith(" WITHOUT ROWID") \
        and actual.table_sql[table] == made.removesuffix(" WITHOUT ROWID")


def _table_of(index_sql: str) -> str:
    found = re.search(r"\bON (\w+)", index_sql)
    return found[1] if found else ""


def add_missing_indexes(conn: sqlite3.Connection, actual: Layout) -> None:
    """Create the tables and indexes added to v1 that a store made before them lacks,
    drop the retired indexes it has, and rebuild WITHOUT ROWID the tables v1 made
    with rowids (inside the caller's write transaction)."""
    present = set(actual.index_sql)
    for name in sorted(ADDED_TABLES - set(actual.tables)):
        conn.execute(table_ddl(name))
        for statement in indexes_of(name):
            conn.execute(statement)
            made = re.match(r"CREATE (?:UNIQUE )?INDEX (\w+)", statement)
            if made:  # an added index of an added table: made with it
                present.add(made[1])
    for name in sorted(ADDED_INDEXES - present):
        conn.execute(index_ddl(name))
    for name in sorted(RETIRED_INDEXES & present):
        conn.execute(f"DROP INDEX {name}")  # a fixed name
    for table in sorted(ROWID_DROPPED & set(actual.tables)):
        if _rowid_form(table, actual):
            # Renamed away, made again from the DDL (so its SQL is the contract's, not
            # a rename's rewrite), its rows copied, the old one dropped: one transaction.
            conn.execute(f"ALTER TABLE {table} RENAME TO {table}_rowid")  # fixed names
            conn.execute(table_ddl(table))
            conn.execute(f"INSERT INTO {table} SELECT * FROM {table}_rowid")
            conn.execute(f"DROP TABLE {table}_rowid")


def schema_id_drift(conn: sqlite3.Connection) -> str | None:
    """None when schema_info holds exactly the expected schema id."""
    rows = conn.execute("SELECT singleton, schema_id FROM schema_info").fetchall()
    if len(rows) != 1:
        return f"schema_info has {len(rows)} rows, expected 1"
    found = rows[0][1]
    if found != SCHEMA_ID:
        return f"schema id is {found!r}, expected {SCHEMA_ID!r}"
    return None
