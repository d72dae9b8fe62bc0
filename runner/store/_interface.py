"""The store interface every backend implements (SQLite now, Postgres next).

A `Store` groups four narrow parts: the launch queue, turn intents, the
notification outbox and the run event feed. Every state change is one
conditional update on the expected state and, where a claim exists, the claim
token; a lost race changes nothing and returns `LostRace`. Times come from the
clock the store was built with (SQLite) or the database clock (Postgres);
durations are seconds, stored times are integer milliseconds.

The conformance suite in `tests/integration/store/` runs against this interface.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from runner.store.domain._triggers import TriggerLedger

from runner._leases import LEASE_SECONDS as DEFAULT_LEASE_SECONDS
from runner.store._records import (
    AuditEntry,
    Delivery,
    LaunchGate,
    LaunchRecord,
    LostRace,
    NewLaunch,
    NewNotification,
    NewTurnIntent,
    NextClaim,
    Notification,
    QueuedSources,
    RunEvent,
    TurnIntent,
)
from runner.store._states import (
    AuditAction,
    AuditOutcome,
    LaunchEnding,
    LaunchStatus,
    ParkMode,
    RecoveryOutcome,
    TurnResolution,
)

if TYPE_CHECKING:
    from runner.store.domain._fanout import FanoutItems
    from runner.store.domain._operations import Pauses, Reruns, StepCache

#: A run bundle's own statements, run in a launch transition's transaction when the
#: bundles live in the store's database (runner/engine/_rows.py): given the open
#: transaction, "ok", or the word that refuses the write (`fenced`, `sealed`,
#: `missing`, `exists`), which rolls the transition back with it.
BundleWrite = Callable[[Any], str]


class BundleRefused(Exception):
    """The bundle write in a transition refused (`word`); nothing was committed."""

    def __init__(self, word: str) -> None:
        super().__init__(word)
        self.word = word


class LaunchQueue(Protocol):
    """`workflow_run_queue`: durable deferred launches (seed 000)."""

    def enqueue(self, launch: NewLaunch, *,
                claim_by: str | None = None,
                lease_seconds: float = DEFAULT_LEASE_SECONDS) -> LaunchRecord | LostRace:
        """Insert a `queued` launch; this also reserves its origin session.

        `claim_by`: that runner claims it (for `lease_seconds`) in the same
        transaction (a foreground run), so no other runner ever sees it queued and
        no host is woken for it; the record returned is the claimed one.

        Lost: `already_exists` (run id taken), `session_reserved` (the origin
        session has a queued/starting/running launch; `holder` names it),
        `continuation_exists` (the parent already has a live continuation).
        """
        ...

    def get(self, run_id: str) -> LaunchRecord | None: ...

    def query(
        self,
        *,
        statuses: Iterable[LaunchStatus] | None = None,
        session_id: str | None = None,
        limit: int | None = None,
    ) -> list[LaunchRecord]:
        """Launches, oldest first, optionally filtered by status and origin session;
        every match unless `limit` is given (no silent cap)."""
        ...

    def page(
        self,
        *,
        statuses: Iterable[LaunchStatus] | None = None,
        workflow_ref: str | None = None,
        run_id_prefix: str | None = None,
        updated_since: int | None = None,
        newest_first: bool = True,
        limit: int = 50,
        offset: int = 0,
        ending: LaunchEnding | None = None,
        created_from: int | None = None,
        created_to: int | None = None,
    ) -> list[LaunchRecord]:
        """One page of launches by creation time (newest first by default), filtered
        by status, workflow ref, run id prefix, last change (epoch ms), creation time
        (`created_from` inclusive, `created_to` exclusive, ms) and, for `done`
        rows, how the run ended (`ending`: other statuses pass), paged in SQL (the UI's
        run list and `wfrun runs`: every run is a launch row)."""
        ...

    def counts(self, *, workflow_ref: str | None = None) -> dict[str, int]:
        """How many launches are in each status (statuses with none are left out)."""
        ...

    def ending_counts(self, *, workflow_ref: str | None = None,
                      created_from: int | None = None, created_to: int | None = None
                      ) -> dict[tuple[str, str | None], int]:
        """How many launches are in each (status, ending) pair: `done` rows split by how
        their run ended, so a run list counts completed and waiting runs apart."""
        ...

    def workflow_counts(self) -> dict[str, int]:
        """How many launches each workflow ref has, sorted by ref."""
        ...

    def find_session_reservation(self, session_id: str) -> LaunchRecord | None:
        """The queued/starting/running launch that reserves `session_id`, if any."""
        ...

    def find_continuation(self, parent_run_id: str) -> LaunchRecord | None:
        """The launch continuing `parent_run_id` that holds its continuation slot."""
        ...

    def gate(self, run_id: str) -> LaunchGate | None:
        """The launch's flow-control gate (concurrency and rate keys), if it has one."""
        ...

    def gate_holders(self, key: str) -> list[tuple[str, str]]:
        """(run id, status) of the claimed runs holding concurrency key `key`."""
        ...

    def gate_starts(self, key: str, since_ms: int) -> list[int]:
        """When the runs of rate key `key` started after `since_ms` (ms)."""
        ...

    def claim(
        self,
        run_id: str,
        *,
        runner_id: str,
        lease_seconds: float = DEFAULT_LEASE_SECONDS,
        dead_runner: str | None = None,
    ) -> LaunchRecord | LostRace:
        """Claim one launch: queued/parked -> starting, or reclaim an expired
        starting/running lease (status kept). Installs a new token and bumps `epoch`.
        `dead_runner`: the caller knows that runner is dead, so its lease counts as
        expired (an explicit resume right after a crash need not wait it out)."""
        ...

    def claim_next(
        self,
        *,
        runner_id: str,
        session_id: str | None = None,
        lease_seconds: float = DEFAULT_LEASE_SECONDS,
    ) -> LaunchRecord | None:
        """Claim the next claimable launch of a session (only its own launches), or of
        a detached host when `session_id` is None (only launches without a session),
        own affinity first, then oldest; parked launches only when parked `auto`.
        None when idle."""
        ...

    def renew_lease(
        self, run_id: str, claim_token: str, *, lease_seconds: float = DEFAULT_LEASE_SECONDS
    ) -> LaunchRecord | LostRace:
        """Extend a live claim; an expired lease cannot be renewed."""
        ...

    def hand_over(self, session_id: str) -> list[LaunchRecord]:
        """The session ended: its launches not yet ended become claimable by hosts
        (`claim_next` without a session) and stay its own (origin, reservation,
        follow-ups). Idempotent; returns the launches handed over by this call."""
        ...

    def hand_back(self, run_id: str) -> bool:
        """Only the launch's session claims it again (a host met a step it cannot
        run); True when it had been handed over."""
        ...

    def yield_lease(self, run_id: str, claim_token: str) -> bool:
        """Expire our own live lease now (token-fenced) so recovery may take the run at
        once; False when the claim was no longer ours."""
        ...

    def check_claim(self, run_id: str, claim_token: str) -> LaunchStatus | LostRace:
        """The engine's fence: token matches, status starting|running, lease unexpired;
        the status (`starting` or `running`) while the claim is held."""
        ...

    def claim_left(self, run_id: str, claim_token: str) -> tuple[LaunchStatus, int] | LostRace:
        """`check_claim`, with the milliseconds the lease has left on the database's
        clock: while they last only the holder changes the row (the lease fence
        answers from them)."""
        ...

    def mark_running(self, run_id: str, claim_token: str, *,
                     bundle: BundleWrite | None = None) -> LaunchRecord | LostRace:
        """starting -> running; clears the private input and options. With `bundle`,
        the run bundle's first write commits in the same transaction (or neither
        does, and `BundleRefused` says why); so do `finish`, `fail` and `cancel`."""
        ...

    def park(
        self, run_id: str, claim_token: str, *, mode: ParkMode = "explicit"
    ) -> LaunchRecord | LostRace:
        """running -> parked; releases the claim. Only `auto` parks are claimed again
        by `claim_next`; an `explicit` one waits for `claim(run_id)` (a resume)."""
        ...

    def finish(
        self,
        run_id: str,
        claim_token: str,
        *,
        waiting: bool = False,
        turn_intent: NewTurnIntent | None = None,
        bundle: BundleWrite | None = None,
        then_claim: NextClaim | None = None,
        from_starting: bool = False,
    ) -> LaunchRecord | LostRace:
        """running -> done (`waiting`: the run ended at a checkpoint).
        `from_starting` (also on `fail` and the holder's `cancel`): the run never
        committed `running` (a pure run written whole with its ending): a `starting`
        row goes `starting -> running -> ending` in this one transaction. A controller's
        child request linked by run id is settled and its parent key woken in the
        same transaction, as by `fail` and `cancel`. `turn_intent` (a closing
        presentation) is ensured and made eligible in the same transaction, unless
        another intent of the run is pending. `then_claim`: the next launch is
        claimed in the same commit, as `claim_next` would (its `record`), so a host
        slot that frees up takes its next run without a transaction of its own; so
        do `fail` and the holder's `cancel`."""
        ...

    def fail(
        self,
        run_id: str,
        claim_token: str,
        *,
        code: str,
        message: str,
        turn_intent: NewTurnIntent | None = None,
        bundle: BundleWrite | None = None,
        then_claim: NextClaim | None = None,
        from_starting: bool = False,
    ) -> LaunchRecord | LostRace:
        """starting|running -> failed with a stable code and a bounded safe message.

        With `turn_intent`, the intent is ensured and made eligible in the same
        transaction, so a failure is never durable without its follow-up.
        """
        ...

    def release(self, run_id: str, claim_token: str) -> LaunchRecord | LostRace:
        """starting -> queued by the claim holder, input kept, no crash counted: the
        run bundle could not be written (a full or read-only disk), so nothing began."""
        ...

    def cancel(self, run_id: str, *, claim_token: str | None = None,
               bundle: BundleWrite | None = None,
               then_claim: NextClaim | None = None,
               from_starting: bool = False) -> LaunchRecord | LostRace:
        """-> cancelled. Without a token: queued|parked, or starting once its lease has
        expired (beats activation); a `starting` row with a live lease is refused
        (`lease_active`): ask its holder, as for `running` (a `cancel_requested`
        event). With the claim token: starting|running (the holder records a cancel)."""
        ...

    def queued_sources(self, *, limit: int = 1000) -> list[QueuedSources]:
        """The detached `queued` launches grouped by source identity, at most `limit`
        groups, oldest first: what a host watches, in memory flat in the queue's length."""
        ...

    def list_recoverable(self, *, session_id: str | None = None) -> list[LaunchRecord]:
        """Claimable launches: queued, parked, or starting/running with an expired lease."""
        ...

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
        """Reconcile a `starting` row whose lease expired to what its bundle shows.

        `epoch` is the one the caller observed; a reclaim since then loses.
        `failed` needs `code` and `message`; `turn_intent` is ensured and made
        eligible in the same transaction.
        """
        ...


