"""Claims: how a runner takes launches from the queue, and gives a lease back.

A runner claims the next launch (`next`), one launch by id (`by_id`: an explicit
resume, a foreground run), or queues a launch claimed in its own commit
(`coordinator.prepare_here`, remembered with `mark_by_id`). A run claimed by id
has no claim loop after it, so its runner pays the owed input scrub when it ends.
After a full or read-only disk refused a bundle, claiming waits (`FaultGate`) so a
host does not spin claiming and releasing the same launch.
"""

from __future__ import annotations

import logging
import math
import threading

from runner.clock import Clock
from runner.errors import ConflictError, InputError, MachineFault, NotFoundError
from runner.store import (
    InputScrub,
    LaunchBook,
    LaunchRecord,
    LostRace,
    NextClaim,
    StoreError,
    StoreUnavailable,
)

log = logging.getLogger(__name__)
HOLD_OFF_SECONDS = 30.0
#: How often a let-go run's lease hand-back asks an unreachable store again.
GIVE_BACK_EVERY = 0.5
#: Claims whose send time is kept for their run's fence (`Claims.sent`); a claim never
#: begun (released at a host's stop) is forgotten once this many wait.
SENT_KEPT = 64


class FaultGate:
    """The last machine fault a runner met; claiming waits until it is old."""

    def __init__(self, clock: Clock, hold_off: float = HOLD_OFF_SECONDS) -> None:
        self.clock = clock
        self.hold_off = hold_off
        self.last: MachineFault | None = None
        self.announce = False  # a host sets it: its log is where the news goes
        # Claiming waits while `clock.monotonic()` is below this: `hold_off` seconds
        # after the last fault (none yet: never).
        self.until = -math.inf

    def say(self, text: str, *args: object) -> None:
        """One line per launch left waiting: a warning in a host's log (`announce`), a
        debug line where a command reports the fault itself (`wfrun start --wait`)."""
        (log.warning if self.announce else log.debug)(text, *args)

    def record(self, fault: MachineFault) -> None:
        self.last, self.until = fault, self.clock.monotonic() + self.hold_off

    def active(self) -> bool:
        """True while the last fault is younger than `hold_off` seconds."""
        return self.clock.monotonic() < self.until


class Claims:
    """One runner's claims on one launch queue."""

    def __init__(self, launches: LaunchBook, runner_id: str, clock: Clock,
                 lease_seconds: float, gate: FaultGate, scrub: InputScrub) -> None:
        self._launches = launches
        self.runner_id = runner_id
        self._clock = clock
        self.lease_seconds = lease_seconds
        self.gate = gate
        self._scrub = scrub
        self.error: StoreUnavailable | None = None  # the last claim the store refused
        self._lock = threading.Lock()
        self._by_id: set[str] = set()  # launches claimed by id, not yet begun
        self._sent: dict[str, float] = {}  # claim token -> when its claim was sent

    def next(self, session_id: str | None) -> LaunchRecord | None:
        """The next claimable launch, claimed; None when there is none, the store is
        unavailable (`error` says why) or claims wait for the disk."""
        at = self._clock.monotonic()  # the claim's send time, for its run's fence (`sent`)
        if at < self.gate.until:
            return None  # the disk refused a bundle moments ago: let the launches wait
        try:
            claimed = self._launches.claim_next(
                runner_id=self.runner_id, session_id=session_id,
                lease_seconds=self.lease_seconds)
        except StoreUnavailable as exc:
            self.error = exc  # busy, full, read-only: `wfrun host --once` says so
            return None
        self.error = None
        if claimed is None:
            self._scrub.flush()  # idle: no activation's input outlives the busy spell
        else:
            self._scrub.tick()
            self.sent(claimed, at)
        return claimed

    def sent(self, record: LaunchRecord | None, at: float) -> None:
        """`record` was claimed here by a statement sent at `at` (the engine's monotonic
        clock): its run's fence answers from the claim's lease until it needs to ask
        (`LeaseFence.held`), as it does from `mark_running`'s, instead of reading the
        row before the bundle's first write."""
        if record is None or record.claim_token is None:
            return
        with self._lock:
            if len(self._sent) >= SENT_KEPT:
                self._sent.clear()
            self._sent[record.claim_token] = at

    def taken(self, record: LaunchRecord) -> tuple[float | None, bool]:
        """What this runner knows of its claim on `record`, asked once when its run
        begins: when the claim was sent (None: not claimed here, `sent`) and whether it
        was claimed by id (`mark_by_id`: no claim loop follows its run)."""
        with self._lock:
            sent = self._sent.pop(record.claim_token or "", None)
            by_id = record.run_id in self._by_id
            self._by_id.discard(record.run_id)
        return sent, by_id

    def next_claim(self) -> NextClaim | None:
        """A claim to take with a run's ending (a host slot's next run); None while
        claims wait for the disk (`next` takes none then either)."""
        if self.gate.active():
            return None
        return NextClaim(runner_id=self.runner_id, lease_seconds=self.lease_seconds)

    def by_id(self, run_id: str, *, dead_runner: str | None = None) -> LaunchRecord:
        """Claim one launch by id (an explicit resume, a foreground run)."""
        result = self._launches.claim(run_id, runner_id=self.runner_id,
                                      lease_seconds=self.lease_seconds,
                                      dead_runner=dead_runner)
        if isinstance(result, LostRace):
            if result.reason == "not_found":
                raise NotFoundError(f"no launch '{run_id}'; `wfrun status` lists launches")
            if result.reason == "lease_active":
                raise ConflictError(f"run '{run_id}' is being run by another process "
                                    f"({result.status}); pause or cancel it there")
            if result.reason == "session_reserved":
                raise ConflictError(f"run '{run_id}' belongs to a session that is running "
                                    f"{result.holder}; resume it after that ends")
            if result.status in ("done", "failed", "cancelled"):
                raise InputError(f"run '{run_id}' already ended ({result.status}); nothing "
                                 "to resume")
            raise ConflictError(f"run '{run_id}' is {result.status}; nothing to resume")
        self.mark_by_id(run_id)
        return result

    def mark_by_id(self, run_id: str) -> None:
        """`run_id` was claimed by id: no claim loop follows its run."""
        with self._lock:
            self._by_id.add(run_id)

    def give_back(self, run_id: str, token: str) -> None:
        """Expire our own lease on `run_id` (fenced by `token`: a claim taken since is
        not touched); a store that does not answer is asked again on a thread every
        GIVE_BACK_EVERY seconds until it does or the lease has run out by itself."""
        if self._give_back_once(run_id, token):
            return
        threading.Thread(target=self._give_back_later, args=(run_id, token), daemon=True,
                         name=f"wfrun-give-back-{run_id}").start()

    def _give_back_once(self, run_id: str, token: str) -> bool:
        """True when the store answered (whether or not the claim was still ours)."""
        try:
            if self._launches.yield_lease(run_id, token):
                log.info("run %s: lease given back (the run is let go)", run_id)
        except StoreError as exc:
            log.debug("run %s: cannot give the lease back yet (%s)", run_id, exc.message)
            return False
        return True

    def _give_back_later(self, run_id: str, token: str) -> None:
        give_up = self._clock.monotonic() + self.lease_seconds
        while self._clock.monotonic() < give_up:
            self._clock.sleep(GIVE_BACK_EVERY)
            if self._give_back_once(run_id, token):
                return
