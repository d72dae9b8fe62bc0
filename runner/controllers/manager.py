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

import contextlib
import logging
import math
import random
import secrets
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from runner.backoff import backoff_delay as backoff_delay
from runner.clock import Clock, SystemClock, iso
from runner.deadline import run_with_deadline
from runner.errors import InputError, NotFoundError, PermanentError, TemporaryError
from runner.leases import Renewer
from runner.store import LostRace, StoreError
from runner.store.controller_interface import ControllerStore, QueueItem, Resource

from .conditions import Result, apply_patch
from .context import ReconcileContext, Workflows
from .definitions import Controller
from .effects import Effects
from .workflows import ChildWorkflows

log = logging.getLogger(__name__)
MAX_ERROR_BYTES = 2000
#: A reconcile timeout bounds how long user code really runs, so it is measured on
#: the system clock: a test's FakeClock cannot make a hung reconciler return.
_USER_CODE_CLOCK = SystemClock()


@dataclass
class ManagerConfig:
    workers: int = 4
    per_controller: dict[str, int] = field(default_factory=dict)
    lease_seconds: float = 30.0
    idle_poll: float = 0.25
    shutdown_grace: float = 10.0
    backoff_base: float = 1.0
    backoff_cap: float = 300.0


def _bounded(text: str) -> str:
    data = " ".join(text.split()).encode()
    return data[:MAX_ERROR_BYTES].decode(errors="ignore")


@dataclass(frozen=True)
class _Failure:
    """A failed pass: its message, and what user code raised (None for a timeout or a
    result of the wrong type), which decides when the key is tried again."""

    message: str
    raised: BaseException | None = None


def _requested_delay(raised: BaseException | None) -> float | None:
    """The delay a TemporaryError asks for; None (use the backoff) for any other
    exception or a delay that is not a finite, non-negative number of seconds."""
    if not isinstance(raised, TemporaryError):
        return None
    delay = raised.delay
    if isinstance(delay, bool) or not isinstance(delay, int | float):
        return None
    return float(delay) if math.isfinite(delay) and delay >= 0 else None