class TurnIntents(Protocol):
    """`workflow_turn_intents`: deferred model turns for a session."""

    def ensure(self, intent: NewTurnIntent) -> TurnIntent | LostRace:
        """Insert, or return the existing intent with the same id unchanged.

        `intent.eligible` applies only when the intent is inserted. An existing id
        with a different identity raises IdentityConflict; another pending intent
        for the same (run, session) loses with `intent_pending`.
        """
        ...

    def get(self, intent_id: str) -> TurnIntent | None: ...

    def make_eligible(self, intent_id: str) -> TurnIntent | LostRace:
        """Pending -> eligible (idempotent for an already eligible intent)."""
        ...

    def claim_delivery(
        self, intent_id: str, *, lease_seconds: float = DEFAULT_LEASE_SECONDS
    ) -> TurnIntent | LostRace:
        """Take the delivery claim of a pending, eligible intent (free or expired)."""
        ...

    def release_delivery(self, intent_id: str, claim_token: str) -> TurnIntent | LostRace:
        """Give the delivery claim back after a failed send."""
        ...

    def resolve(
        self, intent_id: str, claim_token: str, *, resolution: TurnResolution, message_id: str
    ) -> TurnIntent | LostRace:
        """Pending -> resolved; needs the delivery claim token."""
        ...

    def list_eligible(self, session_id: str) -> list[TurnIntent]:
        """Pending eligible intents of a session, in eligibility order."""
        ...

    def list_pending(self, run_id: str) -> list[TurnIntent]: ...


