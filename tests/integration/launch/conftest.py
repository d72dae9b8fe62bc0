"""`store_url`: the crash tests' store, SQLite (None) or a fresh Postgres schema.

The SQLite side is the project's own file; the Postgres side is a new, empty schema
on the session's throwaway cluster (tests/pgcluster.py), with run bundles as rows.
Only the modules that request `store_url` run on both backends.
"""

from __future__ import annotations

import itertools
import secrets

import pytest
from pgcluster import PgCluster

_SCHEMAS = itertools.count()


@pytest.fixture(params=["sqlite", "postgres"])
def store_url(request: pytest.FixtureRequest) -> str | None:
    if request.param == "sqlite":
        return None
    cluster: PgCluster = request.getfixturevalue("pg_cluster")
    url: str = cluster.create_schema(f"c{next(_SCHEMAS)}_{secrets.token_hex(3)}")
    return url
