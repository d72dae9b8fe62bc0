"""The Postgres backend (psycopg 3 + psycopg_pool, the `postgres` extra).

Import `runner.store.postgres` only when a Postgres URL is configured: the
embedded default never loads psycopg.
"""

from __future__ import annotations

from runner.store.postgres._store import PostgresStore

__all__ = ["PostgresStore"]