class Notifications(Protocol):
    """`workflow_notifications`: the passive progress/final report outbox."""

    def insert(self, notification: NewNotification) -> Notification:
        """Insert, unique by (run_id, node_id, notification_index); a crash retry with
        the same content returns the stored row, other content raises IdentityConflict."""
        ...

    def get(self, notification_id: str) -> Notification | None: ...

    def claim_delivery(
        self, notification_id: str, *, lease_seconds: float = DEFAULT_LEASE_SECONDS
    ) -> Notification | LostRace: ...

    def mark_delivered(self, notification_id: str, claim_token: str) -> Notification | LostRace: ...

    def list_pending(self, session_id: str) -> list[Notification]:
        """Undelivered notifications of a session, oldest first."""
        ...


class RunEvents(Protocol):
    """`run_events`: append-only audit feed (the run bundle stays the source of truth)."""

    def append(
        self,
        run_id: str,
        event_type: str,
        payload: object = None,
        *,
        workflow_ref: str | None = None,
        runner_id: str | None = None,
    ) -> RunEvent: ...

    def read(
        self, *, run_id: str | None = None, after_seq: int = 0, limit: int = 1000
    ) -> list[RunEvent]:
        """Events in append order, after `after_seq`, optionally for one run."""
        ...


class InputScrub(Protocol):
    """One runner's scrub of cleared private input from the store's files (SQLite: a
    WAL checkpoint, batched: BatchedScrub in runner/store/sqlite/_db.py). A store with nothing to
    scrub hands out `NoScrub`."""

    def cleared(self) -> None:
        """An activation cleared input: owe a scrub, paid when the batch is due."""
        ...

    def tick(self) -> None:
        """Pay the owed scrubs if the batch is due."""
        ...

    def flush(self) -> None:
        """Pay the owed scrubs, if any."""
        ...

    def now(self) -> None:
        """Scrub at once (and pay what is owed)."""
        ...


