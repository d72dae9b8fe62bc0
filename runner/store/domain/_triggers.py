"""`trigger_firings` and `trigger_states`, backend-neutral (DESIGN §10).

A firing's primary key is its idempotency key (workflow, trigger, slot | delivery |
file batch). Every host that sees a slot tries the same insert; the one whose
insert lands owns the firing, so a slot starts at most one run however many hosts
run and however their clocks and ticks interleave: the store decides, not timing.
The run id of a firing is fixed when it is claimed, so finishing a `pending`
firing after a crash queues that same run id (the queue's primary key again).

The ledger's writes are not durable on their own (`durable=False`): the launch a
firing queues is a durable commit that comes after its claim, and a commit is
durable only with those before it, so a lost claim never had a run; a lost cursor,
missed row or outcome is evaluated again, and the claims that are kept stop a
slot from starting twice. A year of hourly slots costs no fsync of its own.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Protocol

from runner.store._connector import Connector, Row, Transaction
from runner.store._ddl import row_params, sql_in, values_rows
from runner.store._records import (
    LaunchRecord,
    LostRace,
    NewLaunch,
    bounded_message,
    canonical_json,
    check_id,
)
from runner.store._states import (
    CONTROLLER_ERROR_MAX_BYTES,
    EVENT_MAX_BYTES,
    FIRING_OUTCOMES,
    TERMINAL_STATUSES,
)


class BatchAdd(Protocol):
    """`LaunchQueue.batch`'s add (`Adder`): one launch, or many in one statement."""

    def __call__(self, launch: NewLaunch) -> LaunchRecord | LostRace | ValueError: ...

    def many(self, launches: Sequence[NewLaunch]
             ) -> list[LaunchRecord | LostRace | ValueError]: ...


class Batching(Protocol):
    """The launch queue as `fire_many` writes in it (`LaunchQueue.batch`)."""

    def batch(self, *, shared_sync: bool = False
              ) -> AbstractContextManager[tuple[Transaction, BatchAdd]]: ...


_STATE = ("SELECT workflow, trigger_name, paused, cursor_at, updated_at FROM trigger_states"
          " WHERE workflow = :w AND trigger_name = :t")
_FIRING_COLUMNS = ("workflow, trigger_name, firing_key, slot_at, outcome, run_id, reason,"
                   " event_json, created_at, updated_at")
_INSERT_FIRING = (f"INSERT INTO trigger_firings ({_FIRING_COLUMNS}) VALUES (:w, :t, :k, NULL,"
                  " :outcome, :run, :reason, NULL, :now, :now)"
                  f" RETURNING {_FIRING_COLUMNS}")
_NO_CONFLICT = " ON CONFLICT (workflow, trigger_name, firing_key) DO NOTHING"
#: The most firings one insert of `fire_many` takes (well inside both backends'
#: bounds on a statement's parameters).
MANY_FIRINGS = 100
_INSERTS: dict[int, str] = {}  # `_insert_firings`' statement, by rows
_SETTLE = ("UPDATE trigger_firings SET outcome = :outcome, reason = :reason,"
           " event_json = NULL, updated_at = :now WHERE workflow = :w"
           " AND trigger_name = :t AND firing_key = :k AND outcome = 'pending'")


@dataclass(frozen=True, slots=True)
class TriggerState:
    workflow: str
    trigger: str
    paused: bool
    cursor_at: int  # ms: the slots up to here were evaluated
    updated_at: int


@dataclass(frozen=True, slots=True)
class Firing:
    workflow: str
    trigger: str
    key: str
    slot_at: int | None  # ms; None for a delivery or a file batch
    outcome: str
    run_id: str | None
    reason: str | None
    event_json: str | None  # a debounced delivery's event, until its batch fires
    created_at: int
    updated_at: int

    def to_json(self) -> dict[str, object]:
        return {"key": self.key, "slot_at": self.slot_at, "outcome": self.outcome,
                "run_id": self.run_id, "reason": self.reason, "created_at": self.created_at}


