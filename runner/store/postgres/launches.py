"""`workflow_run_queue` on Postgres: the same operations and guards as on SQLite.

Every operation is one transaction: it locks the row (`SELECT ... FOR UPDATE`),
checks the expected status (`states.LAUNCH_OPERATIONS`), the claim token and the
lease, then issues an UPDATE guarded by the same status and the epoch it read (the
fence). `claim_next` takes the first claimable row with `FOR UPDATE SKIP LOCKED`, so
hosts on one database never wait on each other's candidates. A failed check returns
`LostRace` and writes nothing. Each transition appends a `launch.*` run event in
the same transaction, and a row that becomes claimable is announced with
`pg_notify` (ids only; see `wakeups.py`).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from psycopg import errors as pg_errors

from runner.store.postgres.db import Conn, PostgresDatabase, Row
from runner.store.postgres.outbox import append_event, ensure_intent, make_intent_eligible
from runner.store.postgres.reconcile import wake
from runner.store.postgres.wakeups import LAUNCH_CHANNEL, notify
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
from runner.store.sqlite.schema import sql_in
from runner.store.states import (
    CLAIMED_STATUSES,
    CONTROLLER_ERROR_MAX_BYTES,
    LAUNCH_OPERATIONS,
    LAUNCH_STATUSES,
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
    f" OR (q.status IN {sql_in(CLAIMED_STATUSES)} AND q.claim_expires_at <= %(now)s))"
)
_RESERVATION_FREE = (
    "NOT (q.status = 'parked' AND q.origin_session_id IS NOT NULL AND EXISTS ("
    " SELECT 1 FROM workflow_run_queue r WHERE r.origin_session_id = q.origin_session_id"
    f" AND r.status IN {sql_in(RESERVING_STATUSES)} AND r.run_id <> q.run_id))"
)
_DETACHED_MAY_CLAIM = "q.origin_session_id IS NULL"
_SESSION_MAY_CLAIM = "q.origin_session_id = %(session)s"
_AUTO_RESUME = "(q.status <> 'parked' OR q.park_mode = 'auto')"
_CONTINUATION_SLOT = "NOT (status IN ('failed', 'cancelled') AND started_at IS NULL)"
_HOLD = Operation("hold", CLAIMED_STATUSES, "running", needs_claim=True)

_ENTER: dict[LaunchStatus, str] = {
    "running": "input_json = NULL, launch_options_json = NULL, crash_count = 0,"
    " started_at = COALESCE(started_at, %(now)s)",
    "parked": "claim_token = NULL, claim_expires_at = NULL, input_json = NULL,"
    " launch_options_json = NULL, started_at = COALESCE(started_at, %(now)s),"
    " park_mode = %(mode)s, crash_count = 0",
    "queued": "claim_token = NULL, claim_expires_at = NULL, runner_id = NULL,"
    " crash_count = crash_count + %(crashed)s",
    "done": "claim_token = NULL, claim_expires_at = NULL, input_json = NULL,"
    " launch_options_json = NULL, started_at = COALESCE(started_at, %(now)s),"
    " finished_at = %(now)s",
    "failed": "claim_token = NULL, claim_expires_at = NULL, input_json = NULL,"
    " launch_options_json = NULL, error_code = %(code)s, error_message = %(message)s,"
    " finished_at = %(now)s",
    "cancelled": "claim_token = NULL, claim_expires_at = NULL, input_json = NULL,"
    " launch_options_json = NULL, finished_at = %(now)s, park_mode = NULL",
}
_CHILD_STATE = {"done": "succeeded", "failed": "failed", "cancelled": "failed"}


def launch_from_row(row: Row) -> LaunchRecord:
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


def _load(conn: Conn, run_id: str) -> Row | None:
    return conn.execute(
        "SELECT * FROM workflow_run_queue WHERE run_id = %s FOR UPDATE", (run_id,)
    ).fetchone()


def _guard(row: Row | None, run_id: str, op: Operation, token: str | None,
           now: int) -> LostRace | None:
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


def _status_filter(statuses: Iterable[LaunchStatus] | None, clauses: list[str],
                   params: list[object]) -> None:
    if statuses is None:
        return
    wanted = list(statuses)
    unknown = [s for s in wanted if s not in LAUNCH_STATUSES]
    if unknown:
        raise ValueError(f"unknown launch status(es) {unknown}")
    clauses.append("status = ANY(%s)")
    params.append(wanted)


def settle_child(conn: Conn, row: Row, state: str, now: int) -> None:
    """A controller's child run ended: record it on its request and wake the parent's
    key, in the transaction that ends the launch."""
    request = conn.execute(
        "SELECT w.request_id, r.controller, r.resource_key FROM workflow_requests w"
        " JOIN resources r ON r.uid = w.resource_uid"
        " WHERE w.run_id = %s AND w.state IN ('running', 'waiting') FOR UPDATE OF w",
        (row["run_id"],),
    ).fetchone()
    if request is None:
        return
    error = None
    if state not in ("succeeded", "waiting"):
        error = bounded_message(
            row["error_message"] or f"the child run ended {row['status']}",
            CONTROLLER_ERROR_MAX_BYTES,
        )
    conn.execute(
        "UPDATE workflow_requests SET state = %s, error = %s, updated_at = %s"
        " WHERE request_id = %s",
        (state, error, now, request["request_id"]),
    )
    wake(conn, request["controller"], request["resource_key"], now)


class PostgresLaunchQueue:
    """`LaunchQueue` on Postgres."""

    def __init__(self, db: PostgresDatabase) -> None:
        self._db = db

    # --- reads -------------------------------------------------------------------

    def get(self, run_id: str) -> LaunchRecord | None:
        rows = self._db.read("SELECT * FROM workflow_run_queue WHERE run_id = %s", (run_id,))
        return launch_from_row(rows[0]) if rows else None

    def query(self, *, statuses: Iterable[LaunchStatus] | None = None,
              session_id: str | None = None, limit: int | None = None) -> list[LaunchRecord]:
        clauses: list[str] = []
        params: list[object] = []
        _status_filter(statuses, clauses, params)
        if session_id is not None:
            clauses.append("origin_session_id = %s")
            params.append(session_id)
        where = " AND ".join(clauses) or "TRUE"
        rows = self._db.read(
            f"SELECT * FROM workflow_run_queue WHERE {where} ORDER BY created_at, run_id"
            " LIMIT %s",
            (*params, None if limit is None else max(limit, 0)),
        )
        return [launch_from_row(row) for row in rows]

    def page(self, *, statuses: Iterable[LaunchStatus] | None = None,
             workflow_ref: str | None = None, run_id_prefix: str | None = None,
             updated_since: int | None = None, newest_first: bool = True, limit: int = 50,
             offset: int = 0) -> list[LaunchRecord]:
        clauses: list[str] = []
        params: list[object] = []
        _status_filter(statuses, clauses, params)
        if workflow_ref is not None:
            clauses.append("workflow_ref = %s")
            params.append(workflow_ref)
        if run_id_prefix:
            clauses.append("starts_with(run_id, %s)")
            params.append(run_id_prefix)
        if updated_since is not None:
            clauses.append("updated_at >= %s")
            params.append(updated_since)
        where = " AND ".join(clauses) or "TRUE"
        order = "DESC" if newest_first else "ASC"
        rows = self._db.read(
            f"SELECT * FROM workflow_run_queue WHERE {where}"
            f" ORDER BY created_at {order}, run_id {order} LIMIT %s OFFSET %s",
            (*params, max(limit, 0), max(offset, 0)),
        )
        return [launch_from_row(row) for row in rows]

    def counts(self, *, workflow_ref: str | None = None) -> dict[str, int]:
        where, params = ("workflow_ref = %s", (workflow_ref,)) if workflow_ref else ("TRUE", ())
        rows = self._db.read(
            f"SELECT status, COUNT(*) AS n FROM workflow_run_queue WHERE {where}"
            " GROUP BY status", params)
        return {str(row["status"]): int(row["n"]) for row in rows}

    def workflow_counts(self) -> dict[str, int]:
        rows = self._db.read(
            "SELECT workflow_ref, COUNT(*) AS n FROM workflow_run_queue GROUP BY workflow_ref"
            " ORDER BY workflow_ref")
        return {str(row["workflow_ref"]): int(row["n"]) for row in rows}

    def find_session_reservation(self, session_id: str) -> LaunchRecord | None:
        rows = self._db.read(
            "SELECT * FROM workflow_run_queue WHERE origin_session_id = %s"
            f" AND status IN {sql_in(RESERVING_STATUSES)}", (session_id,))
        return launch_from_row(rows[0]) if rows else None

    def find_continuation(self, parent_run_id: str) -> LaunchRecord | None:
        rows = self._db.read(
            f"SELECT * FROM workflow_run_queue WHERE parent_run_id = %s AND {_CONTINUATION_SLOT}",
            (parent_run_id,))
        return launch_from_row(rows[0]) if rows else None

    def list_recoverable(self, *, session_id: str | None = None) -> list[LaunchRecord]:
        session_rule = "" if session_id is None else " AND q.origin_session_id = %(session)s"
        rows = self._db.read(
            f"SELECT * FROM workflow_run_queue q WHERE {_CLAIMABLE}{session_rule}"
            " ORDER BY q.created_at, q.run_id",
            {"now": self._db.now_ms(), "session": session_id})
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
            now = self._db.now_ms(conn)
            try:
                with conn.transaction():  # a savepoint: a unique violation keeps the rest
                    row = conn.execute(
                        "INSERT INTO workflow_run_queue (run_id, workflow_ref, workflow_path,"
                        " workflow_source_json, definition_digest, input_json,"
                        " launch_options_json, status, affinity_runner_id, origin_session_id,"
                        " parent_run_id, created_at, updated_at) VALUES (%s, %s, %s, %s, %s,"
                        " %s, %s, 'queued', %s, %s, %s, %s, %s) RETURNING *",
                        (launch.run_id, launch.workflow_ref, launch.workflow_path, source,
                         launch.definition_digest, input_json, options,
                         launch.affinity_runner_id, launch.origin_session_id,
                         launch.parent_run_id, now, now),
                    ).fetchone()
            except pg_errors.UniqueViolation:
                return self._enqueue_conflict(conn, launch) or LostRace(
                    launch.run_id, "already_exists")
            assert row is not None
            self._event(conn, row, now, None, "launch.queued")
            if launch.origin_session_id is None:
                notify(conn, LAUNCH_CHANNEL, launch.run_id)
        return launch_from_row(row)

    @staticmethod
    def _enqueue_conflict(conn: Conn, launch: NewLaunch) -> LostRace | None:
        existing = conn.execute(
            "SELECT status FROM workflow_run_queue WHERE run_id = %s", (launch.run_id,)
        ).fetchone()
        if existing is not None:
            return LostRace(launch.run_id, "already_exists", existing["status"])
        if launch.origin_session_id is not None:
            holder = conn.execute(
                "SELECT run_id, status FROM workflow_run_queue WHERE origin_session_id = %s"
                f" AND status IN {sql_in(RESERVING_STATUSES)}",
                (launch.origin_session_id,)).fetchone()
            if holder is not None:
                return LostRace(launch.run_id, "session_reserved", holder["status"],
                                holder["run_id"])
        if launch.parent_run_id is not None:
            holder = conn.execute(
                "SELECT run_id, status FROM workflow_run_queue WHERE parent_run_id = %s"
                f" AND {_CONTINUATION_SLOT}", (launch.parent_run_id,)).fetchone()
            if holder is not None:
                return LostRace(launch.run_id, "continuation_exists", holder["status"],
                                holder["run_id"])
        return None

    # --- claims ------------------------------------------------------------------

    def claim(self, run_id: str, *, runner_id: str, lease_seconds: float = 30.0,
              dead_runner: str | None = None) -> LaunchRecord | LostRace:
        check_id(runner_id, "runner_id")
        lease = lease_ms(lease_seconds)
        with self._db.write() as conn:
            now = self._db.now_ms(conn)
            row = _load(conn, run_id)
            if row is None:
                return LostRace(run_id, "not_found")
            status = row["status"]
            if dead_runner is not None and row["runner_id"] == dead_runner:
                # The caller proved the holder dead: its lease is void now.
                conn.execute(
                    "UPDATE workflow_run_queue SET claim_expires_at = %s WHERE run_id = %s"
                    " AND runner_id = %s AND claim_token IS NOT NULL",
                    (now, run_id, dead_runner))
                row = _load(conn, run_id)
                assert row is not None
            if status in CLAIMED_STATUSES and row["claim_expires_at"] > now:
                return LostRace(run_id, "lease_active", status)
            if status not in ("queued", "parked", *CLAIMED_STATUSES):
                return LostRace(run_id, "wrong_status", status)
            if status == "parked" and row["origin_session_id"] is not None:
                holder = conn.execute(
                    "SELECT run_id FROM workflow_run_queue WHERE origin_session_id = %s"
                    f" AND status IN {sql_in(RESERVING_STATUSES)} AND run_id <> %s",
                    (row["origin_session_id"], run_id)).fetchone()
                if holder is not None:
                    return LostRace(run_id, "session_reserved", status, holder["run_id"])
            try:
                with conn.transaction():
                    return self._take(conn, row, runner_id, now, lease)
            except pg_errors.UniqueViolation:
                # Another launch of the session took the reservation meanwhile.
                return LostRace(run_id, "session_reserved", status)

    def claim_next(self, *, runner_id: str, session_id: str | None = None,
                   lease_seconds: float = 30.0) -> LaunchRecord | None:
        check_id(runner_id, "runner_id")
        lease = lease_ms(lease_seconds)
        origin_rule = _DETACHED_MAY_CLAIM if session_id is None else _SESSION_MAY_CLAIM
        with self._db.write() as conn:
            now = self._db.now_ms(conn)
            row = conn.execute(
                f"SELECT * FROM workflow_run_queue q WHERE {_CLAIMABLE} AND {origin_rule}"
                f" AND {_RESERVATION_FREE} AND {_AUTO_RESUME}"
                " ORDER BY CASE WHEN q.affinity_runner_id = %(runner)s THEN 0 ELSE 1 END,"
                " q.created_at, q.run_id LIMIT 1 FOR UPDATE SKIP LOCKED",
                {"now": now, "session": session_id, "runner": runner_id},
            ).fetchone()
            if row is None:
                return None
            taken = self._take(conn, row, runner_id, now, lease)
        return taken if isinstance(taken, LaunchRecord) else None

    def _take(self, conn: Conn, row: Row, runner_id: str, now: int,
              lease: int) -> LaunchRecord | LostRace:
        claimed = conn.execute(
            "UPDATE workflow_run_queue AS q SET"
            " status = CASE WHEN q.status IN ('queued', 'parked') THEN 'starting'"
            " ELSE q.status END,"
            " runner_id = %(runner)s, claim_token = %(token)s, claim_expires_at = %(expires)s,"
            " epoch = q.epoch + 1, updated_at = %(now)s, park_mode = NULL,"
            " crash_count = q.crash_count + (q.status = 'starting')::int"
            " WHERE q.run_id = %(run_id)s AND q.status = %(status)s AND q.epoch = %(epoch)s"
            f" AND {_CLAIMABLE} RETURNING *",
            {"runner": runner_id, "token": new_claim_token(), "expires": now + lease,
             "now": now, "run_id": row["run_id"], "status": row["status"],
             "epoch": row["epoch"]},
        ).fetchone()
        if claimed is None:
            return LostRace(row["run_id"], "epoch_mismatch", row["status"])
        event = "launch.starting" if row["status"] != claimed["status"] else "launch.reclaimed"
        self._event(conn, claimed, now, row["status"], event)
        return launch_from_row(claimed)

    def renew_lease(self, run_id: str, claim_token: str, *,
                    lease_seconds: float = 30.0) -> LaunchRecord | LostRace:
        lease = lease_ms(lease_seconds)
        with self._db.write() as conn:
            now = self._db.now_ms(conn)
            row = _load(conn, run_id)
            lost = _guard(row, run_id, _HOLD, claim_token, now)
            if lost is not None:
                return lost
            renewed = conn.execute(
                "UPDATE workflow_run_queue SET claim_expires_at = %s, updated_at = %s"
                " WHERE run_id = %s AND claim_token = %s AND claim_expires_at > %s RETURNING *",
                (now + lease, now, run_id, claim_token, now)).fetchone()
        assert renewed is not None
        return launch_from_row(renewed)

    def check_claim(self, run_id: str, claim_token: str) -> LaunchRecord | LostRace:
        with self._db.write() as conn:
            now = self._db.now_ms(conn)
            row = conn.execute(
                "SELECT * FROM workflow_run_queue WHERE run_id = %s", (run_id,)).fetchone()
        lost = _guard(row, run_id, _HOLD, claim_token, now)
        if lost is not None:
            return lost
        assert row is not None
        return launch_from_row(row)

    # --- transitions -------------------------------------------------------------

    def mark_running(self, run_id: str, claim_token: str) -> LaunchRecord | LostRace:
        return self._transition("mark_running", run_id, claim_token)

    def park(self, run_id: str, claim_token: str, *,
             mode: ParkMode = "explicit") -> LaunchRecord | LostRace:
        if mode not in PARK_MODES:
            raise ValueError(f"unknown park mode {mode!r}")
        return self._transition("park", run_id, claim_token, {"mode": mode})

    def finish(self, run_id: str, claim_token: str, *, waiting: bool = False,
               turn_intent: NewTurnIntent | None = None) -> LaunchRecord | LostRace:
        child = {"child_state": "waiting"} if waiting else {}
        return self._transition("finish", run_id, claim_token, child, turn_intent,
                                intent_optional=True)

    def fail(self, run_id: str, claim_token: str, *, code: str, message: str,
             turn_intent: NewTurnIntent | None = None) -> LaunchRecord | LostRace:
        extra = {"code": check_error_code(code), "message": bounded_message(message)}
        if code == "interrupted":
            extra["child_state"] = "interrupted"
        return self._transition("fail", run_id, claim_token, extra, turn_intent)

    def release(self, run_id: str, claim_token: str) -> LaunchRecord | LostRace:
        return self._transition("release", run_id, claim_token, {"crashed": 0})

    def cancel(self, run_id: str, *, claim_token: str | None = None) -> LaunchRecord | LostRace:
        if claim_token is None:
            return self._transition("cancel", run_id, None)
        return self._transition("cancel_claimed", run_id, claim_token)

    def _transition(self, op_name: str, run_id: str, claim_token: str | None,
                    extra: dict[str, Any] | None = None,
                    turn_intent: NewTurnIntent | None = None,
                    intent_optional: bool = False) -> LaunchRecord | LostRace:
        op = LAUNCH_OPERATIONS[op_name]
        try:
            with self._db.write() as conn:
                now = self._db.now_ms(conn)
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

    def _apply(self, conn: Conn, row: Row, target: LaunchStatus, now: int,
               extra: dict[str, Any], event: str | None = None,
               payload: dict[str, Any] | None = None) -> LaunchRecord:
        child_state = extra.pop("child_state", None)
        params = {"crashed": 1, "now": now, "run_id": row["run_id"], "status": row["status"],
                  "epoch": row["epoch"], "target": target, **extra}
        updated = conn.execute(
            "UPDATE workflow_run_queue SET status = %(target)s, updated_at = %(now)s,"
            f" {_ENTER[target]}"
            " WHERE run_id = %(run_id)s AND status = %(status)s AND epoch = %(epoch)s"
            " RETURNING *",
            params,
        ).fetchone()
        assert updated is not None, "row changed under its row lock"
        self._event(conn, updated, now, row["status"], event or f"launch.{target}", payload)
        if target in _CHILD_STATE:
            settle_child(conn, updated, child_state or _CHILD_STATE[target], now)
        if updated["origin_session_id"] is None and (
                target == "queued" or (target == "parked" and updated["park_mode"] == "auto")):
            notify(conn, LAUNCH_CHANNEL, updated["run_id"])
        return launch_from_row(updated)

    @staticmethod
    def _intent(conn: Conn, intent: NewTurnIntent, now: int, *, optional: bool = False) -> None:
        """Ensure the intent and make it eligible; a lost race aborts the whole
        transaction unless the intent is `optional`."""
        ensured = ensure_intent(conn, intent, now)
        if not isinstance(ensured, LostRace):
            ensured = make_intent_eligible(conn, intent.intent_id, now)
        if isinstance(ensured, LostRace) and not optional:
            raise _Abort(ensured)

    # --- recovery ----------------------------------------------------------------

    def recover_expired_starting(self, run_id: str, *, epoch: int, outcome: RecoveryOutcome,
                                 code: str | None = None, message: str | None = None,
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
            extra = {"mode": "explicit"}
        try:
            with self._db.write() as conn:
                now = self._db.now_ms(conn)
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
                updated = self._apply(conn, row, outcome, now, extra, "launch.recovered",
                                      payload)
                if turn_intent is not None:
                    self._intent(conn, turn_intent, now)
        except _Abort as abort:
            return abort.lost
        return updated

    @staticmethod
    def _event(conn: Conn, row: Row, now: int, previous: str | None, event_type: str,
               payload: dict[str, Any] | None = None) -> None:
        body: dict[str, Any] = {"from": previous, "to": row["status"], "epoch": row["epoch"]}
        if row["error_code"] is not None:
            body["error_code"] = row["error_code"]
        body.update(payload or {})
        append_event(conn, now_ms=now, run_id=row["run_id"], event_type=event_type,
                     payload=body, workflow_ref=row["workflow_ref"],
                     runner_id=row["runner_id"])


class _Abort(Exception):
    def __init__(self, lost: LostRace) -> None:
        super().__init__(lost.reason)
        self.lost = lost