class NoScrub:
    """The scrub of a store that keeps no stale copy of cleared input (Postgres)."""

    def cleared(self) -> None:
        pass

    def tick(self) -> None:
        pass

    def flush(self) -> None:
        pass

    def now(self) -> None:
        pass


class AuditTrail(Protocol):
    """`audit_log`: who did what to which run through the HTTP API."""

    def append(self, *, actor: str, action: AuditAction, outcome: AuditOutcome,
               run_id: str | None = None, workflow_ref: str | None = None,
               origin: str | None = None,
               detail: Mapping[str, Any] | None = None) -> AuditEntry: ...

    def newest(self, *, run_id: str | None = None, limit: int = 100,
               before_seq: int | None = None) -> list[AuditEntry]:
        """Rows newest first, before `before_seq`, optionally of one run."""
        ...


class ChannelOutbox(Protocol):
    """`notification_deliveries`: `notify` messages on their way to configured channels."""

    def enqueue(self, *, notification_id: str, channel: str, run_id: str, node_id: str,
                kind: str, message: str) -> bool: ...

    def claim_due(self, *, limit: int = 20, lease_seconds: float = DEFAULT_LEASE_SECONDS
                  ) -> list[Delivery]: ...

    def mark_delivered(self, delivery: Delivery) -> bool: ...

    def retry_at(self, delivery: Delivery, next_attempt_ms: int, error: str) -> bool: ...

    def give_up(self, delivery: Delivery, error: str) -> bool: ...

    def recent(self, *, limit: int = 100) -> list[Delivery]: ...

    def of_run(self, run_id: str) -> list[Delivery]: ...


class Store(Protocol):
    """The durable store (DESIGN §5)."""

    @property
    def schema_id(self) -> str: ...

    @property
    def launches(self) -> LaunchQueue: ...

    @property
    def turn_intents(self) -> TurnIntents: ...

    @property
    def notifications(self) -> Notifications: ...

    @property
    def run_events(self) -> RunEvents: ...

    @property
    def reruns(self) -> Reruns: ...

    @property
    def pauses(self) -> Pauses: ...

    @property
    def step_cache(self) -> StepCache: ...

    @property
    def audit(self) -> AuditTrail: ...

    @property
    def deliveries(self) -> ChannelOutbox: ...

    @property
    def triggers(self) -> TriggerLedger: ...

    @property
    def fanout(self) -> FanoutItems: ...

    def now_ms(self) -> int:
        """The store's clock, in integer milliseconds."""
        ...

    def input_scrub(self, monotonic: Callable[[], float], *,
                    enabled: bool = True) -> InputScrub:
        """A runner's own scrub of cleared input, batched on its `monotonic` clock
        (`enabled=False`: owed and paid, never run; benches compare without it)."""
        ...

    def close(self) -> None: ...