@dataclass(frozen=True, slots=True)
class TriggerSummary:
    """What `wfrun triggers` shows of one trigger's history."""

    last: Firing | None  # the newest firing that queued a run
    counts: dict[str, int]  # outcome -> firings
    recent_skipped: tuple[Firing, ...]  # the newest skipped, missed or failed firings


def _state(row: Row) -> TriggerState:
    return TriggerState(row["workflow"], row["trigger_name"], bool(row["paused"]),
                        row["cursor_at"], row["updated_at"])


def _firing(row: Row) -> Firing:
    return Firing(row["workflow"], row["trigger_name"], row["firing_key"], row["slot_at"],
                  row["outcome"], row["run_id"], row["reason"], row["event_json"],
                  row["created_at"], row["updated_at"])


def _reason(reason: str | None) -> str | None:
    return None if reason is None else bounded_message(reason, CONTROLLER_ERROR_MAX_BYTES)


@dataclass(frozen=True, slots=True)
class NewFiring:
    """An event firing to record (`fire_many`) with its run's launch, or with
    `reason` instead when it failed before one (its input did not render)."""

    workflow: str
    trigger: str
    key: str
    run_id: str
    launch: NewLaunch | None
    reason: str | None = None


@dataclass(frozen=True, slots=True)
class Fired:
    """What `fire_many` made of one firing."""

    firing: Firing  # as it stands after the commit
    made: bool  # False: it existed already (a replay)
    launch: LaunchRecord | None  # the run it queued (made and launched)


