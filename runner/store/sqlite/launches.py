"""`workflow_run_queue` on SQLite: durable deferred launches (seed 000).

Every operation runs in one `BEGIN IMMEDIATE` transaction: it reads the row,
checks the expected status (from `states.LAUNCH_OPERATIONS`), the claim token
and the lease, and then issues an UPDATE guarded by the same status and the
epoch it read. A failed check returns `LostRace` and writes nothing. Each
successful transition appends a `launch.*` run event in the same transaction.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Iterable
from typing import Any

from runner.store.records import (
    INPUT_MAX_BYTES,
    LaunchRecord,
    LostRace,
    NewLaunch,
    NewTurnIntent,
    bounded_message,
    canonical_json,
    check_error_code,
    check_id,
    json_object,
    lease_ms,
    new_claim_token,
)
from runner.store.sqlite.db import SqliteDatabase
from runner.store.sqlite.events import append_event
from runner.store.sqlite.intents import ensure_intent, make_intent_eligible
from runner.store.sqlite.launch_pages import LaunchPages, status_clause
from runner.store.sqlite.requests import settle_child
from runner.store.sqlite.schema import sql_in
from runner.store.states import (
    CLAIMED_STATUSES,
    LAUNCH_OPERATIONS,
    PARK_MODES,
    RECOVERY_PATHS,
    RESERVING_STATUSES,
    LaunchStatus,
    Operation,
    ParkMode,
    RecoveryOutcome,
)

_CLAIMABLE = (
    "(q.status IN ('queued', 'parked')"
    f" OR (q.status IN {sql_in(CLAIMED_STATUSES)} AND q.claim_expires_at <= :now))"
)
# A parked launch cannot take its session back while another launch reserves it.
_RESERVATION_FREE = (
    "NOT (q.status = 'parked' AND q.origin_session_id IS NOT NULL AND EXISTS ("
    " SELECT 1 FROM workflow_run_queue r WHERE r.origin_session_id = q.origin_session_id"
    f" AND r.status IN {sql_in(RESERVING_STATUSES)} AND r.run_id <> q.run_id))"
)
# Detached launches belong to hosts, session launches to their session: a session
# never activates a `wfrun start` launch (its prompt and input are not that
# conversation's), and a host never takes a session's launch.
_DETACHED_MAY_CLAIM = "q.origin_session_id IS NULL"
_SESSION_MAY_CLAIM = "q.origin_session_id = :session"
# Only a run parked by a host shutdown resumes by itself; the others wait to be asked.
_AUTO_RESUME = "(q.status <> 'parked' OR q.park_mode = 'auto')"
_CONTINUATION_SLOT = "NOT (status IN ('failed', 'cancelled') AND started_at IS NULL)"


def launch_from_row(row: sqlite3.Row) -> LaunchRecord:
    return LaunchRecord(
        run_id=row["run_id"],
        workflow_ref=row["workflow_ref"],
        workflow_path=row["workflow_path"],
        source=json.loads(row["workflow_source_json"]),
        definition_digest=row["definition_digest"],
        input_json=row["input_json"],
        options_json=row["launch_options_json"],
        status=row["status"],
        runner_id=row["runner_id"],
        claim_token=row["claim_token"],
        claim_expires_at=row["claim_expires_at"],
        epoch=row["epoch"],
        affinity_runner_id=row["affinity_runner_id"],
        origin_session_id=row["origin_session_id"],
        parent_run_id=row["parent_run_id"],
        error_code=row["error_code"],
        error_message=row["error_message"],
        created_at=row["created_at"],
        updated_at=row["updated_at"],
        started_at=row["started_at"],
        finished_at=row["finished_at"],
        park_mode=row["park_mode"],
        crash_count=row["crash_count"],
    )


def _load(conn: sqlite3.Connection, run_id: str) -> sqlite3.Row | None:
    row: sqlite3.Row | None = conn.execute(
        "SELECT * FROM workflow_run_queue WHERE run_id = ?", (run_id,)
    ).fetchone()
    return row


#: The fence and lease renewal: a live claim in starting|running.
_HOLD = Operation("hold", CLAIMED_STATUSES, "running", needs_claim=True)


def _guard(
    row: sqlite3.Row | None, run_id: str, op: Operation, token: str | None, now: int
) -> LostRace | None:
    if row is None:
        return LostRace(run_id, "not_found")
    if row["status"] not in op.sources:
        return LostRace(run_id, "wrong_status", row["status"])
    if op.needs_claim:
        if token is None or row["claim_token"] != token:
            return LostRace(run_id, "token_mismatch", row["status"])
        if row["claim_expires_at"] <= now:
            return LostRace(run_id, "lease_expired", row["status"])
    return None


# Column changes per target status; `:now` is bound by the caller.
_ENTER: dict[LaunchStatus, str] = {
    "running": "input_json = NULL, launch_options_json = NULL, crash_count = 0,"
    " started_at = COALESCE(started_at, :now)",
    "parked": "claim_token = NULL, claim_expires_at = NULL, input_json = NULL,"
    " launch_options_json = NULL, started_at = COALESCE(started_at, :now),"
    " park_mode = :mode, crash_count = 0",
    # Recovery goes back to queued (its runner died while starting): a crash; a release
    # (the disk refused the bundle) is not one (:crashed 0).
    "queued": "claim_token = NULL, claim_expires_at = NULL, runner_id = NULL,"
    " crash_count = crash_count + :crashed",
    "done": "claim_token = NULL, claim_expires_at = NULL, input_json = NULL,"
    " launch_options_json = NULL, started_at = COALESCE(started_at, :now), finished_at = :now",
    "failed": "claim_token = NULL, claim_expires_at = NULL, input_json = NULL,"
    " launch_options_json = NULL, error_code = :code, error_message = :message,"
    " finished_at = :now",
    "cancelled": "claim_token = NULL, claim_expires_at = NULL, input_json = NULL,"
    " launch_options_json = NULL, finished_at = :now, park_mode = NULL",
}
#: What a child workflow request (a controller's, linked by run id) becomes when
#: its launch ends; the parent's key is woken in the same transaction.
_CHILD_STATE = {"done": "succeeded", "failed": "failed", "cancelled": "failed"}


class SqliteLaunchQueue(LaunchPages):
    """`LaunchQueue` on SQLite."""

    def __init__(self, db: SqliteDatabase, now_ms: Callable[[], int]) -> None:
        self._db = db
        self._now_ms = now_ms

    # --- reads -------------------------------------------------------------------

    def get(self, run_id: str) -> LaunchRecord | None:
        rows = self._db.read("SELECT * FROM workflow_run_queue WHERE run_id = ?", (run_id,))
        return launch_from_row(rows[0]) if rows else None

    def query(
        self,
        *,
        statuses: Iterable[LaunchStatus] | None = None,
        session_id: str | None = None,
        limit: int | None = None,
    ) -> list[LaunchRecord]:
        clauses: list[str] = []
        params: list[object] = []
        if statuses is not None:
            clauses.append(status_clause(statuses, params))
        if session_id is not None:
            clauses.append("origin_session_id = ?")
            params.append(session_id)
        where = " AND ".join(clauses) or "1"
        # SQLite reads LIMIT -1 as "no limit".
        rows = self._db.read(
            f"SELECT * FROM workflow_run_queue WHERE {where} ORDER BY created_at, run_id LIMIT ?",
            (*params, -1 if limit is None else max(limit, 0)),
        )
        return [launch_from_row(row) for row in rows]

    def find_session_reservation(self, session_id: str) -> LaunchRecord | None:
        rows = self._db.read(
            "SELECT * FROM workflow_run_queue WHERE origin_session_id = ?"
            f" AND status IN {sql_in(RESERVING_STATUSES)}",
            (session_id,),
        )
        return launch_from_row(rows[0]) if rows else None

    def find_continuation(self, parent_run_id: str) -> LaunchRecord | None:
        rows = self._db.read(
            f"SELECT * FROM workflow_run_queue WHERE parent_run_id = ? AND {_CONTINUATION_SLOT}",
            (parent_run_id,),
        )
        return launch_from_row(rows[0]) if rows else None

    def list_recoverable(self, *, session_id: str | None = None) -> list[LaunchRecord]:
        session_rule = "" if session_id is None else " AND q.origin_session_id = :session"
        rows = self._db.read(
            f"SELECT * FROM workflow_run_queue q WHERE {_CLAIMABLE}{session_rule}"
            " ORDER BY q.created_at, q.run_id",
            {"now": self._now_ms(), "session": session_id},
        )
        return [launch_from_row(row) for row in rows]

    # --- enqueue -----------------------------------------------------------------

    def enqueue(self, launch: NewLaunch) -> LaunchRecord | LostRace:
        check_id(launch.run_id, "run_id")
        check_id(launch.workflow_ref, "workflow_ref")
        check_id(launch.definition_digest, "definition_digest")
        for name in ("origin_session_id", "parent_run_id", "affinity_runner_id"):
            if getattr(launch, name) is not None:
                check_id(getattr(launch, name), name)
        if launch.parent_run_id == launch.run_id:
            raise ValueError(f"launch {launch.run_id} cannot continue itself")
        source = json_object(launch.source, what="source identity")
        input_json = canonical_json(launch.input, what="launch input", max_bytes=INPUT_MAX_BYTES)
        options = (
            None if launch.options is None else json_object(launch.options, what="launch options")
        )
        with self._db.write() as conn:
            lost = self._enqueue_conflict(conn, launch)
            if lost is not None:
                return lost
            now = self._now_ms()
            try:
                row = conn.execute(
                    "INSERT INTO workflow_run_queue (run_id, workflow_ref, workflow_path,"
                    " workflow_source_json, definition_digest, input_json, launch_options_json,"
                    " status, affinity_runner_id, origin_session_id, parent_run_id, created_at,"
                    " updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, 'queued', ?, ?, ?, ?, ?)"
                    " RETURNING *",
                    (
                        launch.run_id,
                        launch.workflow_ref,
                        launch.workflow_path,
                        source,
                        launch.definition_digest,
                        input_json,
                        options,
                        launch.affinity_runner_id,
                        launch.origin_session_id,
                        launch.parent_run_id,
                        now,
                        now,
                    ),
                ).fetchone()
            except sqlite3.IntegrityError:
                return self._enqueue_conflict(conn, launch) or LostRace(
                    launch.run_id, "already_exists"
                )
            self._event(conn, row, now, None, "launch.queued")
        return launch_from_row(row)

    @staticmethod
    def _enqueue_conflict(conn: sqlite3.Connection, launch: NewLaunch) -> LostRace | None:
        existing = _load(conn, launch.run_id)
        if existing is not None:
            return LostRace(launch.run_id, "already_exists", existing["status"])
        if launch.origin_session_id is not None:
            holder = conn.execute(
                "SELECT run_id, status FROM workflow_run_queue WHERE origin_session_id = ?"
                f" AND status IN {sql_in(RESERVING_STATUSES)}",
                (launch.origin_session_id,),
            ).fetchone()
            if holder is not None:
                return LostRace(launch.run_id, "session_reserved", holder[1], holder[0])
        if launch.parent_run_id is not None:
            holder = conn.execute(
                "SELECT run_id, status FROM workflow_run_queue WHERE parent_run_id = ?"
                f" AND {_CONTINUATION_SLOT}",
                (launch.parent_run_id,),
            ).fetchone()
            if holder is not None:
                return LostRace(launch.run_id, "continuation_exists", holder[1], holder[0])
        return None

    # --- claims ------------------------------------------------------------------

    def claim(
        self,
        run_id: str,
        *,
        runner_id: str,
        lease_seconds: float = 30.0,
        dead_runner: str | None = None,
    ) -> LaunchRecord | LostRace:
        check_id(runner_id, "runner_id")
        lease = lease_ms(lease_seconds)
        with self._db.write() as conn:
            now = self._now_ms()
            row = _load(conn, run_id)
            if row is None:
                return LostRace(run_id, "not_found")
            status = row["status"]
            if dead_runner is not None and row["runner_id"] == dead_runner:
                # The caller proved the holder dead (same machine, no such process):
                # its lease is void now, not when it runs out.
                conn.execute(
                    "UPDATE workflow_run_queue SET claim_expires_at = ? WHERE run_id = ?"
                    " AND runner_id = ? AND claim_token IS NOT NULL",
                    (now, run_id, dead_runner),
                )
                row = _load(conn, run_id)
                assert row is not None
            if status in CLAIMED_STATUSES and row["claim_expires_at"] > now:
                return LostRace(run_id, "lease_active", status)
            if status not in ("queued", "parked", *CLAIMED_STATUSES):
                return LostRace(run_id, "wrong_status", status)
            if status == "parked" and row["origin_session_id"] is not None:
                holder = conn.execute(
                    "SELECT run_id, status FROM workflow_run_queue WHERE origin_session_id = ?"
                    f" AND status IN {sql_in(RESERVING_STATUSES)} AND run_id <> ?",
                    (row["origin_session_id"], run_id),
                ).fetchone()
                if holder is not None:
                    return LostRace(run_id, "session_reserved", status, holder[0])
            return self._take(conn, row, runner_id, now, lease)

    def claim_next(
        self, *, runner_id: str, session_id: str | None = None, lease_seconds: float = 30.0
    ) -> LaunchRecord | None:
        check_id(runner_id, "runner_id")
        lease = lease_ms(lease_seconds)
        origin_rule = _DETACHED_MAY_CLAIM if session_id is None else _SESSION_MAY_CLAIM
        with self._db.write() as conn:
            now = self._now_ms()
            row = conn.execute(
                f"SELECT * FROM workflow_run_queue q WHERE {_CLAIMABLE} AND {origin_rule}"
                f" AND {_RESERVATION_FREE} AND {_AUTO_RESUME}"
                " ORDER BY CASE WHEN q.affinity_runner_id = :runner THEN 0 ELSE 1 END,"
                " q.created_at, q.run_id LIMIT 1",
                {"now": now, "session": session_id, "runner": runner_id},
            ).fetchone()
            if row is None:
                return None
            taken = self._take(conn, row, runner_id, now, lease)
        assert isinstance(taken, LaunchRecord)
        return taken

    def _take(
        self, conn: sqlite3.Connection, row: sqlite3.Row, runner_id: str, now: int, lease: int
    ) -> LaunchRecord | LostRace:
        """Claim a row already checked to be claimable, guarded by its status and epoch."""
        claimed = conn.execute(
            "UPDATE workflow_run_queue AS q SET"
            " status = CASE WHEN q.status IN ('queued', 'parked') THEN 'starting'"
            " ELSE q.status END,"
            " runner_id = :runner, claim_token = :token, claim_expires_at = :expires,"
            " epoch = q.epoch + 1, updated_at = :now, park_mode = NULL,"
            # Taking over an expired `starting` claim means its runner died activating it.
            " crash_count = q.crash_count + (q.status = 'starting')"
            " WHERE q.run_id = :run_id AND q.status = :status AND q.epoch = :epoch"
            f" AND {_CLAIMABLE}"
            " RETURNING *",
            {
                "runner": runner_id,
                "token": new_claim_token(),
                "expires": now + lease,
                "now": now,
                "run_id": row["run_id"],
                "status": row["status"],
                "epoch": row["epoch"],
            },
        ).fetchone()
        if claimed is None:
            return LostRace(row["run_id"], "epoch_mismatch", row["status"])
        event = "launch.starting" if row["status"] != claimed["status"] else "launch.reclaimed"
        self._event(conn, claimed, now, row["status"], event)
        return launch_from_row(claimed)

    def renew_lease(
        self, run_id: str, claim_token: str, *, lease_seconds: float = 30.0
    ) -> LaunchRecord | LostRace:
        lease = lease_ms(lease_seconds)
        with self._db.write() as conn:
            now = self._now_ms()
            row = _load(conn, run_id)
            lost = _guard(row, run_id, _HOLD, claim_token, now)
            if lost is not None:
                return lost
            renewed = conn.execute(
                "UPDATE workflow_run_queue SET claim_expires_at = ?, updated_at = ?"
                " WHERE run_id = ? AND claim_token = ? AND claim_expires_at > ? RETURNING *",
                (now + lease, now, run_id, claim_token, now),
            ).fetchone()
        return launch_from_row(renewed)

    def check_claim(self, run_id: str, claim_token: str) -> LaunchRecord | LostRace:
        rows = self._db.read("SELECT * FROM workflow_run_queue WHERE run_id = ?", (run_id,))
        row = rows[0] if rows else None
        lost = _guard(row, run_id, _HOLD, claim_token, self._now_ms())
        if lost is not None:
            return lost
        assert row is not None
        return launch_from_row(row)

    # --- transitions -------------------------------------------------------------

    def mark_running(self, run_id: str, claim_token: str) -> LaunchRecord | LostRace:
        return self._transition("mark_running", run_id, claim_token)

    def park(
        self, run_id: str, claim_token: str, *, mode: ParkMode = "explicit"
    ) -> LaunchRecord | LostRace:
        if mode not in PARK_MODES:
            raise ValueError(f"unknown park mode {mode!r}")
        return self._transition("park", run_id, claim_token, {"mode": mode})

    def finish(
        self,
        run_id: str,
        claim_token: str,
        *,
        waiting: bool = False,
        turn_intent: NewTurnIntent | None = None,
    ) -> LaunchRecord | LostRace:
        child = {"child_state": "waiting"} if waiting else {}
        # A closing presentation yields to an intent already pending for the run (one
        # pending intent per run and session) instead of undoing the finish.
        return self._transition(
            "finish", run_id, claim_token, child, turn_intent, intent_optional=True
        )

    def fail(
        self,
        run_id: str,
        claim_token: str,
        *,
        code: str,
        message: str,
        turn_intent: NewTurnIntent | None = None,
    ) -> LaunchRecord | LostRace:
        extra = {"code": check_error_code(code), "message": bounded_message(message)}
        if code == "interrupted":
            extra["child_state"] = "interrupted"  # a controller may start a new attempt
        return self._transition("fail", run_id, claim_token, extra, turn_intent)

    def release(self, run_id: str, claim_token: str) -> LaunchRecord | LostRace:
        return self._transition("release", run_id, claim_token, {"crashed": 0})

    def cancel(self, run_id: str, *, claim_token: str | None = None) -> LaunchRecord | LostRace:
        if claim_token is None:
            return self._transition("cancel", run_id, None)
        return self._transition("cancel_claimed", run_id, claim_token)

    def _transition(
        self,
        op_name: str,
        run_id: str,
        claim_token: str | None,
        extra: dict[str, Any] | None = None,
        turn_intent: NewTurnIntent | None = None,
        intent_optional: bool = False,
    ) -> LaunchRecord | LostRace:
        op = LAUNCH_OPERATIONS[op_name]
        try:
            with self._db.write() as conn:
                now = self._now_ms()
                row = _load(conn, run_id)
                lost = _guard(row, run_id, op, claim_token, now)
                if lost is not None:
                    return lost
                assert row is not None
                updated = self._apply(conn, row, op.target, now, extra or {})
                if turn_intent is not None:
                    self._intent(conn, turn_intent, now, optional=intent_optional)
        except _Abort as abort:
            return abort.lost
        return updated

    def _apply(
        self,
        conn: sqlite3.Connection,
        row: sqlite3.Row,
        target: LaunchStatus,
        now: int,
        extra: dict[str, Any],
        event: str | None = None,
        payload: dict[str, Any] | None = None,
    ) -> LaunchRecord:
        child_state = extra.pop("child_state", None)
        params = {
            "crashed": 1,
            "now": now,
            "run_id": row["run_id"],
            "status": row["status"],
            "epoch": row["epoch"],
            "target": target,
            **extra,
        }
        updated = conn.execute(
            f"UPDATE workflow_run_queue SET status = :target, updated_at = :now, {_ENTER[target]}"
            " WHERE run_id = :run_id AND status = :status AND epoch = :epoch RETURNING *",
            params,
        ).fetchone()
        assert updated is not None, "row changed inside an immediate transaction"
        self._event(conn, updated, now, row["status"], event or f"launch.{target}", payload)
        if target in _CHILD_STATE:
            settle_child(conn, updated, child_state or _CHILD_STATE[target], now)
        return launch_from_row(updated)

    @staticmethod
    def _intent(
        conn: sqlite3.Connection, intent: NewTurnIntent, now: int, *, optional: bool = False
    ) -> None:
        """Ensure the intent and make it eligible; a lost race aborts the whole
        transaction (raised as _Abort so the write context rolls back) unless the
        intent is `optional`."""
        ensured = ensure_intent(conn, intent, now)
        if not isinstance(ensured, LostRace):
            ensured = make_intent_eligible(conn, intent.intent_id, now)
        if isinstance(ensured, LostRace) and not optional:
            raise _Abort(ensured)

    # --- recovery ----------------------------------------------------------------

    def recover_expired_starting(
        self,
        run_id: str,
        *,
        epoch: int,
        outcome: RecoveryOutcome,
        code: str | None = None,
        message: str | None = None,
        turn_intent: NewTurnIntent | None = None,
    ) -> LaunchRecord | LostRace:
        if outcome not in RECOVERY_PATHS:
            raise ValueError(f"unknown recovery outcome {outcome!r}")
        extra: dict[str, Any] = {}
        if outcome == "failed":
            if code is None or message is None:
                raise ValueError("recovering to failed needs a code and a message")
            extra = {"code": check_error_code(code), "message": bounded_message(message)}
        if outcome == "parked":
            extra = {"mode": "explicit"}  # a waiting bundle: it continues when answered
        try:
            with self._db.write() as conn:
                now = self._now_ms()
                row = _load(conn, run_id)
                if row is None:
                    return LostRace(run_id, "not_found")
                if row["status"] != "starting":
                    return LostRace(run_id, "wrong_status", row["status"])
                if row["epoch"] != epoch:
                    return LostRace(run_id, "epoch_mismatch", row["status"])
                if row["claim_expires_at"] > now:
                    return LostRace(run_id, "lease_active", row["status"])
                payload = {"path": list(RECOVERY_PATHS[outcome])}
                updated = self._apply(conn, row, outcome, now, extra, "launch.recovered", payload)
                if turn_intent is not None:
                    self._intent(conn, turn_intent, now)
        except _Abort as abort:
            return abort.lost
        return updated

    def _event(
        self,
        conn: sqlite3.Connection,
        row: sqlite3.Row,
        now: int,
        previous: str | None,
        event_type: str,
        payload: dict[str, Any] | None = None,
    ) -> None:
        body: dict[str, Any] = {"from": previous, "to": row["status"], "epoch": row["epoch"]}
        if row["error_code"] is not None:
            body["error_code"] = row["error_code"]
        body.update(payload or {})
        append_event(
            conn,
            now_ms=now,
            run_id=row["run_id"],
            event_type=event_type,
            payload=body,
            workflow_ref=row["workflow_ref"],
            runner_id=row["runner_id"],
        )


class _Abort(Exception):
    def __init__(self, lost: LostRace) -> None:
        super().__init__(lost.reason)
        self.lost = lost
