"""The controller manager: workers, claims, timeouts, retries, lifecycle records.

Each pass claims one (controller, key) from the durable keyed queue, reads the
resource *immediately before* calling user code (level-based: the reconciler
sees current state, never an event), renews its claim on its own timer, and
applies the returned status with compare-and-swap against the version it read:
a conflict discards the stale status and queues another pass. Nothing needed for
recovery lives in memory: stopping the manager leaves queue rows whose claims
simply expire.

A failing pass is retried according to what the reconciler raised (kopf's
convention, checked by type, never by message text):

    TemporaryError(msg, delay=N)   again after exactly N seconds
    PermanentError                 not again: the key settles with the error in its
                                   events until the resource changes or is woken
    anything else (and timeouts)   backoff 1 s x2 up to 5 min, with jitter
"""

from __future__ import annotations

import collections
import logging
import math
import random
import secrets
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from runner._deadline import run_with_deadline
from runner._leases import LEASE_SECONDS, Renewer, renew_every
from runner.clock import Clock, SystemClock
from runner.store import LostRace, StoreError
from runner.store._controller_interface import (
    ClaimedPass,
    ControllerStore,
    PassEnd,
    PassResult,
    QueueItem,
    Resource,
)

from ._conditions import Result
from ._context import ReconcileContext, Workflows
from ._definitions import Controller
from ._effects import Effects
from ._groupcommit import GroupCommit
from ._lanes import DEFAULT_LANES, Habits, Lanes
from ._outcomes import Failure, PassOutcomes, bounded_error
from ._resources import apply_resource, request_deletion, unknown_controller
from ._workflows import ChildWorkflows

log = logging.getLogger(__name__)
#: Where a crash test may stop the process (`ControllerManager.crash`): a batch of
#: keys claimed, none reconciled yet; and the ends of passes collected for a group
#: commit, not yet committed.
MANAGER_CRASH_POINTS = ("after_batch_claim", "before_group_commit")
#: A reconcile timeout bounds how long user code really runs, so it is measured on
#: the system clock: a test's FakeClock cannot make a hung reconciler return.
_USER_CODE_CLOCK = SystemClock()


@dataclass
class ManagerConfig:
    workers: int = 4
    per_controller: dict[str, int] = field(default_factory=dict)
    lease_seconds: float = LEASE_SECONDS
    idle_poll: float = 0.25
    shutdown_grace: float = 10.0
    backoff_base: float = 1.0
    backoff_cap: float = 300.0
    #: Keys one worker claims in one transaction (1 with per-controller limits, so a
    #: waiting key never holds a controller's slot).
    claim_batch: int = 16
    #: Workers running the manager's own Python at once (runner/controllers/_lanes.py);
    #: user code runs outside them, so every worker can be in a reconciler at once.
    lanes: int = DEFAULT_LANES


@dataclass(eq=False)
class _Claim:
    """A claimed key being worked on; the renewer keeps its lease alive."""

    item: QueueItem
    cancelled: threading.Event
    lost: threading.Event = field(default_factory=threading.Event)


@dataclass(eq=False)
class _Work:
    """A claimed key waiting for (or in) its pass; `fresh`: its resource row was read by
    the claim's transaction just now."""

    claimed: ClaimedPass
    claim: _Claim
    rid: str
    fresh: bool


