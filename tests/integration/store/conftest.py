"""The `store` fixture, parametrized over every Store implementation.

SQLite runs every module; Postgres (a throwaway cluster for the session, a fresh
schema per test) runs the conformance modules in `POSTGRES_MODULES` (launch and
controller sides). The SQLite file, lock, race and fault tests stay SQLite-only;
retention on Postgres is tested in test_store_postgres.py (docs/store.md).
"""

from __future__ import annotations

import itertools
import secrets
from collections.abc import Iterator
from pathlib import Path

import pytest
from pgcluster import PgCluster
from storekit import Backend, FakeClock

from runner.store import SqliteStore, Store
from runner.store._controller_interface import ControllerStore


def _sqlite(tmp_path: Path) -> Backend:
    path = tmp_path / "project" / ".wfrun" / "state" / "store.sqlite3"
    counter = itertools.count()

    def fresh(clock: FakeClock) -> Store:
        return SqliteStore(tmp_path / "fresh" / f"{next(counter)}.sqlite3", clock=clock)

    return Backend("sqlite", lambda clock: SqliteStore(path, clock=clock), fresh)


#: The modules whose every test also runs on Postgres.
POSTGRES_MODULES = frozenset({
    "test_controller_passes",
    "test_controller_queue",
    "test_controller_records",
    "test_controller_resources",
    "test_store_added_indexes",
    "test_store_audit",
    "test_store_deliveries",
    "test_store_chained_claims",
    "test_store_claims",
    "test_store_event_order",
    "test_store_fanout",
    "test_store_launch_queue",
    "test_store_operations",
    "test_store_outbox",
    "test_store_properties",
    "test_store_recovery",
    "test_store_release",
    "test_store_flow_control",
    "test_store_triggers",
    "test_store_turn_intents",
})
_SCHEMAS = itertools.count()


def _postgres(cluster: PgCluster) -> Backend:
    from runner.store.postgres import PostgresStore

    def schema() -> str:
        return cluster.create_schema(f"t{next(_SCHEMAS)}_{secrets.token_hex(3)}")

    url = schema()

    def fresh(clock: FakeClock) -> Store:
        return PostgresStore(schema(), clock=clock, pool_size=2)

    return Backend("postgres", lambda clock: PostgresStore(url, clock=clock, pool_size=2),
                   fresh)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "backend" in metafunc.fixturenames:
        names = ["sqlite"]
        if metafunc.module.__name__.rsplit(".", 1)[-1] in POSTGRES_MODULES:
            names.append("postgres")
        metafunc.parametrize("backend", names, indirect=True)


@pytest.fixture
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Backend:
    if request.param == "postgres":
        return _postgres(request.getfixturevalue("pg_cluster"))
    return _sqlite(tmp_path)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def store(backend: Backend, clock: FakeClock) -> Iterator[Store]:
    opened = backend.open(clock)
    try:
        yield opened
    finally:
        opened.close()


@pytest.fixture
def cstore(backend: Backend, clock: FakeClock) -> Iterator[ControllerStore]:
    """The controller side of the same store (`ControllerStore`), for test_controller_*."""
    opened = backend.open(clock)
    try:
        yield opened  # every Store implementation is also a ControllerStore
    finally:
        opened.close()
