"""The store seam (runner/store/_connector.py) on both backends: a real SQLite file and
a real Postgres schema on the session's throwaway cluster, with a scratch table."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from pgcluster import PgCluster

from runner.store._connector import Connector, Transaction, UniqueViolation, in_params, named
from runner.store._errors import StoreError
from runner.store.postgres._connector import DB_NOW_MS, PostgresConnector, to_psycopg
from runner.store.postgres._db import PostgresDatabase
from runner.store.sqlite._connector import SqliteConnector
from runner.store.sqlite._db import SqliteDatabase

_TABLE = ("CREATE TABLE items (k TEXT PRIMARY KEY, n INTEGER NOT NULL CHECK (n >= 0),"
          " note TEXT)")


class Clock:
    def __init__(self) -> None:
        self.ms = 1_000

    def __call__(self) -> int:
        self.ms += 1  # every read moves: a per-transaction clock must not
        return self.ms


@pytest.fixture(params=["sqlite", "postgres"])
def connector(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Connector]:
    if request.param == "sqlite":
        db = SqliteDatabase(tmp_path / "seam.sqlite3")
        db.connection().execute(_TABLE)
        clock = Clock()  # both connectors read a Clock's seconds
        try:
            yield SqliteConnector(db, lambda: clock() / 1000)
        finally:
            db.close()
        return
    cluster: PgCluster = request.getfixturevalue("pg_cluster")
    url = cluster.create_schema(f"seam_{secrets.token_hex(4)}")
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(_TABLE)
    clock = Clock()
    pg = PostgresDatabase(url, now=lambda: clock() / 1000, pool_size=3)
    try:
        yield PostgresConnector(pg)
    finally:
        pg.close()


def _count(connector: Connector) -> int:
    with connector.read() as tx:
        row = tx.one("SELECT COUNT(*) AS n FROM items")
    assert row is not None
    return int(row["n"])


def test_write_commits_and_rows_come_back_as_dicts_by_name(connector: Connector) -> None:
    with connector.write() as tx:
        changed = tx.run("INSERT INTO items (k, n, note) VALUES (:k, :n, :note)",
                             {"k": "a", "n": 1, "note": "50% off", "unused": 9})
        back = tx.one("INSERT INTO items (k, n) VALUES (:k, :n) RETURNING *", {"k": "b", "n": 2})
    assert changed == 1
    assert back == {"k": "b", "n": 2, "note": None}
    with connector.read() as tx:
        rows = tx.all("SELECT k, n, note FROM items WHERE note LIKE '%off' OR n = :n"
                       " ORDER BY k", {"n": 2})
        assert tx.one("SELECT k FROM items WHERE k = :k", {"k": "zz"}) is None
    assert rows == [{"k": "a", "n": 1, "note": "50% off"}, {"k": "b", "n": 2, "note": None}]


def _insert_then_fail(connector: Connector, second: str) -> None:
    with connector.write() as tx:
        tx.run("INSERT INTO items (k, n) VALUES ('a', 1)")
        if not second:
            raise RuntimeError("boom")
        tx.run(second)


def test_an_error_rolls_the_whole_transaction_back(connector: Connector) -> None:
    with pytest.raises(RuntimeError):
        _insert_then_fail(connector, "")
    assert _count(connector) == 0
    with pytest.raises(StoreError) as caught:  # the CHECK refuses the second row
        _insert_then_fail(connector, "INSERT INTO items (k, n) VALUES ('b', -1)")
    assert not isinstance(caught.value, UniqueViolation)
    assert "\n" not in str(caught.value)
    assert _count(connector) == 0


def _two_inserts(tx: Transaction) -> None:
    with tx.savepoint():
        tx.run("INSERT INTO items (k, n) VALUES ('b', 1)")
        tx.run("INSERT INTO items (k, n) VALUES ('a', 2)")


def test_a_unique_violation_in_a_savepoint_keeps_the_rest(connector: Connector) -> None:
    with connector.write() as tx:
        tx.run("INSERT INTO items (k, n) VALUES ('a', 1)")
        with pytest.raises(UniqueViolation):
            _two_inserts(tx)
        with tx.savepoint():
            tx.run("INSERT INTO items (k, n) VALUES ('c', 3)")
        assert tx.run("UPDATE items SET n = n + 1") == 2
    with connector.read() as tx:
        assert tx.all("SELECT k, n FROM items ORDER BY k") == [
            {"k": "a", "n": 2}, {"k": "c", "n": 4}]


def test_a_statement_a_unique_index_refuses_is_undone_alone(connector: Connector) -> None:
    with connector.write() as tx:
        tx.run("INSERT INTO items (k, n) VALUES ('a', 1)")
        # One statement refused midway (its first row went in): only it is undone.
        with pytest.raises(UniqueViolation), tx.statement():
            tx.run("INSERT INTO items (k, n) VALUES ('b', 1), ('a', 2)")
        with tx.statement():
            tx.run("INSERT INTO items (k, n) VALUES ('c', 3)")
        assert tx.run("UPDATE items SET n = n + 1") == 2
    with connector.read() as tx:
        assert tx.all("SELECT k, n FROM items ORDER BY k") == [
            {"k": "a", "n": 2}, {"k": "c", "n": 4}]


def test_sqlite_guards_one_statement_without_a_savepoint(tmp_path: Path) -> None:
    db = SqliteDatabase(tmp_path / "seam.sqlite3")
    try:
        conn = db.connection()
        conn.execute(_TABLE)
        sent: list[str] = []
        db.trace(sent.append)
        with SqliteConnector(db, lambda: 1.0).write() as tx, tx.statement():
            tx.run("INSERT INTO items (k, n) VALUES ('a', 1)")
        db.trace(None)
    finally:
        db.close()
    assert not [s for s in sent if "SAVEPOINT" in s.upper()]
    assert any(s.startswith("INSERT INTO items") for s in sent)


def test_the_clock_is_fixed_per_transaction(connector: Connector) -> None:
    with connector.write() as tx:
        first = tx.now_ms()
        assert tx.now_ms() == first
        fragment, clock = tx.clock_sql("t")
        assert tx.one(f"SELECT {fragment} AS n", clock) == {"n": first}
    with connector.write() as tx:
        assert tx.now_ms() > first
        # The clock moved, the statement's text did not: it is prepared once.
        assert tx.clock_sql("t")[0] == fragment


def test_in_params_and_limits(connector: Connector) -> None:
    with connector.write() as tx:
        tx.many("INSERT INTO items (k, n) VALUES (:k, :n)", [{"k": f"k{i}", "n": i}
                                                            for i in range(4)])
    marks, params = in_params("s", ["k1", "k3"])
    none_marks, none_params = in_params("s", [])
    with connector.read() as tx:
        picked = tx.all(f"SELECT k FROM items WHERE k IN {marks} ORDER BY k", params)
        nothing = tx.all(f"SELECT k FROM items WHERE k IN {none_marks}", none_params)
        unnoted = tx.all(f"SELECT k FROM items WHERE note {tx.dialect.same} :note", {"note": None})
        everything = tx.all("SELECT k FROM items ORDER BY k LIMIT :limit",
                             {"limit": tx.dialect.unlimited})
    assert [r["k"] for r in picked] == ["k1", "k3"]
    assert nothing == []
    assert len(unnoted) == 4
    assert len(everything) == 4


def test_named_queries_refuse_an_override_of_an_unknown_name() -> None:
    assert named({"load": "A", "save": "B"}, {"save": "C"}) == {"load": "A", "save": "C"}
    with pytest.raises(ValueError, match="lod"):
        named({"load": "A"}, {"lod": "X"})


def test_postgres_placeholders_are_rewritten_mechanically() -> None:
    assert to_psycopg("SELECT :a::bigint, 'x' LIKE '5%' WHERE x=:c_1") == (
        "SELECT %(a)s::bigint, 'x' LIKE '5%%' WHERE x=%(c_1)s")


def test_postgres_skip_locked_passes_a_row_another_transaction_holds(
        pg_cluster: PgCluster) -> None:
    url = pg_cluster.create_schema(f"seam_{secrets.token_hex(4)}")
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(_TABLE)
        conn.execute("INSERT INTO items (k, n) VALUES ('a', 1), ('b', 2)")
    pg = PostgresDatabase(url, pool_size=2)
    connector = PostgresConnector(pg)
    try:
        with connector.write() as holder:
            head = "SELECT k FROM items ORDER BY k LIMIT 1"
            assert holder.one(head + holder.dialect.skip_locked) == {"k": "a"}
            with connector.write() as other:
                assert other.one(head + other.dialect.skip_locked) == {"k": "b"}
                now, clock = other.clock_sql()
                assert (now, clock) == (DB_NOW_MS, {})  # the database's clock, no parameter
                in_statement = other.one(f"SELECT {now} AS n", clock)
                assert in_statement == {"n": other.now_ms()}  # now(): the transaction's start
                clock = other.now_ms()  # the database clock: milliseconds since 1970
                assert clock > 1_700_000_000_000
    finally:
        pg.close()
