"""The launch queue's reads: one row, a filtered list, the detached queue grouped by
source, a session's reservation, a continuation, the recoverable rows, the conflict a
refused enqueue names, a launch's flow-control gate and who holds its keys, and the
lease fence's look at a claim.

`LaunchQueue` (launches.py) inherits them; its constructor sets what they read
(`_connector`, `_sql`, `_ready_index`). Kept apart so the queue's transitions read
as one module.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from runner.store._connector import Connector, Transaction
from runner.store._ddl import sql_in
from runner.store._records import LaunchGate, LaunchRecord, LostRace, NewLaunch, QueuedSources
from runner.store._states import READY_STATUSES, LaunchStatus
from runner.store.domain._launch_queries import FIXED, HOLD, guard, launch_from_row
from runner.store.domain._pages import LaunchPages, status_clause


class LaunchReads(LaunchPages):
    """Reads of `workflow_run_queue` over the connector."""

    _connector: Connector
    _sql: Mapping[str, str]
    _ready_index: bool | None

    def get(self, run_id: str) -> LaunchRecord | None:
        with self._connector.read() as tx:
            row = tx.one(self._sql["load"], {"run_id": run_id})
        return launch_from_row(row) if row else None

    def query(self, *, statuses: Iterable[LaunchStatus] | None = None,
              session_id: str | None = None, limit: int | None = None) -> list[LaunchRecord]:
        clauses: list[str] = []
        params: dict[str, object] = {}
        hint = ""
        if statuses is not None:
            wanted = list(statuses)
            if set(wanted) == set(READY_STATUSES):
                # The claim-order partial index, named and its WHERE in literals (bound
                # parameters never imply it): a page of the live launches (`wfrun
                # status`) reads its rows, not a sort of the whole queue (0.9 s at
                # 100,000 queued, by the status index and a temporary B-tree).
                clauses.append(f"status IN {sql_in(READY_STATUSES)}")
                hint = "ready"
            else:
                clauses.append(status_clause(wanted, params))
        if session_id is not None:
            clauses.append("origin_session_id = :session")
            params["session"] = session_id
        with self._connector.read() as tx:
            params["limit"] = tx.dialect.unlimited if limit is None else max(limit, 0)
            if hint:
                hint = self._ready_hint(tx)
            rows = tx.all(self._sql["query"].format(
                where=" AND ".join(clauses) or "1 = 1", hint=hint), params)
        return [launch_from_row(row) for row in rows]

    def queued_sources(self, *, limit: int = 1000) -> list[QueuedSources]:
        with self._connector.read() as tx:
            rows = tx.all(self._sql["queued_sources"], {"limit": max(limit, 0)})
        return [QueuedSources(str(r["source_json"]), int(r["launches"]), str(r["first_run_id"]))
                for r in rows]

    def _ready_hint(self, tx: Transaction) -> str:
        """`INDEXED BY` the claim-order index where the dialect names indexes and the
        store has it (a store opened read-only before a write-mode open added it, within
        v1, has not: it is read without the hint)."""
        if self._ready_index is None:
            dialect = tx.dialect
            self._ready_index = dialect.index_hints and tx.one(
                "SELECT 1 AS present FROM sqlite_master WHERE type = 'index'"
                " AND name = 'workflow_run_queue_ready'", {}) is not None
        return tx.dialect.indexed_by("workflow_run_queue_ready") if self._ready_index else ""

    def find_session_reservation(self, session_id: str) -> LaunchRecord | None:
        with self._connector.read() as tx:
            row = tx.one(self._sql["reservation"], {**FIXED, "session": session_id,
                                                    "run_id": ""})
        return launch_from_row(row) if row else None

    def find_continuation(self, parent_run_id: str) -> LaunchRecord | None:
        with self._connector.read() as tx:
            row = tx.one(self._sql["continuation"], {"parent": parent_run_id})
        return launch_from_row(row) if row else None

    def list_recoverable(self, *, session_id: str | None = None) -> list[LaunchRecord]:
        rule = "" if session_id is None else " AND q.origin_session_id = :session"
        with self._connector.read() as tx:  # the clock inside the statement: one round trip
            now, clock = tx.clock_sql()
            sql = self._sql["recoverable"].format(session=rule).replace(":now", now)
            rows = tx.all(sql, {**FIXED, "session": session_id, **clock})
        return [launch_from_row(row) for row in rows]

    def _enqueue_conflict(self, tx: Transaction, launch: NewLaunch) -> LostRace | None:
        existing = tx.one(self._sql["load"], {"run_id": launch.run_id})
        if existing is not None:
            return LostRace(launch.run_id, "already_exists", existing["status"])
        if launch.origin_session_id is not None:
            holder = tx.one(self._sql["reservation"], {
                **FIXED, "session": launch.origin_session_id, "run_id": launch.run_id})
            if holder is not None:
                return LostRace(launch.run_id, "session_reserved", holder["status"],
                                holder["run_id"])
        if launch.parent_run_id is not None:
            holder = tx.one(self._sql["continuation"], {"parent": launch.parent_run_id})
            if holder is not None:
                return LostRace(launch.run_id, "continuation_exists", holder["status"],
                                holder["run_id"])
        return None

    def gate(self, run_id: str) -> LaunchGate | None:
        """The launch's flow-control gate, if it has one."""
        with self._connector.read() as tx:
            row = tx.one(self._sql["gate"], {"run_id": run_id})
        if row is None:
            return None
        return LaunchGate(row["concurrency_key"], row["concurrency_limit"], row["strategy"],
                          row["rate_key"], row["rate_limit"], row["rate_per_ms"])

    def gate_holders(self, key: str) -> list[tuple[str, str]]:
        """(run id, status) of the claimed runs holding concurrency key `key`."""
        with self._connector.read() as tx:
            rows = tx.all(self._sql["gate_holders"], {"key": key})
        return [(r["run_id"], r["status"]) for r in rows]

    def gate_starts(self, key: str, since_ms: int) -> list[int]:
        """When the runs of rate key `key` started after `since_ms` (ms)."""
        with self._connector.read() as tx:
            rows = tx.all(self._sql["gate_starts"], {"key": key, "since": since_ms})
        return [r["started_at"] for r in rows]

    # The lease fence's look at a claim (_launch_queries.LeaseFence): read only, no lock.
    def check_claim(self, run_id: str, claim_token: str) -> LaunchStatus | LostRace:
        held = self.claim_left(run_id, claim_token)
        return held if isinstance(held, LostRace) else held[0]

    def claim_left(self, run_id: str, claim_token: str) -> tuple[LaunchStatus, int] | LostRace:
        # The lease columns and the clock in one statement, no row decoded.
        with self._connector.read() as tx:
            now, clock = tx.clock_sql("fence_now")
            row = tx.one(self._sql["fence"].format(now=now), {"run_id": run_id, **clock})
        lost = guard(row, run_id, HOLD, claim_token, 0 if row is None else row["fence_now"])
        if lost is not None:
            return lost
        assert row is not None
        status: LaunchStatus = row["status"]  # the guard passed: starting or running
        return status, int(row["claim_expires_at"]) - int(row["fence_now"])
