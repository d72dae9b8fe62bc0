"""The launch queue's rows as its modules share them (`domain/_launches.py` and its
reads): the named statements, the row's mapping both ways (`launch_values`,
`launch_from_row`), the one guard every transition applies (`guard`) and the lease
fence that rests on it (`LeaseFence`), and the run events each transition appends in
its own transaction (`EventLog`, `RunEvents`). A backend overrides a statement by name
(`named()`).

`run_events` is the append-only audit feed: the store appends one event for every
launch transition in the same transaction (`launch.queued`, `launch.starting`,
`launch.reclaimed`, `launch.running`, `launch.parked`, `launch.done`, `launch.failed`,
`launch.cancelled`, `launch.recovered`); callers may append their own. Payloads never
carry launch input, options or prompts.

Commit order = `seq` order. A reader pages with `read(after_seq=last seen)`, so an
event must never become visible after one with a higher `seq`. SQLite writers are
serialized anyway. On Postgres a sequence hands out numbers at INSERT time, and a
transaction that drew seq 11 may commit after one that drew 12; a reader that saw
12 would never read 11. So a transaction appends its events *last*, after taking
the `order_appends` lock (a transaction-scoped advisory lock, released at commit):
numbers are drawn in commit order. Nothing is locked after it, so it cannot take
part in a deadlock; the cost is that appends (the tail of each transition and its
commit) take turns.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Protocol

from runner._canonical import canonical_json as _canonical_json
from runner.clock import Clock
from runner.store._connector import Connector, Row, Transaction, in_params, named
from runner.store._ddl import sql_in
from runner.store._errors import StoreError, StoreUnreachable
from runner.store._records import (
    INPUT_MAX_BYTES,
    PAYLOAD_MAX_BYTES,
    LaunchRecord,
    LostRace,
    NewLaunch,
    RunEvent,
    canonical_json,
    check_id,
    json_object,
)
from runner.store._states import (
    CLAIMED_STATUSES,
    HANDED_OVER,
    READY_STATUSES,
    RESERVING_STATUSES,
    LaunchStatus,
    Operation,
)

#: Wake-ups for hosts waiting on detached launches (Postgres LISTEN/NOTIFY).
LAUNCH_CHANNEL = "wfrun_launch"

_CLAIMED, _CLAIMED_PARAMS = in_params("claimed", CLAIMED_STATUSES)
_RESERVING, _RESERVING_PARAMS = in_params("reserving", RESERVING_STATUSES)
FIXED: dict[str, object] = {**_CLAIMED_PARAMS, **_RESERVING_PARAMS}

_CLAIMABLE = (
    "(q.status IN ('queued', 'parked')"
    f" OR (q.status IN {_CLAIMED} AND q.claim_expires_at <= :now))"
)
# A parked launch cannot take its session back while another launch reserves it.
_RESERVATION_FREE = (
    "NOT (q.status = 'parked' AND q.origin_session_id IS NOT NULL AND EXISTS ("
    " SELECT 1 FROM workflow_run_queue r WHERE r.origin_session_id = q.origin_session_id"
    f" AND r.status IN {_RESERVING} AND r.run_id <> q.run_id))"
)
# Detached launches belong to hosts, session launches to their session: a session
# never activates a `wfrun start` launch (its prompt and input are not that
# conversation's), and a host takes a session's launch only once the session has
# ended and handed it over (a live session's queued launch waits for its boundary).
ORIGIN = {True: f"(q.origin_session_id IS NULL OR q.affinity_runner_id = '{HANDED_OVER}')",
          False: "q.origin_session_id = :session"}
# Only a run parked by a host shutdown resumes by itself; the others wait to be asked.
_AUTO_RESUME = "(q.status <> 'parked' OR q.park_mode = 'auto')"
_READY = f"q.status IN {sql_in(READY_STATUSES)}"
# Flow control (DESIGN §10): a queued or parked launch whose gate is shut is not
# claimable, so it holds no host slot: its concurrency key has `limit` claimed runs,
# or its rate key saw `limit` starts within the period. (A claim taken over after a
# lease ran out is the same start, not a new one.) `_take` re-checks under a lock.
_GATE_SHUT = (
    "EXISTS (SELECT 1 FROM launch_gates g WHERE g.run_id = q.run_id AND ("
    "(g.concurrency_key IS NOT NULL AND (SELECT count(*) FROM launch_gates o"
    " JOIN workflow_run_queue r ON r.run_id = o.run_id WHERE o.concurrency_key ="
    f" g.concurrency_key AND r.status IN {sql_in(CLAIMED_STATUSES)} AND r.run_id <> q.run_id)"
    " >= g.concurrency_limit)"
    " OR (g.rate_key IS NOT NULL AND (SELECT count(*) FROM launch_gates o WHERE"
    " o.rate_key = g.rate_key AND o.started_at > :now - g.rate_per_ms) >= g.rate_limit)))"
)
_GATE_OPEN = f"(q.status NOT IN ('queued', 'parked') OR NOT {_GATE_SHUT})"
_CLAIM_TERMS = (f"{_CLAIMABLE} AND {{origin}} AND {_RESERVATION_FREE} AND {_AUTO_RESUME}"
                f" AND {_GATE_OPEN}")
_GATED = "(SELECT 1 FROM launch_gates gj WHERE gj.run_id = q.run_id) AS gated"
_CONTINUATION_SLOT = "NOT (status IN ('failed', 'cancelled') AND started_at IS NULL)"

SQL: Mapping[str, str] = {
    "gate": "SELECT * FROM launch_gates WHERE run_id = :run_id",
    "gate_shut": f"SELECT 1 AS shut FROM workflow_run_queue q WHERE q.run_id = :run_id"
    f" AND {_GATE_SHUT}",
    "gate_insert": "INSERT INTO launch_gates (run_id, concurrency_key, concurrency_limit,"
    " strategy, rate_key, rate_limit, rate_per_ms) VALUES (:run_id, :ckey, :climit,"
    " :strategy, :rkey, :rlimit, :rper)",
    "gate_started": "UPDATE launch_gates SET started_at = COALESCE(started_at, :now)"
    " WHERE run_id = :run_id",
    # The claimed runs holding a concurrency key, oldest first (`why`, cancel_running).
    "gate_holders": "SELECT r.run_id, r.status FROM launch_gates o JOIN workflow_run_queue r"
    f" ON r.run_id = o.run_id WHERE o.concurrency_key = :key AND r.status IN"
    f" {sql_in(CLAIMED_STATUSES)} ORDER BY r.created_at, r.run_id",
    "gate_starts": "SELECT started_at FROM launch_gates WHERE rate_key = :key AND"
    " started_at > :since ORDER BY started_at",
    "load": "SELECT * FROM workflow_run_queue WHERE run_id = :run_id",
    # Only what the guard reads: the fence runs before every irreversible write.
    "fence": "SELECT status, claim_token, claim_expires_at, {now} AS fence_now"
    " FROM workflow_run_queue WHERE run_id = :run_id",
    "reservation": "SELECT * FROM workflow_run_queue WHERE origin_session_id = :session"
    f" AND status IN {_RESERVING} AND run_id <> :run_id",
    "continuation": "SELECT * FROM workflow_run_queue WHERE parent_run_id = :parent"
    f" AND {_CONTINUATION_SLOT}",
    "query": "SELECT * FROM workflow_run_queue{hint} WHERE {where} ORDER BY created_at, run_id"
    " LIMIT :limit",
    # The host's source watch: one row per distinct source identity of the detached
    # queued launches, never a row per launch (93k queued cost 445 MB as records).
    "queued_sources": "SELECT workflow_source_json AS source_json, COUNT(*) AS launches,"
    " MIN(run_id) AS first_run_id FROM workflow_run_queue"
    " WHERE status = 'queued' AND origin_session_id IS NULL"
    " GROUP BY workflow_source_json ORDER BY MIN(created_at) LIMIT :limit",
    "recoverable": f"SELECT * FROM workflow_run_queue q WHERE {_CLAIMABLE}{{session}}"
    " ORDER BY q.created_at, q.run_id",
    # The enqueue as one statement (`LaunchQueue.enqueue`), where a backend commits a
    # statement by itself in one round trip: empty here (SQLite's transaction costs no
    # round trips); Postgres's is in store/postgres/_queries.py.
    "enqueue_one": "",
    "insert": "INSERT INTO workflow_run_queue (run_id, workflow_ref, workflow_path,"
    " workflow_source_json, definition_digest, input_json, launch_options_json, status,"
    " affinity_runner_id, origin_session_id, parent_run_id, created_at, updated_at)"
    " VALUES (:run_id, :workflow_ref, :workflow_path, :source, :digest, :input, :options,"
    " 'queued', :affinity, :origin, :parent, :now, :now) RETURNING *",
    "void_lease": "UPDATE workflow_run_queue SET claim_expires_at = :now WHERE run_id = :run_id"
    " AND runner_id = :dead AND claim_token IS NOT NULL",
    # A claim looks twice, each time reading a claim-order index from its oldest
    # entry to the first claimable one (no sort of the whole queue): this runner's own
    # launches (a `wfrun run` queued them), then any. The first term repeats the
    # index's condition so the planner may use it.
    # Each says whether its row has a gate (`gated`, NULL: none; a launch's gate is
    # inserted with it), so `_take` reads `launch_gates` only for a gated one.
    "next_mine": f"SELECT q.*, {_GATED} FROM workflow_run_queue q{{hint_mine}} WHERE"
    f" {_READY} AND q.affinity_runner_id = :runner AND q.affinity_runner_id IS NOT NULL"
    f" AND {_CLAIM_TERMS} ORDER BY q.affinity_runner_id, q.created_at, q.run_id LIMIT 1",
    "next": f"SELECT q.*, {_GATED} FROM workflow_run_queue q{{hint}} WHERE {_READY}"
    f" AND {_CLAIM_TERMS}"
    " ORDER BY q.created_at, q.run_id LIMIT 1",
    "take": "UPDATE workflow_run_queue AS q SET"
    " status = CASE WHEN q.status IN ('queued', 'parked') THEN 'starting' ELSE q.status END,"
    " runner_id = :runner, claim_token = :token, claim_expires_at = :expires,"
    " epoch = q.epoch + 1, updated_at = :now, park_mode = NULL,"
    # Taking over an expired `starting` claim means its runner died activating it.
    " crash_count = q.crash_count + CASE WHEN q.status = 'starting' THEN 1 ELSE 0 END"
    " WHERE q.run_id = :run_id AND q.status = :status AND q.epoch = :epoch"
    f" AND {_CLAIMABLE}",
    "yield": "UPDATE workflow_run_queue SET claim_expires_at = :now, updated_at = :now"
    " WHERE run_id = :run_id AND claim_token = :token AND claim_expires_at > :now"
    f" AND status IN {_CLAIMED} RETURNING origin_session_id",
    "renew": "UPDATE workflow_run_queue SET claim_expires_at = :expires, updated_at = :now"
    " WHERE run_id = :run_id AND claim_token = :token AND claim_expires_at > :now",
    # A session ended: its launches not yet ended go to the hosts (and to the session,
    # should it start again first).
    "hand_over": "UPDATE workflow_run_queue SET affinity_runner_id = :mark, updated_at = :now"
    f" WHERE origin_session_id = :session AND status IN {sql_in(READY_STATUSES)}"
    " AND (affinity_runner_id IS NULL OR affinity_runner_id <> :mark)",
    "handed_over": "SELECT * FROM workflow_run_queue WHERE origin_session_id = :session"
    f" AND affinity_runner_id = :mark AND status IN {sql_in(READY_STATUSES)}"
    " ORDER BY created_at, run_id",
    # A host met a step only the session can take: the run waits for its session again.
    "hand_back": "UPDATE workflow_run_queue SET affinity_runner_id = NULL, updated_at = :now"
    " WHERE run_id = :run_id AND affinity_runner_id = :mark",
    "enter": "UPDATE workflow_run_queue SET status = :target, updated_at = :now, {columns}"
    " WHERE run_id = :run_id AND status = :status AND epoch = :epoch",
    # A controller's child run: the request that names it, settled when the run ends
    # (`_settle.settle_child`; the queue appends the row lock `OF w`).
    "child_request": "SELECT w.request_id, r.controller, r.resource_key"
    " FROM workflow_requests w JOIN resources r ON r.uid = w.resource_uid"
    " WHERE w.run_id = :run_id AND w.state IN ('running', 'waiting')",
}

# What an `enter` sets per target status, beside `status` and `updated_at`: per column,
# its SQL and the name of the same value in Python (`entered`: SQLite takes the UPDATE
# without RETURNING, which cost it ~3x the UPDATE plus a re-read by key). A name is a
# parameter of the statement or one of the values `entered` derives from the row.
_Set = tuple[str, str]
_NULL: _Set = ("NULL", "null")
_ZERO: _Set = ("0", "zero")
_NOW: _Set = (":now", "now")
_STARTED: _Set = ("COALESCE(started_at, :now)", "started")


def _param(name: str) -> _Set:
    return f":{name}", name


_CLEARED = {"claim_token": _NULL, "claim_expires_at": _NULL}
_SPENT = {"input_json": _NULL, "launch_options_json": _NULL}  # the input, once running
_SETS: dict[LaunchStatus, dict[str, _Set]] = {
    "running": {**_SPENT, "crash_count": _ZERO, "started_at": _STARTED},
    "parked": {**_CLEARED, **_SPENT, "started_at": _STARTED, "park_mode": _param("mode"),
               "crash_count": _ZERO},
    # Recovery goes back to queued (its runner died while starting): a crash; a release
    # (the disk refused the bundle) is not one (:crashed 0).
    "queued": {**_CLEARED, "runner_id": _NULL,
               "crash_count": ("crash_count + :crashed", "crashes")},
    "done": {**_CLEARED, **_SPENT, "started_at": _STARTED, "finished_at": _NOW,
             "ending": _param("ending")},
    "failed": {**_CLEARED, **_SPENT, "error_code": _param("code"),
               "error_message": _param("message"), "finished_at": _NOW},
    "cancelled": {**_CLEARED, **_SPENT, "finished_at": _NOW, "park_mode": _NULL},
}


# A `starting` row's move through `running` to an ending in one UPDATE: both steps'
# columns (every right-hand side reads the old row, and the ending's own value of a
# column both set is the one the second step would have left).
_SETS_THROUGH: dict[LaunchStatus, dict[str, _Set]] = {
    target: {**_SETS["running"], **_SETS[target]} for target in ("done", "failed", "cancelled")}


def _columns(sets: dict[str, _Set]) -> str:
    return ", ".join(f"{column} = {sql}" for column, (sql, _) in sets.items())


#: Column changes per target status (the `enter` statement's `{columns}`); THROUGH:
#: from `starting` through `running` to an ending (`LaunchQueue._transition`).
ENTER: dict[LaunchStatus, str] = {target: _columns(sets) for target, sets in _SETS.items()}
THROUGH: dict[LaunchStatus, str] = {
    target: _columns(sets) for target, sets in _SETS_THROUGH.items()}


def entered(row: Row, params: Mapping[str, Any], *, through: bool = False) -> Row:
    """The row as `enter` (`ENTER`, or `THROUGH`) with `params` leaves `row`, without
    reading it again: a write transaction holding the row (SQLite's write lock)."""
    target: LaunchStatus = params["target"]
    now = params["now"]
    value = {**params, "null": None, "zero": 0,
             "started": now if row["started_at"] is None else row["started_at"],
             "crashes": row["crash_count"] + params["crashed"]}
    new = {**row, "status": target, "updated_at": now}
    for column, (_, name) in (_SETS_THROUGH if through else _SETS)[target].items():
        new[column] = value[name]
    return new


def taken(row: Row, params: Mapping[str, Any]) -> Row:
    """The row as `take` with `params` leaves `row` (as `entered`)."""
    status = row["status"]
    return {**row, "status": "starting" if status in ("queued", "parked") else status,
            "runner_id": params["runner"], "claim_token": params["token"],
            "claim_expires_at": params["expires"], "epoch": row["epoch"] + 1,
            "updated_at": params["now"], "park_mode": None,
            "crash_count": row["crash_count"] + (status == "starting")}


#: What a child workflow request (a controller's, linked by run id) becomes when
#: its launch ends; the parent's key is woken in the same transaction.
CHILD_STATE = {"done": "succeeded", "failed": "failed", "cancelled": "failed"}
#: The fence and lease renewal: a live claim in starting|running.
HOLD = Operation("hold", CLAIMED_STATUSES, "running", needs_claim=True)
# Claims and lease renewals commit without waiting for the disk (`Connector.write`):
# another process sees them at once, which is all one-runner-at-a-time needs, and a
# power cut that loses one only returns the launch to where it was (queued, parked, or
# an earlier lease), which recovery already handles: a claimed launch is recovered from
# its bundle, never from the claim. The enqueue and every ending stay durable.
CLAIM_DURABLE = False


#: A launch's ids, in the order they are checked: (field, whether it may be None).
_LAUNCH_IDS = (("run_id", False), ("workflow_ref", False), ("definition_digest", False),
               ("origin_session_id", True), ("parent_run_id", True),
               ("affinity_runner_id", True))


def launch_values(launch: NewLaunch) -> dict[str, Any]:
    """The queue row's values, checked (ValueError: the store refuses the launch). Each
    enqueue checks them here, with `check_id`'s rule inline: it is called to refuse."""
    for name, optional in _LAUNCH_IDS:
        value = getattr(launch, name)
        if (value is not None or not optional) and not (
                isinstance(value, str) and 0 < len(value) <= 512 and value.isprintable()):
            check_id(value, name)  # refuses it, in its words
    if launch.parent_run_id == launch.run_id:
        raise ValueError(f"launch {launch.run_id} cannot continue itself")
    return {
        "run_id": launch.run_id, "workflow_ref": launch.workflow_ref,
        "workflow_path": launch.workflow_path,
        "source": _column(launch.source, "source identity", mapping=True),
        "digest": launch.definition_digest,
        "input": _column(launch.input, "launch input"),
        "options": None if launch.options is None else _column(
            launch.options, "launch options", mapping=True),
        "affinity": launch.affinity_runner_id, "origin": launch.origin_session_id,
        "parent": launch.parent_run_id}


def _column(value: object, what: str, *, mapping: bool = False) -> str:
    """`value` as its JSON column holds it: `json_object` (`mapping`) or `canonical_json`
    of `_records.py`, whose checks this makes on the run path (each enqueue's two or
    three values) and which it calls only to refuse `value`, in their words."""
    try:
        text = _canonical_json(value)
    except ValueError:
        text = ""
    if text and (not mapping or isinstance(value, Mapping)) \
            and len(text.encode("utf-8")) <= INPUT_MAX_BYTES:
        return text
    return (json_object if mapping else canonical_json)(value, what=what)


def launch_event(log: EventLog, row: Row, previous: str | None, event_type: str,
                 payload: dict[str, Any] | None = None) -> None:
    """Queue the run event of a launch row's move from `previous` (None: a new row). The
    store makes its body (plain JSON, ids and small lists), so `EventLog.add`'s checks
    are skipped: canonical JSON straight into the log."""
    body: dict[str, Any] = {"from": previous, "to": row["status"], "epoch": row["epoch"]}
    if row["error_code"] is not None:
        body["error_code"] = row["error_code"]
    body.update(payload or {})
    log.pending.append({"now": log.tx.now_ms(), "run_id": row["run_id"],
                        "workflow_ref": row["workflow_ref"], "type": event_type,
                        "runner_id": row["runner_id"], "payload": _canonical_json(body)})


def launch_from_row(row: Row) -> LaunchRecord:
    return LaunchRecord(
        run_id=row["run_id"], workflow_ref=row["workflow_ref"],
        workflow_path=row["workflow_path"], source=json.loads(row["workflow_source_json"]),
        definition_digest=row["definition_digest"], input_json=row["input_json"],
        options_json=row["launch_options_json"], status=row["status"],
        runner_id=row["runner_id"], claim_token=row["claim_token"],
        claim_expires_at=row["claim_expires_at"], epoch=row["epoch"],
        affinity_runner_id=row["affinity_runner_id"],
        origin_session_id=row["origin_session_id"], parent_run_id=row["parent_run_id"],
        error_code=row["error_code"], error_message=row["error_message"],
        created_at=row["created_at"], updated_at=row["updated_at"],
        started_at=row["started_at"], finished_at=row["finished_at"],
        park_mode=row["park_mode"], crash_count=row["crash_count"], ending=row["ending"])


def guard(row: Row | None, run_id: str, op: Operation, token: str | None,
          now: int) -> LostRace | None:
    """Why `op` may not run on `row` now, or None. A claimed row whose lease is live
    changes only through its holder: a cancel of a `starting` one is asked of the
    holder (a `cancel_requested` event, as for `running`), so the holder may write
    its run before its first transition knowing no cancel can win meanwhile (ADR
    0009, lever 3: a pure run's files, synced before its ending's transaction)."""
    if row is None:
        return LostRace(run_id, "not_found")
    if row["status"] not in op.sources:
        return LostRace(run_id, "wrong_status", row["status"])
    if not op.needs_claim and row["status"] == "starting" and op.target == "cancelled" \
            and row["claim_expires_at"] is not None and row["claim_expires_at"] > now:
        return LostRace(run_id, "lease_active", row["status"])
    if op.needs_claim:
        if token is None or row["claim_token"] != token:
            return LostRace(run_id, "token_mismatch", row["status"])
        if row["claim_expires_at"] <= now:
            return LostRace(run_id, "lease_expired", row["status"])
    return None


# --- run events ----------------------------------------------------------------------

EVENT_SQL: Mapping[str, str] = {
    # Empty: the backend's writers are serialized already (SQLite's BEGIN IMMEDIATE).
    "order_appends": "",
    "append": "INSERT INTO run_events (recorded_at, run_id, workflow_ref, type, runner_id,"
    " payload_json) VALUES (:now, :run_id, :workflow_ref, :type, :runner_id, :payload)",
    "read_all": "SELECT * FROM run_events WHERE seq > :after ORDER BY seq LIMIT :limit",
    "read_run": "SELECT * FROM run_events WHERE run_id = :run_id AND seq > :after"
    " ORDER BY seq LIMIT :limit",
}


def event_from_row(row: Row) -> RunEvent:
    return RunEvent(seq=row["seq"], recorded_at=row["recorded_at"], run_id=row["run_id"],
                    workflow_ref=row["workflow_ref"], type=row["type"],
                    runner_id=row["runner_id"], payload=json.loads(row["payload_json"]))


@dataclass(eq=False)  # one per transaction: compared (and hashed) by identity
class EventLog:
    """The events of one transaction, appended together at its end (`flush`), each
    kept as its append's parameters."""

    tx: Transaction
    sql: Mapping[str, str]
    pending: list[dict[str, object]] = field(default_factory=list)

    def add(self, run_id: str, event_type: str, payload: object, *,
            workflow_ref: str | None = None, runner_id: str | None = None) -> None:
        """Queue one event (checked now, so a bad payload fails before any write)."""
        if not event_type:
            raise ValueError("a run event needs a type")
        body = json_object({} if payload is None else payload, what="event payload",
                           max_bytes=PAYLOAD_MAX_BYTES)
        self.pending.append({"now": self.tx.now_ms(), "run_id": run_id,
                             "workflow_ref": workflow_ref, "type": event_type,
                             "runner_id": runner_id, "payload": body})

    def flush(self, *, rows: bool = False) -> list[Row]:
        """Take the append-order lock and insert every queued event; with `rows`, their
        rows (a transaction's own events need none back: RETURNING cost SQLite ~8 µs
        per insert, four per run)."""
        if not self.pending:
            return []
        if self.sql["order_appends"]:
            self.tx.one(self.sql["order_appends"])
        sql = self.sql["append"] + (" RETURNING *" if rows else "")
        params, self.pending = self.pending, []
        written: list[Row] = []
        if not rows and len(params) == 1:
            self.tx.run(sql, params[0])
        elif not rows:  # one call for all (a batch's: one per launch), in order
            self.tx.many(sql, params)
        else:
            for one in params:
                row = self.tx.one(sql, one)
                assert row is not None
                written.append(row)
        return written


class RunEvents:
    """`RunEvents` over a connector."""

    def __init__(self, connector: Connector, overrides: Mapping[str, str] | None = None) -> None:
        self._connector = connector
        self._sql = named(EVENT_SQL, overrides)

    @contextmanager
    def writing(self, *, durable: bool = True,
                shared_sync: bool = False) -> Iterator[tuple[Transaction, EventLog]]:
        """A write transaction whose queued events are appended last, before commit
        (`durable`, `shared_sync`: `Connector.write`)."""
        with self._connector.write(durable=durable, shared_sync=shared_sync) as tx:
            log = EventLog(tx, self._sql)
            yield tx, log
            log.flush()

    def append(self, run_id: str, event_type: str, payload: object = None, *,
               workflow_ref: str | None = None, runner_id: str | None = None) -> RunEvent:
        with self._connector.write() as tx:
            log = EventLog(tx, self._sql)
            log.add(run_id, event_type, payload, workflow_ref=workflow_ref,
                    runner_id=runner_id)
            (row,) = log.flush(rows=True)
        return event_from_row(row)

    def read(self, *, run_id: str | None = None, after_seq: int = 0,
             limit: int = 1000) -> list[RunEvent]:
        params = {"run_id": run_id, "after": after_seq, "limit": limit}
        with self._connector.read() as tx:
            rows = tx.all(self._sql["read_all" if run_id is None else "read_run"], params)
        return [event_from_row(row) for row in rows]


# --- the lease fence ---------------------------------------------------------------
#
# `LeaseFence` is one claim's question to the book: is the launch still ours? The
# engine asks it (a plain callable) before it writes a run's bundle. It lives beside
# `guard`, not in the launch layer, because its local answer rests on that rule: while
# our lease surely has a third of its length left, nothing else can change the row: a
# reclaim needs an expired lease, and a cancel of a claimed row (`starting` or
# `running`) with a live lease is asked of its holder (the store refuses it otherwise,
# ADR 0009 lever 3). Then the fence is answered from what it last learned (no round
# trip); otherwise it asks the store, and learns the lease from the answer. The fence
# owns that knowledge: `running` and `held` record committed answers (mark_running, a
# renewal by the lease keeper), a read records what it found, `lost` forgets them.


class ClaimLeft(Protocol):
    """What a fence asks of the queue (`LaunchBook.claim_left`)."""

    def claim_left(self, run_id: str, claim_token: str
                   ) -> tuple[LaunchStatus, int] | LostRace: ...


#: How often a fence asks an unreachable store again, while its patience lasts.
RETRY_EVERY = 0.2


@dataclass(eq=False)
class LeaseFence:
    """The fence of one claim (`run_id` under `token`), on the engine's clock. `margin`
    is kept in hand before answering locally, and is how long an unreachable store is
    waited for: a third of the lease (`renew_every`, worked out once by its maker)."""

    _launches: ClaimLeft
    _run_id: str
    token: str  # the claim token this fence guards
    _clock: Clock
    margin: float
    # The keeper's thread updates what the run reads.
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)
    _running: bool = field(default=False, init=False)
    _until: float = field(default=0.0, init=False)

    @property
    def running_here(self) -> bool:
        """Whether the row was last known `running` under this claim."""
        return self._running

    def running(self, record: LaunchRecord, sent: float) -> None:
        """The row is `running` under this claim (mark_running's committed answer, to
        a statement sent at `sent`)."""
        with self._lock:
            self._running = True
        self.held(record, sent)

    def held(self, record: LaunchRecord, sent: float) -> None:
        """A committed answer (mark_running, a renewal) to a statement sent at `sent` on
        the engine's clock: the database wrote it no earlier, when the lease had
        `claim_expires_at - updated_at` left (both on the database's clock), so the
        lease holds until `sent` plus that, less `margin` for clock drift and a write
        still on its way."""
        left = ((record.claim_expires_at or 0) - record.updated_at) / 1000
        with self._lock:
            self._until = max(self._until, sent + left - self.margin)

    def lost(self) -> None:
        """The claim is lost (a renewal refused): ask the store from now on."""
        with self._lock:
            self._running = False
            self._until = 0.0

    def __call__(self) -> bool:
        """True while the claim is ours. A database that went away (a restart, a
        network blip: StoreUnreachable) is waited for, up to a
        third of the lease, and asked again: only its answer says the claim is still
        ours, so nothing runs unfenced."""
        give_up = self._clock.monotonic() + self.margin
        while True:
            try:
                sent = self._clock.monotonic()
                if sent < self._until:
                    return True
                held = self._launches.claim_left(self._run_id, self.token)
                break
            except StoreError as exc:
                if not isinstance(exc, StoreUnreachable) or self._clock.monotonic() >= give_up:
                    return False
                self._clock.sleep(RETRY_EVERY)
        if isinstance(held, LostRace):
            self.lost()
            return False
        status, left_ms = held
        with self._lock:
            self._running = status == "running"
            # As `held`: the database read the lease no earlier than `sent`.
            self._until = max(self._until, sent + left_ms / 1000 - self.margin)
        return True
