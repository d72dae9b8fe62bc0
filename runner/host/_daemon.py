"""The standalone host (`wfrun host`): one per project, runs detached work (DESIGN §8).

It holds an advisory lock (`.wfrun/state/host.lock`, naming its pid), reaps the
process groups a dead host left behind (both `_hostlock`), then loops: claim detached queued
launches and parked or abandoned runs (up to `max_runs` at once, on worker threads
kept for the host's life), and run the controller manager beside them. Idle, it
sleeps until a run ends, the store announces a claimable launch (Postgres:
LISTEN/NOTIFY, through `LaunchListener`) or the poll interval passes (SQLite has no
notices: it polls).
SIGINT/SIGTERM parks every in-flight run at a safe point and exits; `once` drains
what is ready and exits. While detached launches wait in the queue (for a free
slot), a watch on their source files logs one line per source that changed
(`_queuewatch`); activation's digest check still decides. With `--processes N` the slots
are shared with N - 1 worker processes forked at start (`fork_workers`, workers.py),
each running this same claim loop (`StandaloneHost.work`) on its own store handle.
"""

from __future__ import annotations

import logging
import os
import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from runner._leases import LEASE_SECONDS
from runner.engine import RunControl, RunOutcome
from runner.engine import _tracing as tracing
from runner.engine._processes import (
    ProcessRegistry,
    registry_for_this_process,
)
from runner.engine._runtypes import Observer
from runner.errors import InputError
from runner.launch._itemwork import ItemWork
from runner.launch._wakeups import LaunchListener
from runner.store import LaunchBook, LaunchRecord, NextClaim, Store, StoreError
from runner.store._wakeups import launch_wakeups
from runner.store.domain._fanout import HOST_TOKEN, HostClaim

from ._hostlock import HOST_CHILDREN, HostLock, host_lock, reap_leftovers
from ._metrics import Forwarded, Metrics, first_claim_wait, take_forwarded
from ._queuewatch import QueuedSourceWatch
from ._workers import (
    EXIT_GRACE,
    Message,
    WorkerPool,
    portable,
    shares,
    store_is_open,
    watch_control,
)
from .runtime._channels import ChannelDeliverer, DeliveryPass, load_channels
from .runtime._coordinators import build_coordinator
from .runtime._errors import translate
from .runtime._local import Workspace

if TYPE_CHECKING:  # loaded when used: a host without them (`--once`, no `--listen`,
    # `--no-controllers`) does not pay for the controller side, the triggers' schedule
    # or an HTTP server
    from runner.controllers import ControllerManager
    from runner.engine import AgentStepExecutor
    from runner.launch._triggers import Scheduled

    from .runtime._triggers import HostTriggers
    from .runtime._webhooks import WebhookServer

log = logging.getLogger(__name__)
__all__ = ["LEASE_SECONDS", "HostLock", "HostReport", "StandaloneHost", "WorkerSettings",
           "fork_workers", "host_lock"]
PARK_DEADLINE = 8.0
CLAIM_RETRY = 1.0  # seconds between claims while the store refuses them
TIMEOUT_JOIN = 15.0  # a post in flight when the host stops (its own timeout is 10 s)
@dataclass
class HostReport:
    """What a host did, as counters only: a host serving runs for weeks holds nothing
    per run (it kept every RunOutcome, outputs included, until it exited)."""

    started: int = 0
    ended: dict[str, int] = field(default_factory=dict)
    failed_to_start: int = 0
    reaped: list[int] = field(default_factory=list)
    reconciles: int = 0
    notifications: int = 0  # channel notifications delivered

    def count(self, outcome: RunOutcome) -> None:
        key = ("waiting for items" if outcome.waits_for_items else "parked") \
            if outcome.parked else outcome.status
        self.ended[key] = self.ended.get(key, 0) + 1

    def counts(self) -> dict[str, int]:
        """Finished runs by how they ended: completed, failed, timed_out, cancelled,
        waiting (at a checkpoint), waiting for items (hosts run its fan-out items) and
        parked (stopped, to be resumed)."""
        return dict(self.ended)


