"""The `store` fixture, parametrized over every Store implementation.

Only SQLite exists today. A Postgres implementation adds a `Backend` to
`BACKENDS` (opening a fresh schema per test) and then runs this same suite.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from storekit import Backend, FakeClock

from runner.store import SqliteStore, Store
from runner.store.controller_interface import ControllerStore


def _sqlite(tmp_path: Path) -> Backend:
    path = tmp_path / "project" / ".wfrun" / "state" / "store.sqlite3"
    counter = itertools.count()

    def fresh(clock: FakeClock) -> Store:
        return SqliteStore(tmp_path / "fresh" / f"{next(counter)}.sqlite3", now=clock.now)

    return Backend("sqlite", lambda clock: SqliteStore(path, now=clock.now), fresh)


BACKENDS: dict[str, Callable[[Path], Backend]] = {"sqlite": _sqlite}


@pytest.fixture(params=sorted(BACKENDS))
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Backend:
    return BACKENDS[request.param](tmp_path)


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