@dataclass(eq=False)
class _Claim:
    """A claimed key being worked on; the renewer keeps its lease alive."""

    item: QueueItem
    cancelled: threading.Event
    lost: threading.Event = field(default_factory=threading.Event)


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
        self._active: dict[tuple[str, str], threading.Event] = {}
        # Every held claim renewed at least every lease/3: checked every lease/9,
        # renewed once 2/9 of the lease has passed since the last renewal.
        every = max(self.config.lease_seconds / 3, 0.05)
        self._renewer: Renewer[_Claim] = Renewer(
            self.clock, self._renew, self._lost, renew_every=every * 2 / 3, tick=every / 3,
            name="wfrun-lease-renewer")
        self.passes = 0

    # -- resources ---------------------------------------------------------------------
    def controller(self, name: str) -> Controller:
        try:
            return self.controllers[name]
        except KeyError:
            raise NotFoundError(f"no controller named '{name}'; `wfrun controllers` lists "
                                "them") from None

    def apply(self, controller: str, key: str, spec: Any) -> Resource:
        ctl = self.controller(controller)
        checked = ctl.check_spec(spec)
        # `initial_status` is the controller's own part of status until the first pass;
        # observed_generation 0 says "never reconciled".
        initial = {"observed_generation": 0, "conditions": [],
                   "controller_status": dict(ctl.initial_status), "workflow_run": None}
        try:
            resource = self.store.resources.apply(controller, key, checked, initial)
        except ValueError as exc:
            raise InputError(str(exc)) from None
        self.store.controller_events.append(controller, key, "resource_applied",
                                            {"generation": resource.generation})
        return resource

    def enqueue(self, controller: str, key: str, delay: float = 0.0) -> None:
        self.store.reconcile_queue.enqueue(controller, key, delay=delay)

    def delete(self, controller: str, key: str) -> Resource:
        resource = self.store.resources.request_deletion(controller, key)
        if resource is None:
            raise NotFoundError(f"no {controller} resource '{key}'")
        self.store.controller_events.append(controller, key, "deletion_requested", {})
        return resource

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
        # With per-controller limits, counting busy slots and claiming must be one step,
        # or two workers both see a free slot and both claim.
        with self._claim_lock if self.config.per_controller else contextlib.nullcontext():
            eligible = self._eligible()
            if eligible is not None and not eligible:
                return False
            rid = secrets.token_hex(8)
            try:
                # The started record commits with the claim: one write, not two.
                item = self.store.reconcile_queue.claim_next(
                    runner_id=self.runner_id, lease_seconds=self.config.lease_seconds,
                    controllers=eligible,
                    claim_event=("reconcile_started", {"runner": self.runner_id}, rid))
            except StoreError as exc:
                log.warning("claim failed: %s", exc)
                return False
            if item is None:
                return False
            slot = (item.controller, item.key)
            with self._lock:
                self._active[slot] = threading.Event()
        try:
            self._process(item, rid)
        finally:
            with self._lock:
                self._active.pop(slot, None)
        return True

    def run_until_idle(self, max_passes: int = 1000) -> int:
        """Process available work on this thread until none is left (for tests, --once)."""
        done = 0
        while done < max_passes and self.reconcile_one():
            done += 1
        return done

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
        end = self.clock.monotonic() + (self.config.shutdown_grace if grace is None else grace)
        for t in self._threads:
            t.join(timeout=max(end - self.clock.monotonic(), 0.0))
        self._threads = [t for t in self._threads if t.is_alive()]
        if self.children is not None:
            self.children.shutdown(grace=1.0)

    def _worker(self) -> None:
        while not self._stop.is_set():
            try:
                worked = self.reconcile_one()
            except Exception:  # a worker never dies; the pass already recorded its error
                log.exception("reconcile worker error")
                worked = False
            if not worked:
                self._stop.wait(self.config.idle_poll)

    # -- one pass ----------------------------------------------------------------------------
    def _process(self, item: QueueItem, rid: str) -> None:
        assert item.claim_token is not None
        token = item.claim_token
        q, events = self.store.reconcile_queue, self.store.controller_events
        ctl = self.controllers.get(item.controller)
        if ctl is None:
            q.complete(item.controller, item.key, token, outcome="requeue_after", delay=60.0,
                       error="no such controller in this manager",
                       events=[("reconcile_skipped", {"reason": "unknown controller"}, rid)])
            return
        resource = self.store.resources.get(item.controller, item.key)
        if resource is None:
            q.complete(item.controller, item.key, token, outcome="settled",
                       events=[("reconcile_skipped", {"reason": "no resource"}, rid)])
            return
        with self._lock:
            cancelled = self._active.setdefault((item.controller, item.key), threading.Event())
            self.passes += 1
        read = {"generation": resource.generation, "resource_version": resource.resource_version,
                "attempt": item.consecutive_errors + 1}
        claim = _Claim(item, cancelled)
        self._renewer.add(claim)
        try:
            result = self._call(ctl, resource, rid, cancelled)
        finally:
            self._renewer.remove(claim)
        if claim.lost.is_set():
            events.append(item.controller, item.key, "reconcile_lost", {}, reconcile_id=rid)
            return
        if isinstance(result, _Failure):
            self._fail(item, token, read, result, rid)
            return
        self._finish(item, token, ctl, resource, result, rid)

    def _fail(self, item: QueueItem, token: str, read: dict[str, Any], failure: _Failure,
              rid: str) -> None:
        """Record a failed pass and schedule the next one as its exception asks."""
        q = self.store.reconcile_queue
        message = _bounded(failure.message)
        if isinstance(failure.raised, PermanentError):
            # Settled, not retried: retrying cannot help until the spec changes or
            # someone wakes the key (a wake-up during this pass still gets its pass).
            # The row goes away, so the event is where the error stays visible.
            q.complete(item.controller, item.key, token, outcome="settled", error=message,
                       events=[("reconcile_failed", {**read, "error": message,
                                                     "retry": "never", "retry_in": None},
                                rid)])
            return
        delay = _requested_delay(failure.raised)
        retry = "delay"
        if delay is None:
            retry = "backoff"
            delay = backoff_delay(item.consecutive_errors + 1, self.config.backoff_base,
                                  self.config.backoff_cap, self.rng)
        q.complete(item.controller, item.key, token, outcome="error", delay=delay,
                   error=message,
                   events=[("reconcile_failed", {**read, "error": message, "retry": retry,
                                                 "retry_in": round(delay, 3)}, rid)])

    def _call(self, ctl: Controller, resource: Resource, rid: str,
              cancelled: threading.Event) -> Result | _Failure:
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
        if timeout is None:
            try:  # no timeout to enforce: run on this worker's thread
                result = ctl.reconcile(ctx, resource)
            except BaseException as exc:  # user code: report, never crash the worker
                raised = exc
        else:
            call = run_with_deadline(lambda: ctl.reconcile(ctx, resource),
                                     deadline=_USER_CODE_CLOCK.monotonic() + timeout,
                                     monotonic=_USER_CODE_CLOCK.monotonic)
            if call.ending == "timed_out":
                cancelled.set()
                return _Failure(f"reconcile timed out after {timeout:g}s")
            result, raised = call.value, call.error
        if raised is not None:  # kept whole: its type decides the retry
            return _Failure(f"{type(raised).__name__}: {raised}", raised)
        if not isinstance(result, Result):
            return _Failure("reconcile must return ctx.settled(), ctx.requeue() or "
                            f"ctx.requeue_after(), not {type(result).__name__}")
        return result

    # -- claim renewal (runner.leases.Renewer, on this manager's clock) -------------------
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

    def _finish(self, item: QueueItem, token: str, ctl: Controller, resource: Resource,
                result: Result, rid: str) -> None:
        q, events, resources = (self.store.reconcile_queue, self.store.controller_events,
                                self.store.resources)
        c, k = item.controller, item.key
        try:
            status = apply_patch(resource.status, result.patch,
                                 generation=resource.generation, now=iso(self.clock.now()))
            updated = resources.update_status(c, k, resource.resource_version, status)
        except ValueError as exc:
            message = _bounded(str(exc))
            q.complete(c, k, token, outcome="error", delay=self.config.backoff_base,
                       error=message, events=[("reconcile_failed", {"error": message}, rid)])
            return
        if isinstance(updated, LostRace):
            # The resource changed while we worked: our status is stale; look again.
            q.complete(c, k, token, outcome="requeue",
                       events=[("reconcile_conflict",
                                {"read_version": resource.resource_version}, rid)])
            return
        if result.patch.finalizers is not None:
            fin = resources.set_finalizers(c, k, updated.resource_version,
                                           result.patch.finalizers)
            if isinstance(fin, LostRace):
                q.complete(c, k, token, outcome="requeue",
                           events=[("reconcile_conflict", {"on": "finalizers"}, rid)])
                return
            updated = fin
        if (result.kind == "settled" and updated.deletion_timestamp is not None
                and not updated.finalizers):
            deleted = resources.delete(c, k, updated.resource_version)
            if deleted is True:
                events.append(c, k, "resource_deleted", {}, reconcile_id=rid)
                return
            q.complete(c, k, token, outcome="requeue",
                       events=[("reconcile_conflict", {"on": "delete"}, rid)])
            return
        finished = [("reconcile_finished", {"result": result.kind, "delay": result.delay,
                                            "generation": resource.generation}, rid)]
        if result.kind == "requeue":
            q.complete(c, k, token, outcome="requeue", events=finished)
        elif result.kind == "requeue_after":
            q.complete(c, k, token, outcome="requeue_after", delay=result.delay,
                       events=finished)
        elif ctl.resync:
            q.complete(c, k, token, outcome="requeue_after", delay=ctl.resync, events=finished)
        else:
            q.complete(c, k, token, outcome="settled", events=finished)