# Called once per launch the host executed: its run id and outcome (None: it failed to
# start; the launch row says why).
RunEnded = Callable[[str, RunOutcome | None], None]


@dataclass(frozen=True)
class WorkerSettings:
    """What a worker process needs to build its own store, executor and claim loop."""

    open_store: Callable[[], Store]
    executor: AgentStepExecutor | None = None  # the host's, copied by the fork
    once: bool = False
    poll: float = 0.5
    durability: str = "full"
    lease_seconds: float = LEASE_SECONDS
    metrics: bool = False  # measure, forwarded to the host (`wfrun host --metrics`)


def fork_workers(ws: Workspace, lock: HostLock, *, processes: int, max_runs: int,
                 settings: WorkerSettings) -> tuple[WorkerPool | None, int]:
    """Fork the host's `processes - 1` worker processes (`wfrun host --processes N`):
    the pool and the host's own share of the `max_runs` slots.

    Called with the host lock held and before this process opens the store or starts
    a thread: SQLite keeps per-process lock state in memory, which a fork would copy
    into the workers wrong (workers.py says more)."""
    split = shares(max_runs, processes)
    if processes == 1:
        return None, split[0]
    if lock.fd is None:
        raise RuntimeError("fork_workers needs the host lock held")
    if store_is_open(ws):
        raise RuntimeError("fork_workers must run before this process opens the store")
    pool = WorkerPool(ws.children_dir, clock=ws.clock)
    # A dead host's groups go before any worker could resume a run beside them.
    pool.reaped = reap_leftovers(lock.path.parent, ws)

    def body(share: int) -> Callable[[Callable[[Message], None], int], None]:
        return lambda send, control: _work_as_worker(ws, settings, share, send, control)

    for share in split[1:]:
        pool.fork(body(share))
    # The host reads their reports once it exists (StandaloneHost.run): until then
    # they wait in the pipes, so a run a worker ends first is still counted.
    return pool, split[0]


def _work_as_worker(ws: Workspace, settings: WorkerSettings, share: int,
                    send: Callable[[Message], None], control: int) -> None:
    """A worker process: its own store and claim loop, reporting to its host."""
    import signal

    store = settings.open_store()
    try:
        worker = StandaloneHost(ws, store, executor=settings.executor, max_runs=share,
                                poll=settings.poll, durability=settings.durability,
                                lease_seconds=settings.lease_seconds,
                                on_run_ended=lambda run_id, outcome: send(
                                    ("ended", run_id, outcome)),
                                registry=registry_for_this_process(ws.children_dir),
                                metrics=Forwarded(send) if settings.metrics else None)
        worker.on_run_started = lambda run_id: send(("started", run_id))
        watch_control(control, worker.stop)
        signal.signal(signal.SIGTERM, lambda _signum, _frame: worker.stop())
        worker.work(once=settings.once)
    except Exception as exc:
        error = translate(exc)
        if error is None:  # a bug: the worker's traceback is the report
            raise
        # A user's error (a damaged store, a full disk): the host stops and says it in
        # its one line, as it does for its own.
        send(("failed", portable(error)))
    finally:
        store.close()
        tracing.flush()  # the worker ends with os._exit: no atexit sends its last spans


def _item_slot(item: HostClaim) -> str:
    """The key of a shared item in the host's running slots (no run id looks like it)."""
    k = item.key
    return f"{HOST_TOKEN}{k.run_id}/{k.node_id}/{k.visit}/{item.index}"


