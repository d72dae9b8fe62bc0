"""`audit_log`: who did what to which run through the HTTP API (`wfrun audit`).

Append-only. A row is written after the action it records, in its own
transaction: the action's own transaction belongs to the launch queue, and an
audit row must also record an action that failed. Details carry the request's
parameters (a node, whether input was given), never input values or answers.

The table was added within v1 (`layout.ADDED_TABLES`): a store opened read-only
that predates it reads as an empty trail instead of failing.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from runner.store._connector import Connector, Row, named
from runner.store._records import AuditEntry, bounded_message, check_id, json_object
from runner.store._states import (
    AUDIT_ACTIONS,
    AUDIT_DETAIL_MAX_BYTES,
    AUDIT_OUTCOMES,
    AuditAction,
    AuditOutcome,
)

SQL: Mapping[str, str] = {
    "append": "INSERT INTO audit_log (recorded_at, actor, action, run_id, workflow_ref,"
    " origin, outcome, detail_json) VALUES (:now, :actor, :action, :run_id, :workflow_ref,"
    " :origin, :outcome, :detail)",
    "last": "SELECT * FROM audit_log WHERE seq = (SELECT max(seq) FROM audit_log)",
    "newest": "SELECT * FROM audit_log WHERE seq < :before ORDER BY seq DESC LIMIT :limit",
    "newest_run": "SELECT * FROM audit_log WHERE run_id = :run_id AND seq < :before"
    " ORDER BY seq DESC LIMIT :limit",
    # A SQLite store made before the table and opened read-only lacks it.
    "has_table": "SELECT count(*) AS n FROM sqlite_master WHERE type = 'table'"
    " AND name = 'audit_log'",
}


def entry_from_row(row: Row) -> AuditEntry:
    return AuditEntry(seq=row["seq"], recorded_at=row["recorded_at"], actor=row["actor"],
                      action=row["action"], run_id=row["run_id"],
                      workflow_ref=row["workflow_ref"], origin=row["origin"],
                      outcome=row["outcome"], detail=json.loads(row["detail_json"]))


def _detail(detail: Mapping[str, Any]) -> str:
    return json_object(detail, what="audit detail", max_bytes=AUDIT_DETAIL_MAX_BYTES)


class AuditLog:
    """`audit_log` over a connector."""

    def __init__(self, connector: Connector, overrides: Mapping[str, str] | None = None) -> None:
        self._connector = connector
        self._sql = named(SQL, overrides)

    def append(self, *, actor: str, action: AuditAction, outcome: AuditOutcome,
               run_id: str | None = None, workflow_ref: str | None = None,
               origin: str | None = None,
               detail: Mapping[str, Any] | None = None) -> AuditEntry:
        if action not in AUDIT_ACTIONS:
            raise ValueError(f"unknown audit action {action!r}")
        if outcome not in AUDIT_OUTCOMES:
            raise ValueError(f"unknown audit outcome {outcome!r}")
        check_id(actor, "actor")
        params = {"actor": actor, "action": action, "outcome": outcome,
                  "run_id": bounded_message(run_id) if run_id is not None else None,
                  "workflow_ref": workflow_ref,
                  "origin": bounded_message(origin) if origin is not None else None,
                  "detail": _detail(detail or {})}
        with self._connector.write() as tx:
            tx.run(self._sql["append"], {**params, "now": tx.now_ms()})
            row = tx.one(self._sql["last"], {})
        assert row is not None
        return entry_from_row(row)

    def newest(self, *, run_id: str | None = None, limit: int = 100,
               before_seq: int | None = None) -> list[AuditEntry]:
        """Rows newest first, before `before_seq` (paging back), optionally of one run."""
        params = {"limit": limit, "before": before_seq if before_seq is not None else 2**62,
                  "run_id": run_id}
        with self._connector.read() as tx:
            present = tx.one(self._sql["has_table"], {})
            if present is None or not present["n"]:
                return []  # a store made before the table, opened read-only
            rows = tx.all(self._sql["newest_run" if run_id is not None else "newest"], params)
        return [entry_from_row(row) for row in rows]