class ControllerManager:
    def __init__(self, store: ControllerStore, controllers: Iterable[Controller], *,
                 runner_id: str | None = None, clock: Clock | None = None,
                 config: ManagerConfig | None = None, children: ChildWorkflows | None = None,
                 rng: random.Random | None = None,
                 crash: Callable[[str], None] | None = None) -> None:
        self.store = store
        self.controllers = {c.name: c for c in controllers}
        self.runner_id = runner_id or f"manager-{secrets.token_hex(4)}"
        self.clock = clock or SystemClock()
        self.config = config or ManagerConfig()
        self.children = children
        self.rng = rng or random.Random()
        # A test seam: called at each of `effects.CRASH_POINTS` (a crash test kills
        # the process there); the default does nothing.
        self.crash: Callable[[str], None] = crash or (lambda _point: None)
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()
        self._claim_lock = threading.Lock()
        self._ready: collections.deque[_Work] = collections.deque()  # claimed, waiting
        self._wake = threading.Condition()
        self._active: dict[tuple[str, str], threading.Event] = {}
        self.lanes = Lanes(max(1, min(self.config.lanes, self.config.workers)))
        self._poller = False  # an idle worker is watching the store (under _wake)
        self.habits = Habits()  # whether each controller's calls block (lanes.py)
        # Every held claim renewed at least every lease/3 (`renew_every`): checked
        # every lease/9, renewed once 2/9 of the lease has passed since the last renewal.
        every = max(renew_every(self.config.lease_seconds), 0.05)
        self._renewer: Renewer[_Claim] = Renewer(
            self.clock, self._renew, self._lost, renew_every=every * 2 / 3, tick=every / 3,
            name="wfrun-lease-renewer")
        self.passes = 0
        self.claims = 0  # claim transactions that took at least one key
        # The ends of passes finishing together on several workers share one commit.
        self.ends: GroupCommit[PassEnd, PassResult] = GroupCommit(
            self._commit_ends, done=self._ended, failed=self._not_ended)
        self.outcomes = PassOutcomes(store, clock=self.clock, rng=self.rng,
                                     backoff_base=self.config.backoff_base,
                                     backoff_cap=self.config.backoff_cap, submit=self._end)

    # -- resources ---------------------------------------------------------------------
    def controller(self, name: str) -> Controller:
        try:
            return self.controllers[name]
        except KeyError:
            raise unknown_controller(name, self.controllers) from None

    def apply(self, controller: str, key: str, spec: Any) -> Resource:
        ctl = self.controller(controller)
        return apply_resource(self.store, controller, key, spec, schema=ctl.spec_schema,
                              initial_status=ctl.initial_status)

    def enqueue(self, controller: str, key: str, delay: float = 0.0) -> None:
        self.store.reconcile_queue.enqueue(controller, key, delay=delay)

    def delete(self, controller: str, key: str) -> Resource:
        return request_deletion(self.store, controller, key)

    # -- running -------------------------------------------------------------------------
    def _eligible(self) -> list[str] | None:
        limits = self.config.per_controller
        if not limits:
            return list(self.controllers)
        with self._lock:
            busy: dict[str, int] = {}
            for ctl, _ in self._active:
                busy[ctl] = busy.get(ctl, 0) + 1
        return [n for n in self.controllers if busy.get(n, 0) < limits.get(n, 1_000_000)]

    def reconcile_one(self) -> bool:
        """Claim and process one available key; False when nothing is available."""
        work = self._next(limit=1)
        if work is not None:
            self._run(work)
        self.ends.flush()
        return work is not None

    def run_until_idle(self, max_passes: int = 1000) -> int:
        """Process available work on this thread until none is left (for tests, --once)."""
        done = 0
        while done < max_passes:
            work = self._next(limit=min(self._batch_size(), max_passes - done))
            if work is None:
                break
            self._run(work)
            done += 1
        self.ends.flush()  # every pass run here is committed when this returns
        if not any(t.is_alive() for t in self._threads):
            self._release_ready()
        return done

    def _batch_size(self) -> int:
        return 1 if self.config.per_controller else max(1, self.config.claim_batch)

    def _next(self, limit: int, *, worker: bool = False) -> _Work | None:
        """The next claimed key to reconcile: one another worker's batch claim left
        ready, or the first of a new batch claimed now (the rest are left ready for
        the other workers, which are woken). None when nothing is available."""
        if worker and self._stop.is_set():
            return None  # a stopping manager hands its ready keys back instead
        with self._lock:
            work = self._ready.popleft() if self._ready else None
            low = len(self._ready) < max(self.config.workers, 1)
        if work is not None:
            # Running low: claim the next batch now, while the other workers still have
            # keys, instead of all of them waiting on one claim's commit later.
            if worker and low and self._claim_lock.acquire(blocking=False):
                try:
                    self._fill(limit)
                finally:
                    self._claim_lock.release()
            return work
        # One claimer at a time; the others wait here, then find its batch ready. With
        # per-controller limits, counting busy slots and claiming must also be one step,
        # or two workers both see a free slot and both claim.
        with self._claim_lock:
            with self._lock:
                if self._ready:
                    return self._ready.popleft()
            if worker and self._stop.is_set():
                return None
            batch = self._claim(limit)
            if not batch:
                return None
            self._hold(batch[1:], batch)
        return batch[0]

    def _fill(self, limit: int) -> None:
        """Claim a batch straight into the ready keys (under the claim lock)."""
        if not self._stop.is_set():
            batch = self._claim(limit)
            if batch:
                self._hold(batch, batch)

    def _hold(self, ready: list[_Work], batch: list[_Work]) -> None:
        self.crash("after_batch_claim")
        for work in batch:  # held (and renewed) while they wait their turn
            self._renewer.add(work.claim)
        if ready:
            with self._lock:
                self._ready.extend(ready)
            with self._wake:  # as many idle workers as there are keys for them
                self._wake.notify(len(ready))

    def _claim(self, limit: int) -> list[_Work]:
        """Claim up to `limit` keys in one transaction (each with its started record)."""
        eligible = self._eligible()
        if eligible is not None and not eligible:
            return []
        rids: dict[tuple[str, str], str] = {}

        def started(item: QueueItem) -> tuple[str, dict[str, Any], str]:
            rid = rids[(item.controller, item.key)] = secrets.token_hex(8)
            return ("reconcile_started", {"runner": self.runner_id}, rid)

        try:
            claimed = self.store.reconcile_queue.claim_batch(
                runner_id=self.runner_id, lease_seconds=self.config.lease_seconds,
                limit=limit, controllers=eligible, claim_event=started)
        except StoreError as exc:
            log.warning("claim failed: %s", exc)
            return []
        batch = []
        with self._lock:
            self.claims += bool(claimed)
            for i, c in enumerate(claimed):
                cancelled = threading.Event()
                self._active[(c.item.controller, c.item.key)] = cancelled
                batch.append(_Work(c, _Claim(c.item, cancelled),
                                   rids[(c.item.controller, c.item.key)], fresh=i == 0))
        return batch

    def _run(self, work: _Work) -> None:
        """Reconcile one claimed key on this thread."""
        claim = work.claim
        item = claim.item
        try:
            if claim.lost.is_set():  # taken over while it waited: not ours to run
                self.store.controller_events.append(item.controller, item.key,
                                                    "reconcile_lost", {},
                                                    reconcile_id=work.rid)
                return
            # The first key of a batch uses the row its claim's transaction read; a key
            # that waited its turn is read again just before its reconciler is called.
            resource = (work.claimed.resource if work.fresh else
                        self.store.resources.get(item.controller, item.key))
            self._process(claim, resource, work.rid)
        finally:
            self._renewer.remove(claim)
            with self._lock:
                self._active.pop((item.controller, item.key), None)

    def _release_ready(self) -> None:
        """Hand back claimed keys nobody will reconcile now (the manager is stopping)."""
        with self._lock:
            rest, self._ready = list(self._ready), collections.deque()
            for work in rest:
                self._active.pop((work.claim.item.controller, work.claim.item.key), None)
        if not rest:
            return
        ends = []
        for work in rest:
            self._renewer.remove(work.claim)
            item = work.claim.item
            assert item.claim_token is not None
            ends.append(PassEnd(item.controller, item.key, item.claim_token,
                                outcome="requeue",
                                events=[("reconcile_released", {"reason": "stopping"},
                                         work.rid)]))
        try:
            self.store.reconcile_queue.finish_passes(ends)
        except StoreError as exc:  # the claims expire after their lease instead
            log.warning("releasing claims failed: %s", exc)

    def _commit_ends(self, ends: Sequence[PassEnd]) -> list[PassResult]:
        self.crash("before_group_commit")
        return self.store.reconcile_queue.finish_passes(ends)

    def _end(self, end: PassEnd) -> None:
        """End one pass (status CAS, events, queue completion) in the next group commit."""
        self.ends.submit(end)

    def _ended(self, end: PassEnd, result: PassResult) -> None:
        if isinstance(result, ValueError):
            # A status the store refuses (too big, not JSON): the pass fails, retried later.
            message = bounded_error(str(result))
            self.store.reconcile_queue.complete(
                end.controller, end.key, end.claim_token, outcome="error",
                delay=self.config.backoff_base, error=message,
                events=[("reconcile_failed", {"error": message},
                         end.events[0][2] if end.events else None)])
        elif isinstance(result, LostRace):
            log.info("pass of %s/%s ended after its claim was taken over; nothing written",
                     end.controller, end.key)

    @staticmethod
    def _not_ended(ends: Sequence[PassEnd], exc: Exception) -> None:
        log.warning("%d pass end(s) not committed (%s); their claims expire and the keys "
                    "are reconciled again", len(ends), exc)

    def start(self) -> None:
        self._stop.clear()
        for i in range(max(self.config.workers, 1)):
            t = threading.Thread(target=self._worker, daemon=True, name=f"wfrun-reconcile-{i}")
            t.start()
            self._threads.append(t)

    def stop(self, grace: float | None = None) -> None:
        """Stop claiming, cancel active passes, wait a fixed shutdown period."""
        self._stop.set()
        with self._lock:
            for event in self._active.values():
                event.set()
        with self._wake:
            self._wake.notify_all()
        end = self.clock.monotonic() + (self.config.shutdown_grace if grace is None else grace)
        for t in self._threads:
            t.join(timeout=max(end - self.clock.monotonic(), 0.0))
        self._threads = [t for t in self._threads if t.is_alive()]
        # Ends handed in by the workers are committed before stop returns, and keys
        # claimed for them but not reached are handed back.
        self.ends.flush(max(end - self.clock.monotonic(), 0.0))
        if not self._threads:
            self._release_ready()
        if self.children is not None:
            self.children.shutdown(grace=1.0)

    def _worker(self) -> None:
        lanes = self.lanes
        while not self._stop.is_set():
            if not lanes.held():
                lanes.enter()  # kept from pass to pass while there is work
            try:
                work = self._next(self._batch_size(), worker=True)
                if work is not None:
                    self._run(work)
            except Exception:  # a worker never dies; the pass already recorded its error
                log.exception("reconcile worker error")
                work = None
            if work is None:
                lanes.leave()  # an idle worker holds no lane
                self._idle()
        lanes.leave()

    def _idle(self) -> None:
        """Wait for work: one idle worker looks at the store again every `idle_poll`;
        the others sleep until a claimed batch has keys for them (or stop()), so an
        idle manager makes one claim attempt per period, not one per worker."""
        with self._wake:
            if self._stop.is_set():
                return
            if self._poller:
                self._wake.wait()
                return
            self._poller = True
            try:
                self._wake.wait(self.config.idle_poll)
            finally:
                self._poller = False

    # -- one pass ----------------------------------------------------------------------------
    def _process(self, claim: _Claim, resource: Resource | None, rid: str) -> None:
        item = claim.item
        assert item.claim_token is not None
        token = item.claim_token
        ctl = self.controllers.get(item.controller)
        if ctl is None:
            self._renewer.remove(claim)
            self._end(PassEnd(item.controller, item.key, token, outcome="requeue_after",
                              delay=60.0, error="no such controller in this manager",
                              events=[("reconcile_skipped", {"reason": "unknown controller"},
                                       rid)]))
            return
        if resource is None:
            self._renewer.remove(claim)
            self._end(PassEnd(item.controller, item.key, token, outcome="settled",
                              events=[("reconcile_skipped", {"reason": "no resource"}, rid)]))
            return
        with self._lock:
            self.passes += 1
        read = {"generation": resource.generation, "resource_version": resource.resource_version,
                "attempt": item.consecutive_errors + 1}
        try:
            result = self._call(ctl, resource, rid, claim.cancelled)
        finally:
            self._renewer.remove(claim)
        if claim.lost.is_set():
            self.store.controller_events.append(item.controller, item.key, "reconcile_lost",
                                                {}, reconcile_id=rid)
            return
        if isinstance(result, Failure):
            self.outcomes.failed(item, token, read, result, rid)
            return
        self.outcomes.finished(item, token, ctl, resource, result, rid)

    def _call(self, ctl: Controller, resource: Resource, rid: str,
              cancelled: threading.Event) -> Result | Failure:
        def record(kind: str, payload: dict[str, Any]) -> None:
            self.store.controller_events.append(resource.controller, resource.key, kind,
                                                payload, reconcile_id=rid)

        ctx = ReconcileContext(resource=resource,
                               effects=Effects(self.store, resource, record, self.crash),
                               workflows=Workflows(self.children, resource), reconcile_id=rid,
                               cancelled=cancelled)
        timeout = ctl.timeout
        raised: BaseException | None = None
        result: Any = None
        # User code that blocks hands its lane over; code that returns at once keeps it
        # (and is taken over if it blocks after all: lanes.py).
        lane = self.lanes.held()
        hand_over = lane and self.habits.blocks(ctl.name)
        if hand_over:
            self.lanes.leave()
        elif lane:
            self.lanes.away()
        # How long the reconciler itself ran (on whichever thread), not the hand-off to
        # a pooled thread: a no-op under a timeout is still a call that returns at once.
        took = [math.inf]

        def reconcile() -> Any:
            started = _USER_CODE_CLOCK.monotonic()
            try:
                return ctl.reconcile(ctx, resource)
            finally:
                took[0] = _USER_CODE_CLOCK.monotonic() - started

        try:
            if timeout is None:
                try:  # no timeout to enforce: run on this worker's thread
                    result = reconcile()
                except BaseException as exc:  # user code: report, never crash the worker
                    raised = exc
            else:
                call = run_with_deadline(reconcile,
                                         deadline=_USER_CODE_CLOCK.monotonic() + timeout,
                                         monotonic=_USER_CODE_CLOCK.monotonic)
                if call.ending == "timed_out":
                    cancelled.set()
                    return Failure(f"reconcile timed out after {timeout:g}s")
                result, raised = call.value, call.error
        finally:
            self.habits.record(ctl.name, took[0])  # a timed-out call: inf, it blocked
            if hand_over:
                self.lanes.enter()
            elif lane:
                self.lanes.back()
        if raised is not None:  # kept whole: its type decides the retry
            return Failure(f"{type(raised).__name__}: {raised}", raised)
        if not isinstance(result, Result):
            return Failure("reconcile must return ctx.settled(), ctx.requeue() or "
                            f"ctx.requeue_after(), not {type(result).__name__}")
        return result

    # -- claim renewal (runner._leases.Renewer, on this manager's clock) -------------------
    def _renew(self, claim: _Claim) -> bool | None:
        item = claim.item
        assert item.claim_token is not None
        try:
            renewed = self.store.reconcile_queue.renew(item.controller, item.key,
                                                       item.claim_token,
                                                       lease_seconds=self.config.lease_seconds)
        except StoreError:
            return None  # a busy store: the next tick tries again
        return not isinstance(renewed, LostRace)

    @staticmethod
    def _lost(claim: _Claim) -> None:
        """Taken over or expired: the pass is cancelled and writes nothing."""
        claim.lost.set()
        claim.cancelled.set()
