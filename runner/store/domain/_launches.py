"""`workflow_run_queue`: durable deferred launches (seed 000), written once over the seam.

Every operation is one write transaction: it reads the row (locked: `dialect.lock`),
checks the expected status (`states.LAUNCH_OPERATIONS`), the claim token and the lease,
then issues an UPDATE guarded by the same status and the epoch it read (the fence).
`claim_next` takes the first claimable row (`dialect.skip_locked`: hosts on one
Postgres never wait on each other's candidates). A failed check returns `LostRace` and
writes nothing. Each transition appends a `launch.*` run event in the same transaction
(`events.EventLog`, last); a detached row that becomes claimable is announced
(`tx.notify`, ids only, where the backend has notices).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from functools import lru_cache
from typing import Any

from runner._leases import LEASE_SECONDS
from runner.store._connector import (
    Connector,
    Params,
    Row,
    Transaction,
    UniqueViolation,
    named,
)
from runner.store._interface import BundleRefused, BundleWrite
from runner.store._records import (
    LaunchRecord,
    LostRace,
    NewLaunch,
    NewTurnIntent,
    NextClaim,
    bounded_message,
    check_error_code,
    check_id,
    json_object,
    lease_ms,
    new_claim_token,
)
from runner.store._states import (
    CLAIMED_STATUSES,
    HANDED_OVER,
    LAUNCH_OPERATIONS,
    PARK_MODES,
    RECOVERY_PATHS,
    LaunchStatus,
    ParkMode,
    RecoveryOutcome,
)
from runner.store.domain import _intents as intents
from runner.store.domain import _pages as pages
from runner.store.domain._launch_batch import Adder
from runner.store.domain._launch_queries import (
    CHILD_STATE,
    CLAIM_DURABLE,
    ENTER,
    FIXED,
    HOLD,
    LAUNCH_CHANNEL,
    ORIGIN,
    SQL,
    THROUGH,
    EventLog,
    RunEvents,
    entered,
    guard,
    launch_event,
    launch_from_row,
    launch_values,
    taken,
)
from runner.store.domain._launch_reads import LaunchReads


@lru_cache(maxsize=64)
def _claimer_lease(runner_id: str, lease_seconds: float) -> int:
    """A claimer's lease in whole milliseconds, its id checked (`check_id`, `lease_ms`).
    Cached: a host asks each claim with the same id and lease, so they are checked once
    (a refusal raises and is not cached)."""
    check_id(runner_id, "runner_id")
    return lease_ms(lease_seconds)


class _Abort(Exception):
    """Rolls a transaction back and returns its `LostRace` (a lost intent race)."""

    def __init__(self, lost: LostRace) -> None:
        super().__init__(lost.reason)
        self.lost = lost


class LaunchQueue(LaunchReads):
    """`LaunchQueue` over a connector. `overrides` holds the backend's named queries
    per domain module (`{"launches": {...}, "pages": {...}, "intents": {...}}`);
    `run_events` appends the transitions' events. A child run's ending settles its
    controller request in the same transaction (`_settle.settle_child`)."""

    def __init__(self, connector: Connector, run_events: RunEvents,
                 overrides: Mapping[str, Mapping[str, str]] | None = None) -> None:
        mine = overrides or {}
        super().__init__(connector, named(pages.SQL, mine.get("pages")))
        self._connector = connector
        self._events = run_events
        self._sql = named(SQL, mine.get("launches"))
        self._intent_sql = named(intents.SQL, mine.get("intents"))
        lock = connector.dialect.lock
        # A row by its run id, locked for the transaction that reads it.
        self._locked_row = self._sql["load"] + lock
        self._child_request = self._sql["child_request"] + (f"{lock} OF w" if lock else "")
        # Whether the last claim_next of each claimer (by session; None: the hosts)
        # found nothing; then the next one looks first (`_claimable`).
        self._found_none: dict[str | None, bool] = {}
        # The claim's looks (`claim_probes`), built once per kind of claimer: a
        # session's (False) or the hosts' (True, `session_id is None`).
        self._probes = {detached: self._looks(detached) for detached in (True, False)}
        self._ready_index: bool | None = None  # `_ready_hint`, learnt once

    # --- enqueue -----------------------------------------------------------------

    def enqueue(self, launch: NewLaunch, *,
                claim_by: str | None = None,
                lease_seconds: float = LEASE_SECONDS) -> LaunchRecord | LostRace:
        if claim_by is not None:
            check_id(claim_by, "claim_by")
        values = launch_values(launch)
        if claim_by is None and launch.gate is None and self._sql["enqueue_one"]:
            return self._enqueue_one(launch, values)
        with self._events.writing() as (tx, log):
            return self._insert(tx, log, launch, values, claim_by, lease_seconds)

    @contextmanager
    def batch(self, *, shared_sync: bool = False) -> Iterator[tuple[Transaction, Adder]]:
        """One durable transaction; `add(launch)` (or `add.many(launches)`) queues
        launches in it, each judged alone (refused: its ValueError or LostRace, the
        rest kept), beside what else the caller writes (`TriggerLedger.fire_many`:
        group commit). `shared_sync`: as `Connector.write` (durable once the block
        returns; the disk's wait outside the writers' turn)."""
        with self._events.writing(shared_sync=shared_sync) as (tx, log):
            yield tx, Adder(self, tx, log)

    def _insert(self, tx: Transaction, log: EventLog, launch: NewLaunch,
                values: dict[str, Any], claim_by: str | None = None,
                lease_seconds: float = LEASE_SECONDS) -> LaunchRecord | LostRace:
        # Insert first: the unique indexes (run id, session reservation, one
        # continuation per parent) refuse every conflict, and only a refusal pays
        # for the lookups that name it.
        try:
            with tx.statement():  # a unique index may refuse it; the rest is kept
                row = tx.one(self._sql["insert"], {**values, "now": tx.now_ms()})
        except UniqueViolation:
            return self._enqueue_conflict(tx, launch) or LostRace(
                launch.run_id, "already_exists")
        assert row is not None
        if launch.gate is not None:
            gate = launch.gate
            tx.run(self._sql["gate_insert"], {
                "run_id": launch.run_id, "ckey": gate.concurrency_key,
                "climit": gate.concurrency_limit, "strategy": gate.strategy,
                "rkey": gate.rate_key, "rlimit": gate.rate_limit,
                "rper": gate.rate_per_ms})
        launch_event(log, row, None, "launch.queued")
        if claim_by is not None:
            # Queued and claimed in one commit: between the two a host woken by
            # the notice (or polling) took a `wfrun run`'s launch and ran it
            # elsewhere, without that process's secrets (issue 35).
            taken = self._take(tx, log, row, claim_by, lease_ms(lease_seconds),
                               gated=False)
            assert isinstance(taken, LaunchRecord), "a row inserted here changed"
            return taken
        if launch.origin_session_id is None and tx.dialect.notices:
            tx.notify(LAUNCH_CHANNEL, launch.run_id)
        return launch_from_row(row)

    def _enqueue_one(self, launch: NewLaunch, values: dict[str, Any]) -> LaunchRecord | LostRace:
        """The backend's one-statement enqueue (`enqueue_one`): the same row, event and
        notice as the transaction below, in one round trip."""
        payload = json_object({"from": None, "to": "queued", "epoch": 0},
                              what="event payload")  # `_event` of a new row
        try:
            with self._connector.write_one() as tx:
                now, clock = tx.clock_sql()
                row = tx.one(self._sql["enqueue_one"].format(now=now), {
                    **values, **clock, "payload": payload, "channel": LAUNCH_CHANNEL})
        except UniqueViolation:
            with self._connector.read() as tx:
                return self._enqueue_conflict(tx, launch) or LostRace(
                    launch.run_id, "already_exists")
        assert row is not None
        assert row["epoch"] == 0
        assert row["error_code"] is None
        return launch_from_row(row)

    # --- claims ------------------------------------------------------------------

    def claim(self, run_id: str, *, runner_id: str, lease_seconds: float = LEASE_SECONDS,
              dead_runner: str | None = None) -> LaunchRecord | LostRace:
        check_id(runner_id, "runner_id")
        lease = lease_ms(lease_seconds)
        with self._events.writing(durable=CLAIM_DURABLE) as (tx, log):
            now = tx.now_ms()
            row = tx.one(self._locked_row, {"run_id": run_id})
            if row is None:
                return LostRace(run_id, "not_found")
            status = row["status"]
            if dead_runner is not None and row["runner_id"] == dead_runner:
                # The caller proved the holder dead (same machine, no such process):
                # its lease is void now, not when it runs out.
                tx.run(self._sql["void_lease"], {"now": now, "run_id": run_id,
                                                 "dead": dead_runner})
                row = tx.one(self._locked_row, {"run_id": run_id})
                assert row is not None
            if status in CLAIMED_STATUSES and row["claim_expires_at"] > now:
                return LostRace(run_id, "lease_active", status)
            if status not in ("queued", "parked", *CLAIMED_STATUSES):
                return LostRace(run_id, "wrong_status", status)
            if status == "parked" and row["origin_session_id"] is not None:
                holder = tx.one(self._sql["reservation"], {
                    **FIXED, "session": row["origin_session_id"], "run_id": run_id})
                if holder is not None:
                    return LostRace(run_id, "session_reserved", status, holder["run_id"])
            try:
                return self._take(tx, log, row, runner_id, lease)
            except UniqueViolation:
                # Another launch of the session took the reservation meanwhile.
                return LostRace(run_id, "session_reserved", status)

    def claim_next(self, *, runner_id: str, session_id: str | None = None,
                   lease_seconds: float = LEASE_SECONDS) -> LaunchRecord | None:
        lease = _claimer_lease(runner_id, lease_seconds)
        probes = self._probes[session_id is None]
        params = {**FIXED, "session": session_id, "runner": runner_id}
        if self._found_none.get(session_id) and not any(
                self._claimable(sql, params) for sql in probes):
            return None
        with self._events.writing(durable=CLAIM_DURABLE) as (tx, log):
            taken = self._next(tx, log, runner_id, session_id, lease)
        return taken

    def _next(self, tx: Transaction, log: EventLog, runner_id: str,
              session_id: str | None, lease: int) -> LaunchRecord | None:
        """Take the next claimable launch inside the caller's write transaction."""
        params = {**FIXED, "session": session_id, "runner": runner_id, "now": tx.now_ms()}
        row = None
        for sql in self._probes[session_id is None]:
            row = tx.one(sql + tx.dialect.skip_locked, params)
            if row is not None:
                break
        self._found_none[session_id] = row is None
        if row is None:
            return None
        taken = self._take(tx, log, row, runner_id, lease)
        return taken if isinstance(taken, LaunchRecord) else None

    def _chained(self, tx: Transaction, log: EventLog, then: NextClaim) -> LaunchRecord | None:
        """`then`'s claim in a transition's transaction: a session reservation taken
        meanwhile undoes the claim alone (`_take`), and the transition still commits
        (recording how a run ended matters more than taking the next one)."""
        try:
            return self._next(tx, log, then.runner_id, then.session_id,
                              lease_ms(then.lease_seconds))
        except UniqueViolation:
            return None

    def claim_probes(self, session_id: str | None) -> tuple[str, ...]:
        """The claim's looks for a session's claimer, or the hosts' (`session_id` None)."""
        return self._probes[session_id is None]

    def _looks(self, detached: bool) -> tuple[str, ...]:
        """The claim's two looks, in order: this runner's own launches, then any (of a
        session, or the hosts' when `detached`). Without a row lock clause (SQLite) they
        are one statement: a UNION ALL runs its arms in order and its LIMIT stops at the
        first row (Postgres refuses FOR UPDATE on a UNION)."""
        dialect = self._connector.dialect
        probes = tuple(self._sql[name].format(
            origin=ORIGIN[detached], hint=dialect.indexed_by("workflow_run_queue_ready"),
            hint_mine=dialect.indexed_by("workflow_run_queue_ready_affinity"))
            for name in ("next_mine", "next"))
        if not dialect.skip_locked:
            probes = (" UNION ALL ".join(f"SELECT * FROM ({sql})" for sql in probes)
                      + " LIMIT 1",)
        return probes

    def _claimable(self, sql: str, params: dict[str, object]) -> bool:
        """After a claim found nothing, a look before the next one: an idle or woken
        claimer that finds nothing again then takes no write transaction (no write
        lock on SQLite, no BEGIN on Postgres, where every host is woken by one notice
        and all but one find nothing). A row seen here may be taken by another first;
        the claim's own transaction decides."""
        with self._connector.read() as tx:
            # The clock inside the statement: one round trip on Postgres.
            now, clock = tx.clock_sql()
            probe = sql.replace(":now", f"({now})")
            return tx.one(probe, {**params, **clock}) is not None

    def _update(self, tx: Transaction, sql: str, params: Params,
                leaves: Row | None = None) -> Row | None:
        """Run an UPDATE of the one row `params["run_id"]` names: the row as it now is,
        or None when its guard matched nothing. RETURNING where it is cheap
        (`Dialect.cheap_returning`); else `leaves` (the row in hand, read in this
        transaction, as the UPDATE leaves it: a dict built whatever the backend, as
        cheap as the test that would skip it) or a re-read by key."""
        if tx.dialect.cheap_returning:
            return tx.one(sql + " RETURNING *", params)
        if tx.run(sql, params) == 0:
            return None
        return leaves or tx.one(self._sql["load"], {"run_id": params["run_id"]})

    def _take(self, tx: Transaction, log: EventLog, row: Row, runner_id: str,
              lease: int, *, gated: bool = True) -> LaunchRecord | LostRace:
        """Claim a row already checked to be claimable, guarded by its status and epoch.
        `gated=False`: a foreground `wfrun run` claims its own launch at once (a person
        runs it here and now; flow control holds the detached ones). Raises
        UniqueViolation, the transaction still usable, when the session's reservation
        (a unique index) refuses the claim."""
        now = tx.now_ms()
        gate = None
        # A claim's probe tells whether the row has a gate (`gated`); other rows ask.
        if gated and row["status"] in ("queued", "parked") and row.get("gated", 1):
            gate = tx.one(self._sql["gate"], {"run_id": row["run_id"]})
            if gate is not None and not self._gate_open(tx, row, gate, now):
                return LostRace(row["run_id"], "gate_shut", row["status"])
        params = {**FIXED, "runner": runner_id, "token": new_claim_token(),
                  "expires": now + lease, "now": now, "run_id": row["run_id"],
                  "status": row["status"], "epoch": row["epoch"]}
        with tx.statement():  # the claim alone is undone when the reservation refuses it
            claimed = self._update(tx, self._sql["take"], params, taken(row, params))
        if claimed is None:
            return LostRace(row["run_id"], "epoch_mismatch", row["status"])
        if gate is not None:  # its start, for the rate limit: only once it is claimed
            tx.run(self._sql["gate_started"], {"run_id": row["run_id"], "now": now})
        event = "launch.starting" if row["status"] != claimed["status"] else "launch.reclaimed"
        launch_event(log, claimed, row["status"], event)
        return launch_from_row(claimed)

    def _gate_open(self, tx: Transaction, row: Row, gate: Row, now: int) -> bool:
        """A gated launch's start, checked again under its keys' locks (Postgres: two
        hosts claiming two launches of one key at once would each count the other out)."""
        lock = tx.dialect.key_lock
        if lock is not None:
            for key in sorted({f"c:{gate['concurrency_key']}" if gate["concurrency_key"]
                               is not None else "", f"r:{gate['rate_key']}"
                               if gate["rate_key"] is not None else ""} - {""}):
                tx.run(lock, {"key": key})
        return tx.one(self._sql["gate_shut"], {"run_id": row["run_id"], "now": now}) is None

    def renew_lease(self, run_id: str, claim_token: str, *,
                    lease_seconds: float = LEASE_SECONDS) -> LaunchRecord | LostRace:
        lease = lease_ms(lease_seconds)
        with self._connector.write(durable=CLAIM_DURABLE) as tx:
            now = tx.now_ms()
            row = tx.one(self._locked_row, {"run_id": run_id})
            lost = guard(row, run_id, HOLD, claim_token, now)
            if lost is not None:
                return lost
            renewed = self._update(tx, self._sql["renew"], {"expires": now + lease, "now": now,
                                                  "run_id": run_id, "token": claim_token})
        assert renewed is not None
        return launch_from_row(renewed)

    def hand_over(self, session_id: str) -> list[LaunchRecord]:
        """The session ended: every launch of it not yet ended (queued, parked, or
        claimed by a runner that may be gone) is handed to the hosts, durably, in one
        transaction. Its origin stays, so its ending still goes to the session (a turn
        intent, delivered when the session is back) and the session may take it first
        if it starts again. Idempotent; the launches handed over now are returned."""
        check_id(session_id, "session_id")
        with self._events.writing() as (tx, log):
            now = tx.now_ms()
            before = {row["run_id"] for row in tx.all(self._sql["handed_over"], {
                "session": session_id, "mark": HANDED_OVER})}
            tx.run(self._sql["hand_over"], {"session": session_id, "mark": HANDED_OVER,
                                            "now": now})
            rows = [row for row in tx.all(self._sql["handed_over"], {
                "session": session_id, "mark": HANDED_OVER}) if row["run_id"] not in before]
            for row in rows:
                launch_event(log, row, row["status"], "launch.handed_over",
                            {"session": session_id})
                if tx.dialect.notices:
                    tx.notify(LAUNCH_CHANNEL, row["run_id"])
        return [launch_from_row(row) for row in rows]

    def hand_back(self, run_id: str) -> bool:
        """Undo a hand-over for one launch (a host parked it at a step only its session
        can take): only the session claims it again. True when it was handed over."""
        with self._events.writing() as (tx, log):
            changed = tx.run(self._sql["hand_back"], {"run_id": run_id, "mark": HANDED_OVER,
                                                      "now": tx.now_ms()})
            if changed:
                row = tx.one(self._locked_row, {"run_id": run_id})
                assert row is not None
                launch_event(log, row, row["status"], "launch.handed_back")
        return bool(changed)

    def yield_lease(self, run_id: str, claim_token: str) -> bool:
        """End our own live lease now (the claim stays until someone takes it): a host
        that let go of a run while the store was unreachable hands it to recovery at
        once instead of after the lease. Fenced by the token; True when it was ours."""
        with self._connector.write() as tx:
            now = tx.now_ms()
            row = tx.one(self._sql["yield"], {**FIXED, "now": now, "run_id": run_id,
                                              "token": claim_token})
            if row is not None and row["origin_session_id"] is None and tx.dialect.notices:
                tx.notify(LAUNCH_CHANNEL, run_id)  # an idle host claims it on the notice
        return row is not None

    # --- transitions -------------------------------------------------------------

    def mark_running(self, run_id: str, claim_token: str, *,
                     bundle: BundleWrite | None = None) -> LaunchRecord | LostRace:
        # Without a bundle batch its loss is recovered from the bundle's own durable
        # `run_started` (a `starting` row whose bundle started resumes); with one, the
        # commit is the bundle's first durable write.
        return self._transition("mark_running", run_id, claim_token, bundle=bundle,
                                durable=bundle is not None)

    def park(self, run_id: str, claim_token: str, *,
             mode: ParkMode = "explicit") -> LaunchRecord | LostRace:
        if mode not in PARK_MODES:
            raise ValueError(f"unknown park mode {mode!r}")
        return self._transition("park", run_id, claim_token, {"mode": mode})

    def finish(self, run_id: str, claim_token: str, *, waiting: bool = False,
               turn_intent: NewTurnIntent | None = None,
               bundle: BundleWrite | None = None,
               then_claim: NextClaim | None = None,
               from_starting: bool = False) -> LaunchRecord | LostRace:
        child: dict[str, Any] = {"ending": "waiting" if waiting else "completed"}
        if waiting:
            child["child_state"] = "waiting"
        # A closing presentation yields to an intent already pending for the run (one
        # pending intent per run and session) instead of undoing the finish.
        return self._transition("finish", run_id, claim_token, child, turn_intent,
                                intent_optional=True, bundle=bundle, then_claim=then_claim,
                                ending=True, from_starting=from_starting)

    def fail(self, run_id: str, claim_token: str, *, code: str, message: str,
             turn_intent: NewTurnIntent | None = None,
             bundle: BundleWrite | None = None,
             then_claim: NextClaim | None = None,
             from_starting: bool = False) -> LaunchRecord | LostRace:
        extra = {"code": check_error_code(code), "message": bounded_message(message)}
        if code == "interrupted":
            extra["child_state"] = "interrupted"  # a controller may start a new attempt
        return self._transition("fail", run_id, claim_token, extra, turn_intent,
                                bundle=bundle, then_claim=then_claim, ending=True,
                                from_starting=from_starting)

    def release(self, run_id: str, claim_token: str) -> LaunchRecord | LostRace:
        return self._transition("release", run_id, claim_token, {"crashed": 0})

    def cancel(self, run_id: str, *, claim_token: str | None = None,
               bundle: BundleWrite | None = None,
               then_claim: NextClaim | None = None,
               from_starting: bool = False) -> LaunchRecord | LostRace:
        if claim_token is None:
            return self._transition("cancel", run_id, None, bundle=bundle)
        return self._transition("cancel_claimed", run_id, claim_token, bundle=bundle,
                                then_claim=then_claim, ending=True,
                                from_starting=from_starting)

    def _transition(self, op_name: str, run_id: str, claim_token: str | None,
                    extra: dict[str, Any] | None = None,
                    turn_intent: NewTurnIntent | None = None,
                    intent_optional: bool = False,
                    bundle: BundleWrite | None = None,
                    durable: bool = True,
                    then_claim: NextClaim | None = None,
                    ending: bool = False,
                    from_starting: bool = False) -> LaunchRecord | LostRace:
        """`ending`: the holder records how its run ended. Its bundle holds that ending
        durably already (a folder's trace is fsync'd first), or it has none (a failed
        activation, which a lost commit only makes the next claim meet again), so the
        commit may share its sync with other writers' (`Connector.write(shared_sync=)`);
        a bundle batch in the same transaction is the ending's first durable record,
        and that commit waits as any durable one does.

        `from_starting`: the run went from `starting` to its ending without a `running`
        commit of its own (a pure run, written whole with its ending: ADR 0009, lever
        3). A `starting` row goes through `running` in this transaction's one UPDATE,
        as recovery's paths do (valid transitions only, `launch.running` recorded), guarded by the
        claim as `mark_running` is; a row already `running` goes straight on."""
        op = LAUNCH_OPERATIONS[op_name]
        taken = None
        if then_claim is not None:
            check_id(then_claim.runner_id, "runner_id")
            then_claim.record = None
        try:
            # A run written whole (`from_starting`) is a folder's: its files are durable
            # before this commit, as an ending's bundle is before a bundle-less commit.
            shared = ending and (bundle is None or from_starting)
            with self._events.writing(durable=durable, shared_sync=shared) as (tx, log):
                row = tx.one(self._locked_row, {"run_id": run_id})
                through = from_starting and row is not None and row["status"] == "starting"
                lost = guard(row, run_id, LAUNCH_OPERATIONS["mark_running"] if through
                             else op, claim_token, tx.now_ms())
                if lost is not None:
                    return lost
                assert row is not None
                if bundle is not None:
                    # The bundle's write under this row's lock: the guard above is its
                    # fence, and a refusal rolls the transition back with it.
                    word = bundle(tx)
                    if word != "ok":
                        raise BundleRefused(word)
                updated = launch_from_row(self._enter(tx, log, row, op.target, extra or {},
                                                      through=through))
                if turn_intent is not None:
                    self._intent(tx, turn_intent, optional=intent_optional)
                if then_claim is not None:
                    taken = self._chained(tx, log, then_claim)
        except _Abort as abort:
            return abort.lost
        if then_claim is not None:
            then_claim.record = taken  # only once the transition (and the claim) committed
        return updated

    def _enter(self, tx: Transaction, log: EventLog, row: Row, target: LaunchStatus,
               extra: dict[str, Any], event: str | None = None,
               payload: dict[str, Any] | None = None, *, through: bool = False) -> Row:
        """Move the locked `row` to `target` with its event: the row as it now is.
        `through`: a `starting` row through `running` in the same UPDATE (both events)."""
        child_state = extra.pop("child_state", None)
        params = {"crashed": 1, "now": tx.now_ms(), "run_id": row["run_id"],
                  "status": row["status"], "epoch": row["epoch"], "target": target, **extra}
        sql = self._sql["enter"].format(columns=(THROUGH if through else ENTER)[target])
        updated = self._update(tx, sql, params, entered(row, params, through=through))
        assert updated is not None, "row changed under its lock"
        previous = row["status"]
        if through:  # `running` leaves the event's fields (epoch, error, runner) alone
            launch_event(log, {**row, "status": "running"}, previous, "launch.running")
            previous = "running"
        launch_event(log, updated, previous, event or f"launch.{target}", payload)
        if target in CHILD_STATE:
            # Only a controller's child has a request to settle: most runs find none
            # here and load no controller module.
            request = tx.one(self._child_request, {"run_id": row["run_id"]})
            if request is not None:
                from runner.store.domain._settle import settle_child

                settle_child(tx, updated, child_state or CHILD_STATE[target], request)
        if updated["origin_session_id"] is None and tx.dialect.notices and (
                target == "queued" or (target == "parked" and updated["park_mode"] == "auto")):
            tx.notify(LAUNCH_CHANNEL, updated["run_id"])
        return updated

    def _intent(self, tx: Transaction, intent: NewTurnIntent, *, optional: bool = False) -> None:
        """Ensure the intent and make it eligible; a lost race aborts the whole
        transaction (raised as _Abort so the write context rolls back) unless the
        intent is `optional`."""
        ensured = intents.ensure_intent(tx, self._intent_sql, intent)
        if not isinstance(ensured, LostRace):
            ensured = intents.make_intent_eligible(tx, self._intent_sql, intent.intent_id)
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
            extra = {"mode": "explicit"}  # a waiting bundle: it continues when answered
        if outcome == "done":
            extra = {"ending": "completed"}  # a waiting bundle recovers to parked
        try:
            with self._events.writing() as (tx, log):
                row = tx.one(self._locked_row, {"run_id": run_id})
                if row is None:
                    return LostRace(run_id, "not_found")
                if row["status"] != "starting":
                    return LostRace(run_id, "wrong_status", row["status"])
                if row["epoch"] != epoch:
                    return LostRace(run_id, "epoch_mismatch", row["status"])
                if row["claim_expires_at"] > tx.now_ms():
                    return LostRace(run_id, "lease_active", row["status"])
                payload = {"path": list(RECOVERY_PATHS[outcome])}
                updated = launch_from_row(self._enter(tx, log, row, outcome, extra,
                                                      "launch.recovered", payload))
                if turn_intent is not None:
                    self._intent(tx, turn_intent)
        except _Abort as abort:
            return abort.lost
        return updated
