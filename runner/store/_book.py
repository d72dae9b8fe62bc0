"""`LaunchBook`: the launch queue's one facade, for every caller above the store.

Like procrastinate's `JobManager` over its connector: every layer above the store
(the launch layer's runners, the hosts, sessions, views, the web console, and the
CLI through the host's runtime functions) reaches the queue through this facade,
so what they ask of it is listed here, typed, once. It is the only reader of
`store.launches` outside the store's own modules (tests/unit/store/
test_launch_book_fence.py); the rules stay in the store (guards, transitions,
named queries: domain/_launches.py) and this module adds none. It lives in the
store package, not in `runner.launch`, because the cold views (`wfrun status`,
`wfrun runs`) read launches without loading the launch layer.

    reads        get, query, page, counts, ending_counts, workflow_counts,
                 queued_sources, reservation
    sessions     hand_over (a session ended), hand_back (an agent step goes back)
    a runner's   enqueue, claim, claim_next, check_claim, renew_lease, mark_running,
    transitions  park, finish, fail, release, cancel, yield_lease,
                 recover_expired_starting

`LeaseFence`, the lease fence, is one claim's question to the book: is the launch
still ours? The engine asks it (a plain callable) before it writes a run's bundle.
It lives beside the book, not in the launch layer, because its local answer rests
on the store's own rule (`domain/_launch_queries.guard`): while our lease surely
has a third of its length left, nothing else can change the row: a reclaim needs an
expired lease, and a cancel of a claimed row (`starting` or `running`) with a live
lease is asked of its holder (the store refuses it otherwise, ADR 0009 lever 3).
Then the fence is answered from what it last learned (no round trip); otherwise it
asks the store, and learns the lease from the answer. The fence owns that
knowledge: `running` and `held` record committed answers (mark_running, a renewal by
the lease keeper), a read records what it found, `lost` forgets them.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable

from runner._leases import LEASE_SECONDS as DEFAULT_LEASE_SECONDS
from runner._leases import renew_every
from runner.clock import Clock
from runner.store._errors import StoreError, StoreUnreachable
from runner.store._interface import BundleWrite, LaunchQueue, Store
from runner.store._records import (
    LaunchGate,
    LaunchRecord,
    LostRace,
    NewLaunch,
    NewTurnIntent,
    NextClaim,
    QueuedSources,
)
from runner.store._states import LaunchEnding, LaunchStatus, ParkMode, RecoveryOutcome


class LaunchBook:
    """One store's launch queue, as every layer above the store uses it."""

    def __init__(self, store: Store) -> None:
        self._queue: LaunchQueue = store.launches

    # -- reads ---------------------------------------------------------------------------
    def get(self, run_id: str) -> LaunchRecord | None:
        return self._queue.get(run_id)

    def query(self, *, statuses: Iterable[LaunchStatus] | None = None,
              session_id: str | None = None, limit: int | None = None
              ) -> list[LaunchRecord]:
        """Launches, oldest first, by status and origin session (every match unless
        `limit`)."""
        return self._queue.query(statuses=statuses, session_id=session_id, limit=limit)

    def page(self, *, statuses: Iterable[LaunchStatus] | None = None,
             workflow_ref: str | None = None, run_id_prefix: str | None = None,
             updated_since: int | None = None, newest_first: bool = True,
             limit: int = 50, offset: int = 0, ending: LaunchEnding | None = None,
             created_from: int | None = None, created_to: int | None = None
             ) -> list[LaunchRecord]:
        """One page of a run list, filtered and paged in SQL."""
        return self._queue.page(statuses=statuses, workflow_ref=workflow_ref,
                                run_id_prefix=run_id_prefix, updated_since=updated_since,
                                newest_first=newest_first, limit=limit, offset=offset,
                                ending=ending, created_from=created_from,
                                created_to=created_to)

    def counts(self, *, workflow_ref: str | None = None) -> dict[str, int]:
        """Launches by status, counted in SQL."""
        return self._queue.counts(workflow_ref=workflow_ref)

    def ending_counts(self, *, workflow_ref: str | None = None,
                      created_from: int | None = None, created_to: int | None = None
                      ) -> dict[tuple[str, str | None], int]:
        """Launches by status and, for `done`, how the run ended (created in the window)."""
        return self._queue.ending_counts(workflow_ref=workflow_ref, created_from=created_from,
                                         created_to=created_to)

    def gate(self, run_id: str) -> LaunchGate | None:
        """The launch's flow-control gate (concurrency and rate keys), if it has one."""
        return self._queue.gate(run_id)

    def gate_holders(self, key: str) -> list[tuple[str, str]]:
        """(run id, status) of the claimed runs holding concurrency key `key`."""
        return self._queue.gate_holders(key)

    def gate_starts(self, key: str, since_ms: int) -> list[int]:
        """When the runs of rate key `key` started after `since_ms` (ms)."""
        return self._queue.gate_starts(key, since_ms)

    def workflow_counts(self) -> dict[str, int]:
        """Launches by workflow ref."""
        return self._queue.workflow_counts()

    def queued_sources(self, *, limit: int = 1000) -> list[QueuedSources]:
        """The queued launches' recorded sources, in groups (what a host watches)."""
        return self._queue.queued_sources(limit=limit)

    def reservation(self, session_id: str) -> LaunchRecord | None:
        """The session's one live launch (queued, starting or running), if any."""
        return self._queue.find_session_reservation(session_id)

    # -- sessions ------------------------------------------------------------------------
    def hand_over(self, session_id: str) -> list[LaunchRecord]:
        """A session ended: its launches become claimable by a host."""
        return self._queue.hand_over(session_id)

    def hand_back(self, run_id: str) -> bool:
        """A handed-over launch reached an agent step: only its session claims it."""
        return self._queue.hand_back(run_id)

    # -- a runner's transitions ----------------------------------------------------------
    def enqueue(self, launch: NewLaunch, *, claim_by: str | None = None,
                lease_seconds: float = DEFAULT_LEASE_SECONDS) -> LaunchRecord | LostRace:
        return self._queue.enqueue(launch, claim_by=claim_by, lease_seconds=lease_seconds)

    def claim(self, run_id: str, *, runner_id: str,
              lease_seconds: float = DEFAULT_LEASE_SECONDS,
              dead_runner: str | None = None) -> LaunchRecord | LostRace:
        return self._queue.claim(run_id, runner_id=runner_id, lease_seconds=lease_seconds,
                                 dead_runner=dead_runner)

    def claim_next(self, *, runner_id: str, session_id: str | None = None,
                   lease_seconds: float = DEFAULT_LEASE_SECONDS) -> LaunchRecord | None:
        return self._queue.claim_next(runner_id=runner_id, session_id=session_id,
                                      lease_seconds=lease_seconds)

    def check_claim(self, run_id: str, claim_token: str) -> LaunchStatus | LostRace:
        return self._queue.check_claim(run_id, claim_token)

    def claim_left(self, run_id: str, claim_token: str) -> tuple[LaunchStatus, int] | LostRace:
        return self._queue.claim_left(run_id, claim_token)

    def renew_lease(self, run_id: str, claim_token: str, *,
                    lease_seconds: float = DEFAULT_LEASE_SECONDS) -> LaunchRecord | LostRace:
        return self._queue.renew_lease(run_id, claim_token, lease_seconds=lease_seconds)

    def mark_running(self, run_id: str, claim_token: str, *,
                     bundle: BundleWrite | None = None) -> LaunchRecord | LostRace:
        return self._queue.mark_running(run_id, claim_token, bundle=bundle)

    def park(self, run_id: str, claim_token: str, *,
             mode: ParkMode = "explicit") -> LaunchRecord | LostRace:
        return self._queue.park(run_id, claim_token, mode=mode)

    def finish(self, run_id: str, claim_token: str, *, waiting: bool = False,
               turn_intent: NewTurnIntent | None = None, bundle: BundleWrite | None = None,
               then_claim: NextClaim | None = None,
               from_starting: bool = False) -> LaunchRecord | LostRace:
        return self._queue.finish(run_id, claim_token, waiting=waiting,
                                  turn_intent=turn_intent, bundle=bundle,
                                  then_claim=then_claim, from_starting=from_starting)

    def fail(self, run_id: str, claim_token: str, *, code: str, message: str,
             turn_intent: NewTurnIntent | None = None, bundle: BundleWrite | None = None,
             then_claim: NextClaim | None = None,
             from_starting: bool = False) -> LaunchRecord | LostRace:
        return self._queue.fail(run_id, claim_token, code=code, message=message,
                                turn_intent=turn_intent, bundle=bundle,
                                then_claim=then_claim, from_starting=from_starting)

    def release(self, run_id: str, claim_token: str) -> LaunchRecord | LostRace:
        return self._queue.release(run_id, claim_token)

    def cancel(self, run_id: str, *, claim_token: str | None = None,
               bundle: BundleWrite | None = None,
               then_claim: NextClaim | None = None,
               from_starting: bool = False) -> LaunchRecord | LostRace:
        return self._queue.cancel(run_id, claim_token=claim_token, bundle=bundle,
                                  then_claim=then_claim, from_starting=from_starting)

    def yield_lease(self, run_id: str, claim_token: str) -> bool:
        return self._queue.yield_lease(run_id, claim_token)

    def recover_expired_starting(self, run_id: str, *, epoch: int,
                                 outcome: RecoveryOutcome, code: str | None = None,
                                 message: str | None = None,
                                 turn_intent: NewTurnIntent | None = None
                                 ) -> LaunchRecord | LostRace:
        return self._queue.recover_expired_starting(run_id, epoch=epoch, outcome=outcome,
                                                    code=code, message=message,
                                                    turn_intent=turn_intent)


#: How often a fence asks an unreachable store again, while its patience lasts.
RETRY_EVERY = 0.2


class LeaseFence:
    """The fence of one claim (`run_id` under `token`), on the engine's clock."""

    def __init__(self, launches: LaunchBook, run_id: str, token: str, clock: Clock,
                 lease_seconds: float) -> None:
        self._launches = launches
        self._run_id = run_id
        self._token = token
        self._clock = clock
        # A third of the lease: kept in hand before answering locally, and how long an
        # unreachable store is waited for.
        self.margin = renew_every(lease_seconds)
        self._lock = threading.Lock()  # the keeper's thread updates what the run reads
        self._running = False
        self._until = 0.0

    @property
    def token(self) -> str:
        """The claim token this fence guards."""
        return self._token

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
                held = self._launches.claim_left(self._run_id, self._token)
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
