"""`resources` and `reconcile_queue` on Postgres. Their rules and statements are
written once in runner/store/domain/ (controller_resources.py, controller_queue.py);
this binds them to the pool through the Postgres connector, whose dialect locks a
row before a guarded change and lets `claim_next` skip rows another host has
locked (`FOR UPDATE SKIP LOCKED`), so hosts sharing a database never wait on each
other's candidates and one key is reconciled by one holder at a time."""

from __future__ import annotations

from runner.store.domain.controller_passes import PassQueue
from runner.store.domain.controller_queue import WAKE
from runner.store.domain.controller_resources import ResourceTable
from runner.store.postgres.connector import PostgresConnector, to_psycopg
from runner.store.postgres.db import Conn, PostgresDatabase, Row


def wake(conn: Conn, controller: str, key: str, available_at: int) -> Row:
    """Enqueue one key inside the caller's transaction (a child's ending); the row."""
    row = conn.execute(to_psycopg(WAKE + " RETURNING *"),
                       {"controller": controller, "key": key, "at": available_at}).fetchone()
    assert row is not None
    return row


class PostgresResources(ResourceTable):
    """`Resources` on Postgres."""

    def __init__(self, db: PostgresDatabase) -> None:
        super().__init__(PostgresConnector(db))


class PostgresReconcileQueue(PassQueue):
    """`ReconcileQueue` on Postgres."""

    def __init__(self, db: PostgresDatabase) -> None:
        super().__init__(PostgresConnector(db))