class StandaloneHost:
    def __init__(self, ws: Workspace, store: Store, *,
                 executor: AgentStepExecutor | None = None,
                 manager: ControllerManager | None = None, max_runs: int = 4,
                 poll: float = 0.5, observer: Observer | None = None,
                 durability: str = "full", lease_seconds: float = LEASE_SECONDS,
                 on_run_ended: RunEnded | None = None, lock: HostLock | None = None,
                 pool: WorkerPool | None = None,
                 registry: ProcessRegistry | None = None, listen: str | None = None,
                 metrics: Metrics | None = None) -> None:
        """`listen`: ADDR:PORT for the webhook triggers (runtime/_webhooks.py).
        `lock`: the project's host lock when the caller took it already (before
        forking `pool`, the worker processes, with `fork_workers`); `registry`: where
        shell process groups are recorded (a worker process has its own); `metrics`:
        what the host measures (metrics.py; none by default)."""
        if ws.project_root is None:
            raise InputError("wfrun host needs a project (a folder with .wfrun/); pass --project")
        self.ws = ws
        self.store = store
        self.state_dir = ws.project_root / ".wfrun" / "state"
        self.lock = lock or HostLock(self.state_dir / "host.lock")
        self.pool = pool
        self.metrics = metrics or Metrics()
        if pool is not None:
            pool.on_started, pool.on_ended = self._worker_started, self._run_ended
            pool.on_metric = lambda name, args: take_forwarded(self.metrics, name, args)
            pool.on_failed = lambda _error: self.stop()
        self.processes = registry or ProcessRegistry(self.state_dir / HOST_CHILDREN)
        self.manager = manager
        self.max_runs = max(max_runs, 1)
        self.poll = poll
        # A session's run handed over to this host gives its agent steps back.
        self.coordinator = build_coordinator(ws, store, "host", executor=executor,
                                             observer=self.metrics.observe(observer),
                                             durability=durability,
                                             processes=self.processes,
                                             lease_seconds=lease_seconds)
        self.coordinator.faults.announce = True  # launches a full disk left waiting
        self.coordinator.options.items_on_hosts = True  # shared items: any host's slots
        self.stop_event = threading.Event()
        self._wake = threading.Event()  # a run ended (a slot is free) or the host stops
        self.idle = threading.Event()  # set while the loop sleeps (tests and benches wait on it)
        self._lock = threading.Lock()
        self._running: dict[str, tuple[threading.Event, RunControl]] = {}  # set: it ended
        self._work: queue.SimpleQueue[tuple[LaunchRecord | HostClaim, RunControl] | None] = \
            queue.SimpleQueue()
        # Items of shared fan-out nodes of any run, in slots no launch wants (ADR 0008).
        self.items: ItemWork = self.coordinator.host_items()
        self._workers: list[threading.Thread] = []
        self.report = HostReport()
        self.on_run_ended = on_run_ended
        self.on_run_started: Callable[[str], None] | None = None
        self.sources = QueuedSourceWatch(ws, self.coordinator.book, poll)
        self._claim_error_logged: str | None = None
        self.listener: LaunchListener | None = None  # while running, if the store has notices
        # `notify` messages for configured channels (webhooks, Slack): a bad config stops
        # the host here, in one line, before it claims anything.
        self.deliverer = ChannelDeliverer(store, load_channels(ws.project_root), ws.clock)
        self._delivery_error: str | None = None
        # The project's `triggers:` (runtime/_triggers.py): the host runs them, its
        # worker processes do not; `--once` fires none.
        self.triggers: HostTriggers | None = None
        self.listen = listen
        self.webhooks: WebhookServer | None = None

    def _count_slots(self, item: Scheduled, outcome: str, slots: int) -> None:
        self.metrics.trigger_slots(f"{item.workflow}/{item.spec.name}", outcome, slots)

    # -- lifecycle -------------------------------------------------------------------
    def run(self, *, once: bool = False,
            on_ready: Callable[[], None] | None = None) -> HostReport:
        """Hold the project's host lock and work; `on_ready` is called once the lock is
        held (a refused second host says so before anything else)."""
        if self.lock.fd is None:
            self.lock.acquire()
        try:
            if not once:
                from .runtime._triggers import HostTriggers

                manager = self.manager
                self.triggers = HostTriggers(
                    self.ws, self.store, self.coordinator,
                    on_launched=lambda _run: self._wake.set(),
                    listening=self.listen is not None,
                    controllers=(lambda: manager.controllers.values()) if manager else None,
                    enqueue=manager.enqueue if manager else None,
                    counted=self._count_slots if self.metrics.enabled else None)
                if self.listen is not None:  # a refused address: before anything runs
                    from .runtime._webhooks import WebhookServer

                    self.webhooks = WebhookServer(
                        self.listen, self.triggers.loop, self.triggers.served, os.environ,
                        counted=self.metrics.webhook_delivery if self.metrics.enabled
                        else None)
                    self.webhooks.start()
            if on_ready is not None:
                on_ready()
            # Groups of a dead host, and of dead foreground runners (`wfrun run`).
            self.report.reaped = (self.pool.reaped if self.pool is not None else []) + \
                reap_leftovers(self.state_dir, self.ws)
            if self.pool is not None:
                self.pool.start_reading()
            if self.manager is not None and not once:
                self.manager.start()
            delivery = None
            if not once:
                delivery = threading.Thread(target=self._delivery_loop, daemon=True,
                                            name="wfrun-notify-channels")
                delivery.start()
            self.sources.watch.start()
            try:
                self.work(once)
            except BaseException:
                self.stop_event.set()  # the workers must not run on (or be waited for)
                raise
            finally:
                self.sources.watch.stop()
                if delivery is not None:
                    delivery.join(timeout=TIMEOUT_JOIN)
                if self.pool is not None:  # the workers park (if stopping) and report
                    self.pool.finish(self.stop_event, PARK_DEADLINE + EXIT_GRACE)
                if self.manager is not None:
                    self.manager.stop(grace=2.0)
            if self.pool is not None and self.pool.failure is not None:
                raise self.pool.failure  # a worker's error ends the host, in one line
        finally:
            if self.webhooks is not None:
                self.webhooks.stop()
            if self.triggers is not None:
                self.triggers.stop()
            self.lock.release()
        return self.report

    def work(self, once: bool = False) -> None:
        """The claim loop alone: what a worker process runs (its host holds the lock,
        the controllers and the source watch); parks what is in flight when stopped."""
        try:
            wakeups = None if once else launch_wakeups(self.store)
            if wakeups is not None:  # listening before the first claim: no notice falls between
                self.listener = LaunchListener(wakeups, self._wake.set)
                self.listener.start()
            self._loop(once)
        finally:
            if self.listener is not None:
                self.listener.stop()
            if self.pool is not None and self.stop_event.is_set():
                self.pool.stop()  # the workers park beside this host's own runs
            self._park_all()
            self._stop_workers()
            self.items.close()

    def stop(self) -> None:
        self.stop_event.set()
        self._wake.set()

    def _loop(self, once: bool) -> None:
        idle_passes = 0
        while not self.stop_event.is_set():
            self._wake.clear()  # before claiming: a run ending from here on wakes the wait
            # Due slots first: a slot's run is claimed in this same pass.
            next_slot = self.triggers.tick() if self.triggers is not None else None
            claimed = self._claim_ready()
            if not once:  # --once ends with the error line itself
                self._report_claim_error()
            self.sources.look()
            if once:  # else the delivery thread posts them (a slow receiver must not
                self._deliver_notifications()  # hold up claims)
            reconciled = 0
            if self.manager is not None and once:
                reconciled = self.manager.run_until_idle()
                self.report.reconciles += reconciled
            with self._lock:
                busy = bool(self._running)
            if once and not claimed and not busy and not reconciled:
                # --once ends after two idle passes: work may be queued after the
                # first looked (a map's last item re-queues its parked parent as it
                # ends; the first pass's sweep wakes a parent whose items ended
                # before it parked).
                idle_passes += 1
                if idle_passes == 2:
                    return
                continue
            idle_passes = 0
            # Sleep until a run ends (a slot frees up), a notice announces a launch or
            # the poll interval passes.
            self.idle.set()
            # A refused claim (the database restarting) is retried soon: the notice
            # that it is back may have come before the claim that failed.
            refused = self.coordinator.claim_error is not None
            wait = min(self.poll, CLAIM_RETRY) if refused else self.poll
            self._wake.wait(wait if next_slot is None else min(wait, next_slot))
            self.idle.clear()

    def _claim_ready(self) -> int:
        claimed = 0
        while not self.stop_event.is_set():
            with self._lock:
                if len(self._running) >= self.max_runs:
                    break
            # An empty queue pays the owed input scrub (a checkpoint), after the items
            # below have started: it stood between a map's parent parking and its items.
            record = self.coordinator.claim_next(None, idle_scrub=False)
            if record is None:
                break
            claimed += 1
            self._start(record)
        if not self.stop_event.is_set():  # the slots no launch took run shared items
            with self._lock:
                free = self.max_runs - len(self._running)
            for item in self.items.claim(free):
                claimed += 1
                self._start_item(item)
        self.coordinator.pay_idle_scrub()
        return claimed

    def _start_item(self, item: HostClaim) -> None:
        control = RunControl()
        with self._lock:
            self._running[_item_slot(item)] = (threading.Event(), control)
        self._dispatch(item, control)

    def _run_item(self, item: HostClaim, control: RunControl) -> None:
        try:
            self.items.run(item, control)
        finally:
            with self._lock:
                ended = self._running.pop(_item_slot(item), None)
            if ended is not None:
                ended[0].set()
            self._wake.set()  # a slot is free: the claim loop looks again

    def _report_claim_error(self) -> None:
        """One log line when the store starts (or stops) refusing claims: busy, full,
        read-only; the host keeps polling and its launches wait, none is lost."""
        refused = self.coordinator.claim_error
        text = refused.message if refused is not None else None
        if text != self._claim_error_logged:
            if text is not None:
                log.warning("wfrun host: cannot claim launches: %s", text)
            elif self._claim_error_logged is not None:
                log.warning("wfrun host: the store accepts claims again")
            self._claim_error_logged = text

    def _delivery_loop(self) -> None:
        while not self.stop_event.wait(max(self.poll, 1.0)):
            self._deliver_notifications()

    def _deliver_notifications(self) -> None:
        """Post the channel notifications that are due (a few per pass); a failing
        channel is logged once per distinct error and retried on its own schedule."""
        done: DeliveryPass | None = None
        try:
            done = self.deliverer.deliver_due()
            errors = done.errors
        except StoreError as exc:
            # The claim loop already says the store is away (once); the outbox waits.
            log.debug("notification delivery waits for the store: %s", exc)
            return
        except OSError as exc:
            errors = [str(exc)]
        text = errors[-1] if errors else None
        if text is not None and text != self._delivery_error:
            log.warning("wfrun host: notification not delivered: %s", text)
        self._delivery_error = text
        if done is not None:
            self.report.notifications += done.delivered

    def _start(self, record: LaunchRecord) -> None:
        control, _ = self._admit(record)
        self._dispatch(record, control)

    def _dispatch(self, work: LaunchRecord | HostClaim, control: RunControl) -> None:
        """Hand admitted work to the worker threads, one more of them when every one is
        busy: one worker per slot in use (a host that never runs two at once has one)."""
        with self._lock:
            grow = len(self._workers) < len(self._running)
            if grow:
                worker = threading.Thread(target=self._work_loop, daemon=True,
                                          name=f"wfrun-host-worker-{len(self._workers) + 1}")
                self._workers.append(worker)
        self._work.put((work, control))
        if grow:
            worker.start()

    def _admit(self, record: LaunchRecord, replacing: str | None = None
               ) -> tuple[RunControl, tuple[threading.Event, RunControl] | None]:
        """Count a claimed launch as running in this host, in place of the run that
        ended (`replacing`, whose entry is returned) in one step, so the claim loop
        never sees the slot free in between."""
        control = RunControl()
        if self.stop_event.is_set():
            control.park("host stopping", auto_resume=True)
        with self._lock:  # worker processes' reports count here too
            ended = None if replacing is None else self._running.pop(replacing, None)
            self._running[record.run_id] = (threading.Event(), control)
            self.report.started += 1
        if self.on_run_started is not None:
            self.on_run_started(record.run_id)
        if self.metrics.enabled:
            self.metrics.run_started(record.workflow_ref)
            if (waited := first_claim_wait(record)) is not None:
                self.metrics.claimed(waited)
        return control, ended

    def _work_loop(self) -> None:
        while (item := self._work.get()) is not None:
            if isinstance(item[0], HostClaim):
                self._run_item(item[0], item[1])
                continue
            work: tuple[LaunchRecord, RunControl] | None = (item[0], item[1])
            while work is not None:  # the slot's next run, claimed with its last one's end
                work = self._execute(*work)

    def _stop_workers(self) -> None:
        with self._lock:
            workers = list(self._workers)
            self._workers.clear()
        for _ in workers:
            self._work.put(None)
        with self._lock:
            stuck = bool(self._running)  # past _park_all's deadline: not waited for again
        if not stuck:
            for worker in workers:  # each is back from its last run: it exits at once
                worker.join()

    def _execute(self, record: LaunchRecord, control: RunControl
                 ) -> tuple[LaunchRecord, RunControl] | None:
        """Run one launch; the next one for this slot when its ending claimed one (the
        transition that records a run's end takes the next launch in the same commit,
        a transaction per run fewer than a claim of its own)."""
        then = None if self.stop_event.is_set() else self.coordinator.next_claim()
        try:
            outcome = self.coordinator.execute(record, control=control, then_claim=then)
            if self.metrics.enabled:
                self._measure_end(record, outcome)
            self._run_ended(record.run_id, outcome)
        except BaseException:
            follow = self._follow(record, then)
            if follow is not None:
                self._work.put(follow)  # another worker runs it (or this one, if it lives)
            raise
        return self._follow(record, then)

    def _measure_end(self, record: LaunchRecord, outcome: RunOutcome | None) -> None:
        """Count how a run this process executed ended; None (no outcome): it failed to
        start, or its claim was lost (the row, still active, says which)."""
        workflow = record.workflow_ref
        if outcome is not None:
            self.metrics.run_ended(workflow, "parked" if outcome.parked else outcome.status)
            return
        try:
            row = LaunchBook(self.store).get(record.run_id)
        except StoreError as exc:
            log.debug("metrics: cannot read launch %s: %s", record.run_id, exc.message)
            return
        if row is not None and row.status in ("queued", "starting", "running"):
            self.metrics.lease_lost(workflow)  # let go: another host carries it on
        else:
            self.metrics.run_ended(workflow, "failed_to_start")

    def _follow(self, record: LaunchRecord, then: NextClaim | None
                ) -> tuple[LaunchRecord, RunControl] | None:
        """The run `record` ended: its slot frees, or goes to the launch claimed with
        its ending."""
        taken = None if then is None else then.record
        if taken is not None:
            control, ended = self._admit(taken, replacing=record.run_id)
        else:
            with self._lock:
                ended = self._running.pop(record.run_id, None)
        if ended is not None:
            ended[0].set()
        if taken is None:
            self._wake.set()  # a slot is free: the claim loop looks again
            return None
        return taken, control

    def _worker_started(self, run_id: str) -> None:
        with self._lock:
            self.report.started += 1

    def _run_ended(self, run_id: str, outcome: RunOutcome | None) -> None:
        """A run this host or one of its worker processes ended: counted, reported."""
        with self._lock:
            if outcome is None:
                self.report.failed_to_start += 1
            else:
                self.report.count(outcome)
        if self.on_run_ended is not None:
            try:
                self.on_run_ended(run_id, outcome)
            except Exception:  # a display problem never ends the host
                log.exception("wfrun host: cannot report run %s", run_id)

    def _park_all(self) -> None:
        """Park every in-flight run at its next safe point, then wait (bounded)."""
        deadline = self.ws.clock.monotonic() + PARK_DEADLINE
        seen: set[str] = set()
        while True:  # again for a launch a slot claimed with the ending of one parked here
            with self._lock:
                running = [(run_id, entry) for run_id, entry in self._running.items()
                           if run_id not in seen]
            if not running:
                return
            for run_id, (_, control) in running:
                seen.add(run_id)
                control.park("host stopping", auto_resume=True)  # the next host resumes it
            for _run_id, (ended, _control) in running:
                ended.wait(timeout=max(deadline - self.ws.clock.monotonic(), 0.0))
            if self.ws.clock.monotonic() >= deadline:
                return
