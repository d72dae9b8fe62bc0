"""The Postgres backend (psycopg 3 + psycopg_pool, the `postgres` extra).

Import `runner.store.postgres` only when a Postgres URL is configured: the
embedded default never loads psycopg.
"""

from __future__ import annotations

from runner.store.postgres.store import PostgresStore
from runner.store.postgres.wakeups import LaunchWakeups
from runner.store.urls import is_postgres_url, mask_url

__all__ = ["LaunchWakeups", "PostgresStore", "is_postgres_url", "mask_url"]
