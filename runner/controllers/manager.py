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
import queue
import random
import secrets
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from runner.clock import Clock, SystemClock, iso
from runner.errors import InputError, NotFoundError, PermanentError, TemporaryError
from runner.store import LostRace, StoreError
from runner.store.controller_interface import ControllerStore, QueueItem, Resource

from .conditions import Result, apply_patch
from .context import ReconcileContext, Workflows
from .definitions import Controller
from .effects import Effects
from .workflows import ChildWorkflows

log = logging.getLogger(__name__)
MAX_ERROR_BYTES = 2000


@dataclass
class ManagerConfig:
    workers: int = 4
    per_controller: dict[str, int] = field(default_factory=dict)
    lease_seconds: float = 30.0
    idle_poll: float = 0.25
    shutdown_grace: float = 10.0
    backoff_base: float = 1.0
    backoff_cap: float = 300.0


def backoff_delay(errors: int, base: float, cap: float, rng: random.Random) -> float:
    """base x 2^(errors-1), capped, with jitter d/2 + U(0, d/2) so retries spread out."""
    d = min(cap, base * (2 ** max(errors - 1, 0)))
    return float(d / 2 + rng.uniform(0, d / 2))


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


@dataclass
class _Claim:
    """A claimed key being worked on; the renewer keeps its lease alive."""

    item: QueueItem
    cancelled: threading.Event
    lost: threading.Event = field(default_factory=threading.Event)
    renewed_at: float = field(default_factory=time.monotonic)


class _CallPool:
    """Reusable daemon threads for reconcile calls that have a timeout.

    A pass hands its call to an idle thread and waits up to the timeout. Python
    cannot kill a thread, so a call that hangs is abandoned (its thread rejoins the
    pool only if the call ever returns). Reusing threads instead of starting one per
    pass keeps the per-pass cost down; idle threads exit after `idle_exit` seconds.
    """

    def __init__(self, idle_exit: float = 10.0) -> None:
        self.idle_exit = idle_exit
        self._lock = threading.Lock()
        self._idle: list[queue.SimpleQueue[Callable[[], None]]] = []

    def run(self, fn: Callable[[], None], timeout: float) -> bool:
        """Run `fn` on a pooled thread; False if it did not return within `timeout`."""
        done = threading.Event()
        with self._lock:
            jobs = self._idle.pop() if self._idle else None
        if jobs is None:
            jobs = queue.SimpleQueue()
            threading.Thread(target=self._loop, args=(jobs,), daemon=True,
                             name="wfrun-reconcile-call").start()

        def job() -> None:
            try:
                fn()
            finally:
                with self._lock:  # idle again before the caller wakes, so it can reuse us
                    self._idle.append(jobs)
                done.set()

        jobs.put(job)
        return done.wait(timeout)

    def _loop(self, jobs: queue.SimpleQueue[Callable[[], None]]) -> None:
        while True:
            try:
                job = jobs.get(timeout=self.idle_exit)
            except queue.Empty:
                with self._lock:
                    if jobs in self._idle:
                        self._idle.remove(jobs)
                        return
                continue  # taken by a caller that is about to hand over a job
            job()


_CALLS = _CallPool()


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
        self._claims: dict[tuple[str, str], _Claim] = {}
        self._renewer: threading.Thread | None = None
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
        slot = (item.controller, item.key)
        claim = _Claim(item, cancelled)
        self._hold(slot, claim)
        try:
            result = self._call(ctl, resource, rid, cancelled)
        finally:
            with self._lock:
                self._claims.pop(slot, None)
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
        box: dict[str, Any] = {}

        def target() -> None:
            try:
                box["result"] = ctl.reconcile(ctx, resource)
            except BaseException as exc:  # user code: report, never crash the worker
                box["error"] = exc  # kept whole: its type decides the retry

        timeout = ctl.timeout
        if timeout is None:
            target()  # no timeout to enforce: run on this worker's thread
        elif not _CALLS.run(target, timeout):
            cancelled.set()
            return _Failure(f"reconcile timed out after {timeout:g}s")
        if "error" in box:
            raised: BaseException = box["error"]
            return _Failure(f"{type(raised).__name__}: {raised}", raised)
        result = box.get("result")
        if not isinstance(result, Result):
            return _Failure("reconcile must return ctx.settled(), ctx.requeue() or "
                            f"ctx.requeue_after(), not {type(result).__name__}")
        return result

    # -- claim renewal -----------------------------------------------------------------------
    def _hold(self, slot: tuple[str, str], claim: _Claim) -> None:
        """Register a claim with the renewer (one thread per manager, started on demand)."""
        with self._lock:
            self._claims[slot] = claim
            if self._renewer is None:
                self._renewer = threading.Thread(target=self._renew_loop, daemon=True,
                                                 name="wfrun-lease-renewer")
                self._renewer.start()

    def _renew_loop(self) -> None:
        """Renew every held claim at least every lease/3, on this thread's own timer;
        a renewal that loses (taken over, expired) cancels its pass. Exits when no claim
        is held; the next claim starts it again."""
        every = max(self.config.lease_seconds / 3, 0.05)
        while True:
            time.sleep(every / 3)
            now = time.monotonic()
            with self._lock:
                if not self._claims:
                    self._renewer = None
                    return
                due = [c for c in self._claims.values() if now - c.renewed_at >= every * 2 / 3]
            for claim in due:
                item = claim.item
                assert item.claim_token is not None
                try:
                    renewed = self.store.reconcile_queue.renew(
                        item.controller, item.key, item.claim_token,
                        lease_seconds=self.config.lease_seconds)
                except StoreError:
                    continue
                if isinstance(renewed, LostRace):
                    claim.lost.set()
                    claim.cancelled.set()
                else:
                    claim.renewed_at = time.monotonic()

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
