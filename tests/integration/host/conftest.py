"""Fixtures for the session-host tests: a `session(...)` factory that cleans up.

`store_url` is the store behind it: SQLite (None) for every module, and also a fresh
schema on the session's throwaway Postgres cluster for the seed modules (test_seed_*).
A seed test about the SQLite file itself takes no `store_url` (and says why).
"""

from __future__ import annotations

import itertools
import secrets
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from harness import AGENT_WF, Session, make_session
from pgcluster import PgCluster

_SCHEMAS = itertools.count()


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "store_url" not in metafunc.fixturenames:
        return
    names = ["sqlite"]
    module = metafunc.module.__name__.rsplit(".", 1)[-1]
    # The seed's tests, and the one that every view names each state alike (the run
    # list counts and pages in SQL, the bundles are rows there), run on both stores.
    if module.startswith("test_seed_") or module == "test_run_states_agree":
        names.append("postgres")
    metafunc.parametrize("store_url", names, indirect=True)


@pytest.fixture
def store_url(request: pytest.FixtureRequest) -> str | None:
    """None (the project's SQLite file) or the URL of a fresh, empty Postgres schema."""
    if request.param == "sqlite":
        return None
    cluster: PgCluster = request.getfixturevalue("pg_cluster")
    url: str = cluster.create_schema(f"h{next(_SCHEMAS)}_{secrets.token_hex(3)}")
    return url


@pytest.fixture
def session(tmp_path: Path, store_url: str | None) -> Iterator[Callable[..., Session]]:
    made: list[Session] = []

    def make(model: Any, workflows: dict[str, str] | None = None, **kw: Any) -> Session:
        kw.setdefault("store_url", store_url)
        s = make_session(tmp_path, model, workflows if workflows is not None
                         else {"hello": AGENT_WF}, **kw)
        made.append(s)
        return s

    yield make
    for s in made:
        s.close()
