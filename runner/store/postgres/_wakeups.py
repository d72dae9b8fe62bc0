"""Wake-ups by LISTEN/NOTIFY: ids only, never input; polling stays the fallback.

A transaction that makes a detached launch claimable calls `notify` (delivered at
commit, dropped on rollback). A host blocks in `LaunchWakeups.wait` on its own
connection and claims on a notice, or when its poll interval runs out: a notice
lost with a dropped connection costs one poll, never a launch. The channel is
per schema, so tests and tenants sharing a database do not wake each other.
"""

from __future__ import annotations

import psycopg
from psycopg.rows import dict_row

from runner.store._urls import mask_url
from runner.store.postgres._db import Conn, Row, translate

LAUNCH_CHANNEL = "wfrun_launch"
#: Seconds a (re)connect of the listening connection may take: a server that
#: accepts no connection (restarting, a dropped network) must not hold the
#: listener's thread, which also has to see `stop`.
CONNECT_TIMEOUT = 5


def notify(conn: Conn, channel: str, item_id: str) -> None:
    conn.execute("SELECT pg_notify(%s || '_' || current_schema(), %s)", (channel, item_id))


class LaunchWakeups:
    """One listening connection; `wait` returns the ids announced (maybe none)."""

    def __init__(self, url: str, channel: str = LAUNCH_CHANNEL) -> None:
        self._url = url
        self._channel = channel
        self._conn: psycopg.Connection[Row] | None = None

    def _connect(self) -> psycopg.Connection[Row]:
        if self._conn is None or self._conn.closed:
            try:
                conn = psycopg.connect(self._url, autocommit=True, row_factory=dict_row,
                                       connect_timeout=CONNECT_TIMEOUT)
                row = conn.execute("SELECT %s || '_' || current_schema() AS name",
                                   (self._channel,)).fetchone()
                assert row is not None
                conn.execute(psycopg.sql.SQL("LISTEN {}").format(
                    psycopg.sql.Identifier(str(row["name"]))))
            except psycopg.Error as exc:
                raise translate(exc, mask_url(self._url)) from None
            self._conn = conn
        return self._conn

    def wait(self, timeout: float) -> list[str]:
        """Block up to `timeout` seconds for notices; every id that arrived."""
        conn = self._connect()
        try:
            return [n.payload for n in conn.notifies(timeout=timeout, stop_after=1)] + [
                n.payload for n in conn.notifies(timeout=0)]
        except psycopg.Error as exc:
            conn.close()  # reconnect (and LISTEN again) on the next wait
            raise translate(exc, mask_url(self._url)) from None

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None
