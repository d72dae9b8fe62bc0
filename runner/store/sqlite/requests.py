"""A child run's ending on SQLite, called by launches.py inside the launch's own
transaction on its raw connection. The rule and its statements are
runner/store/domain/workflow_requests.py's (`settle_child`); this runs them there
until launches.py itself runs on the connector."""

from __future__ import annotations

import sqlite3

from runner.store.domain.controller_queue import WAKE
from runner.store.domain.workflow_requests import SETTLE_FIND, SETTLE_UPDATE, child_error


def settle_child(conn: sqlite3.Connection, row: sqlite3.Row, state: str, now: int) -> None:
    """Record the ended child run `row` on its request and wake the parent's key."""
    request = conn.execute(SETTLE_FIND, {"run": row["run_id"]}).fetchone()
    if request is None:
        return
    conn.execute(SETTLE_UPDATE, {"state": state, "now": now, "id": request["request_id"],
                                 "error": child_error(row["error_message"], row["status"],
                                                      state)})
    conn.execute(WAKE, {"controller": request["controller"], "key": request["resource_key"],
                        "at": now})