class TriggerLedger:
    """Trigger state and firings on any backend (`launches`: the queue whose batch
    `fire_many` writes in)."""

    def __init__(self, connector: Connector, launches: Batching | None = None) -> None:
        self._c = connector
        self._launches = launches

    @property
    def parallel_writes(self) -> bool:
        """Whether `fire_many` calls of this process commit side by side (Postgres)
        or one at a time (SQLite): how many batches a group commit runs at once."""
        return self._c.dialect.parallel_writes

    # -- state ---------------------------------------------------------------------
    def state(self, workflow: str, trigger: str) -> TriggerState | None:
        with self._c.read() as tx:
            row = tx.one(_STATE, {"w": workflow, "t": trigger})
        return None if row is None else _state(row)

    def states(self) -> list[TriggerState]:
        with self._c.read() as tx:
            rows = tx.all("SELECT workflow, trigger_name, paused, cursor_at, updated_at"
                          " FROM trigger_states ORDER BY workflow, trigger_name")
        return [_state(r) for r in rows]

    def ensure(self, workflow: str, trigger: str, cursor_at: int) -> TriggerState:
        """The trigger's state; a trigger seen for the first time starts at `cursor_at`
        (no catch-up for slots before it existed)."""
        check_id(workflow, "workflow")
        check_id(trigger, "trigger")
        ids = {"w": workflow, "t": trigger}
        with self._c.read() as tx:
            row = tx.one(_STATE, ids)
        if row is not None:
            return _state(row)
        with self._c.write(durable=False) as tx:
            tx.run("INSERT INTO trigger_states (workflow, trigger_name, paused, cursor_at,"
                   " updated_at) VALUES (:w, :t, 0, :c, :now)"
                   " ON CONFLICT (workflow, trigger_name) DO NOTHING",
                   {**ids, "c": cursor_at, "now": tx.now_ms()})
            row = tx.one(_STATE, ids)
        assert row is not None
        return _state(row)

    def advance(self, workflow: str, trigger: str, cursor_at: int) -> None:
        """Move the cursor forward (never back: two hosts may evaluate the same slots)."""
        with self._c.write(durable=False) as tx:
            tx.run("UPDATE trigger_states SET cursor_at = :c, updated_at = :now"
                   " WHERE workflow = :w AND trigger_name = :t AND cursor_at < :c",
                   {"w": workflow, "t": trigger, "c": cursor_at, "now": tx.now_ms()})

    def set_paused(self, workflow: str, trigger: str, paused: bool, now_ms: int) -> bool:
        """Pause or resume; False when the state already was so. Resuming moves the
        cursor to `now_ms`: the slots passed while paused are not caught up."""
        check_id(workflow, "workflow")
        check_id(trigger, "trigger")
        ids = {"w": workflow, "t": trigger}
        with self._c.write() as tx:  # a person's action: durable when it returns
            tx.run("INSERT INTO trigger_states (workflow, trigger_name, paused, cursor_at,"
                   " updated_at) VALUES (:w, :t, 0, :c, :now)"
                   " ON CONFLICT (workflow, trigger_name) DO NOTHING",
                   {**ids, "c": now_ms, "now": tx.now_ms()})
            changed = tx.run(
                "UPDATE trigger_states SET paused = :p, updated_at = :now,"
                " cursor_at = CASE WHEN :p = 0 AND cursor_at < :c THEN :c ELSE cursor_at END"
                " WHERE workflow = :w AND trigger_name = :t AND paused <> :p",
                {**ids, "p": int(paused), "c": now_ms, "now": tx.now_ms()})
        return changed == 1

    # -- firings -------------------------------------------------------------------
    def claim(self, workflow: str, trigger: str, key: str, *, slot_at: int | None,
              outcome: str, run_id: str | None = None, reason: str | None = None,
              event: object = None, durable: bool | None = None) -> bool:
        """Record a firing; True when this call made it (False: it existed already).
        `event`: kept until the firing settles, so that a pending firing starts with
        it whoever finishes it (ValueError: it is not JSON, or over EVENT_MAX_BYTES).
        `durable` (default: whether an event is kept): False when a durable commit
        of the caller's follows before anyone hears of the firing (its run queued)."""
        if outcome not in FIRING_OUTCOMES:
            raise ValueError(f"a firing's outcome is one of {FIRING_OUTCOMES}, not {outcome!r}")
        check_id(key, "firing key")
        event_json = None if event is None else canonical_json(
            event, what="trigger event", max_bytes=EVENT_MAX_BYTES)
        # A debounced delivery's kept event is the only copy of a delivery already
        # answered: durable.
        with self._c.write(durable=event is not None if durable is None else durable) as tx:
            made = tx.run(
                f"INSERT INTO trigger_firings ({_FIRING_COLUMNS}) VALUES (:w, :t, :k, :slot,"
                " :outcome, :run, :reason, :event, :now, :now)"
                " ON CONFLICT (workflow, trigger_name, firing_key) DO NOTHING",
                {"w": workflow, "t": trigger, "k": key, "slot": slot_at, "outcome": outcome,
                 "run": run_id, "reason": _reason(reason), "event": event_json,
                 "now": tx.now_ms()})
        return made == 1

    def claim_many(self, workflow: str, trigger: str,
                   firings: list[tuple[str, int | None, str, str | None]]) -> None:
        """Record (key, slot_at, outcome, reason) firings that start no run (missed
        slots) in one transaction; existing ones are left as they are."""
        if not firings:
            return
        with self._c.write(durable=False) as tx:
            now = tx.now_ms()
            tx.many(f"INSERT INTO trigger_firings ({_FIRING_COLUMNS}) VALUES (:w, :t, :k,"
                    " :slot, :outcome, NULL, :reason, NULL, :now, :now)"
                    " ON CONFLICT (workflow, trigger_name, firing_key) DO NOTHING",
                    [{"w": workflow, "t": trigger, "k": k, "slot": slot, "outcome": outcome,
                      "reason": _reason(reason), "now": now}
                     for k, slot, outcome, reason in firings])

    def fire_many(self, firings: Sequence[NewFiring]) -> list[Fired]:
        """Event firings (webhook deliveries that arrived together: group commit)
        recorded and their launches queued in one durable transaction, so a firing
        never exists without its run, even after a crash. Per firing, as it stands
        after the commit: a replay's (it existed already: nothing new), or the new
        one, launched with its run queued or failed saying why (its own `reason`,
        or why the store refused its launch)."""
        assert self._launches is not None, "a ledger built without the launch queue"
        for f in firings:
            check_id(f.key, "firing key")
        # Durable when it returns, its fsync made outside the writers' turn: the host's
        # other writers, and the next batch's statements, do not wait for this disk.
        with self._launches.batch(shared_sync=True) as (tx, add):
            now = tx.now_ms()
            ids = [{"w": f.workflow, "t": f.trigger, "k": f.key, "now": now}
                   for f in firings]
            made = self._insert_firings(tx, firings, ids)
            news = [(n, f.launch) for n, f in enumerate(firings)
                    if f.launch is not None and n in made]
            queued: dict[int, LaunchRecord | LostRace | ValueError | str] = dict(zip(
                [n for n, _ in news], add.many([launch for _, launch in news]), strict=True))
            done: list[Fired] = []
            for n, f in enumerate(firings):
                row = made.get(n)
                if row is None:  # a replay: as the first delivery left it
                    row = tx.one(f"SELECT {_FIRING_COLUMNS} FROM trigger_firings WHERE"
                                 " workflow = :w AND trigger_name = :t AND firing_key = :k",
                                 ids[n])
                    assert row is not None  # firings are never deleted while pending
                    done.append(Fired(_firing(row), False, None))
                    continue
                launch = queued.get(n, f.reason or "failed")
                if isinstance(launch, LostRace):
                    launch = f"could not queue the run ({launch.reason})"
                elif isinstance(launch, ValueError):
                    launch = str(launch)
                if isinstance(launch, str) and f.launch is not None:  # refused: failed
                    row = tx.one(f"UPDATE trigger_firings SET outcome = 'failed',"
                                 " reason = :reason, updated_at = :now WHERE workflow = :w"
                                 " AND trigger_name = :t AND firing_key = :k"
                                 f" RETURNING {_FIRING_COLUMNS}",
                                 {**ids[n], "reason": _reason(launch)})
                    assert row is not None  # inserted by this transaction
                done.append(Fired(_firing(row), True,
                                  None if isinstance(launch, str) else launch))
        return done

    def _insert_firings(self, tx: Transaction, firings: Sequence[NewFiring],
                        ids: list[dict[str, object]]) -> dict[int, Row]:
        """`fire_many`'s firings inserted by one statement per MANY_FIRINGS, each as it
        will most often end (nobody sees it before the commit): launched with its run,
        or failed saying why it had none; a refused launch alone pays an UPDATE. The
        rows made, by position; a firing that existed (a replay, or a key twice in
        the batch: the second) is not among them."""
        made: dict[int, Row] = {}
        first: dict[tuple[str, str, str], int] = {}
        for n, f in enumerate(firings):
            first.setdefault((f.workflow, f.trigger, f.key), n)
        fresh = sorted(first.values())
        for at in range(0, len(fresh), MANY_FIRINGS):
            chunk = fresh[at:at + MANY_FIRINGS]
            sql = _INSERTS.get(len(chunk))
            if sql is None:
                sql = _INSERTS[len(chunk)] = values_rows(_INSERT_FIRING, len(chunk),
                                                         on_conflict=_NO_CONFLICT)
            rows = tx.all(sql,
                          row_params([{
                              **ids[n], "run": firings[n].run_id,
                              "outcome": "launched" if firings[n].launch else "failed",
                              "reason": None if firings[n].launch
                              else _reason(firings[n].reason or "failed")}
                              for n in chunk]))
            for row in rows:
                made[first[(row["workflow"], row["trigger_name"], row["firing_key"])]] = row
        return made

    def settle(self, workflow: str, trigger: str, key: str, outcome: str,
               reason: str | None = None) -> bool:
        """End a `pending` firing (launched, skipped or failed); False if it was not
        pending any more (another host settled it)."""
        if outcome not in FIRING_OUTCOMES or outcome == "pending":
            raise ValueError(f"a firing settles as launched, skipped, missed or failed, "
                             f"not {outcome!r}")
        with self._c.write(durable=False) as tx:
            changed = tx.run(_SETTLE, {"w": workflow, "t": trigger, "k": key,
                                       "outcome": outcome, "reason": _reason(reason),
                                       "now": tx.now_ms()})
        return changed == 1

    def reopen(self, workflow: str, trigger: str, key: str, run_id: str) -> bool:
        """Make a firing that started no run (missed, skipped, failed) pending again
        with `run_id` (a backfill); False when it has a run or another call won."""
        with self._c.write(durable=False) as tx:
            changed = tx.run(
                "UPDATE trigger_firings SET outcome = 'pending', run_id = :r, reason = NULL,"
                " updated_at = :now WHERE workflow = :w AND trigger_name = :t"
                " AND firing_key = :k AND outcome IN ('missed', 'skipped', 'failed')",
                {"w": workflow, "t": trigger, "k": key, "r": run_id, "now": tx.now_ms()})
        return changed == 1

    def firing(self, workflow: str, trigger: str, key: str) -> Firing | None:
        with self._c.read() as tx:
            row = tx.one(f"SELECT {_FIRING_COLUMNS} FROM trigger_firings WHERE workflow = :w"
                         " AND trigger_name = :t AND firing_key = :k",
                         {"w": workflow, "t": trigger, "k": key})
        return None if row is None else _firing(row)

    def pending(self, workflow: str, trigger: str) -> list[Firing]:
        """Claimed firings not yet queued, oldest slot first."""
        with self._c.read() as tx:
            rows = tx.all(f"SELECT {_FIRING_COLUMNS} FROM trigger_firings WHERE workflow = :w"
                          " AND trigger_name = :t AND outcome = 'pending'"
                          " ORDER BY slot_at, created_at, firing_key",
                          {"w": workflow, "t": trigger})
        return [_firing(r) for r in rows]

    def active_runs(self, workflow: str, trigger: str) -> list[tuple[str, str]]:
        """(run id, status) of the trigger's runs that have not ended, oldest first."""
        with self._c.read() as tx:
            rows = tx.all(
                "SELECT q.run_id, q.status FROM workflow_run_queue q JOIN trigger_firings f"
                " ON f.run_id = q.run_id WHERE f.workflow = :w AND f.trigger_name = :t"
                f" AND q.status NOT IN {sql_in(TERMINAL_STATUSES)}"
                " ORDER BY q.created_at, q.run_id", {"w": workflow, "t": trigger})
        return [(r["run_id"], r["status"]) for r in rows]

    def run_exists(self, run_id: str) -> bool:
        """Whether the launch queue holds run `run_id` (a firing's run was queued)."""
        with self._c.read() as tx:
            row = tx.one("SELECT 1 AS found FROM workflow_run_queue WHERE run_id = :r",
                         {"r": run_id})
        return row is not None

    def firings(self, workflow: str, trigger: str, *, limit: int = 100,
                outcomes: tuple[str, ...] | None = None) -> list[Firing]:
        """The newest firings first."""
        where = f" AND outcome IN {sql_in(outcomes)}" if outcomes else ""
        with self._c.read() as tx:
            rows = tx.all(f"SELECT {_FIRING_COLUMNS} FROM trigger_firings WHERE workflow = :w"
                          f" AND trigger_name = :t{where}"
                          " ORDER BY created_at DESC, slot_at DESC LIMIT :limit",
                          {"w": workflow, "t": trigger, "limit": max(1, limit)})
        return [_firing(r) for r in rows]

    def summary(self, workflow: str, trigger: str, *, recent: int = 5) -> TriggerSummary:
        ids = {"w": workflow, "t": trigger}
        with self._c.read() as tx:
            counts = {r["outcome"]: r["n"] for r in tx.all(
                "SELECT outcome, count(*) AS n FROM trigger_firings WHERE workflow = :w"
                " AND trigger_name = :t GROUP BY outcome", ids)}
            last = tx.one(f"SELECT {_FIRING_COLUMNS} FROM trigger_firings WHERE workflow = :w"
                          " AND trigger_name = :t AND outcome = 'launched'"
                          " ORDER BY created_at DESC, slot_at DESC LIMIT 1", ids)
            skipped = tx.all(f"SELECT {_FIRING_COLUMNS} FROM trigger_firings WHERE"
                             " workflow = :w AND trigger_name = :t AND outcome IN"
                             " ('skipped', 'missed', 'failed')"
                             " ORDER BY created_at DESC, slot_at DESC LIMIT :n",
                             {**ids, "n": recent})
        return TriggerSummary(None if last is None else _firing(last), counts,
                              tuple(_firing(r) for r in skipped))
