"""Durable deferred launch: preparation in the tool call, one `execute` for every run.

Preparation (`prepare`, in queue.py) runs every check that can run before
the reply, then commits a `queued` row with the final run id. Every run, from
whatever source (`wfrun run`, `wfrun start`, the session tool, continuations,
controller children), is such a row, and a claimed row is run by `execute`.

`LaunchCoordinator` is the wiring (procrastinate's `app.py`): it builds one runner's
collaborators once and gives each the others it needs. None of them imports it back.

    queue.py       Preflight       every check before the reply, then the queued row
                   Claims          take launches from the queue; give a lease back
    activator.py   Activator       begin (decide what the row needs), drive, let go
    keeper.py      LeaseKeeper     renew the leases of running runs; read cancels
    endings.py     Endings         record an ending, a failed start, a crash
    faults.py      FaultHold       a full or read-only disk: the launch waits
    recovery.py    Recovery        expired starts, cancel (a dead runner's too)
    engines.py     Engines         fenced and bare engines over the runs
    held.py        HeldInput       writeOnly input and secrets: redaction, sources

Every one of them moves launches through one `LaunchBook` (runner.store, the queue's
facade; a claim's `LeaseFence` beside it) and pays the input scrub through one
`InputScrub` (the store's own).

Hosts, sessions and commands build it through `runner.host.runtime._coordinators.
build_coordinator(workspace, store, role)`, tests through `runner.testing`.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from runner._leases import LEASE_SECONDS, renew_every
from runner.clock import Clock, SystemClock
from runner.engine import RunReader
from runner.engine._rows import BundleRows
from runner.store import LaunchBook, LaunchRecord, Store, StoreUnavailable

from ._activation import Activation, CrashPoints, _no_crash
from ._activator import Activator
from ._endings import Endings
from ._engines import EngineOptions, Engines
from ._errors import PreflightError
from ._faults import FaultHold
from ._held import HeldInput
from ._items import LaunchChildren
from ._itemwork import HostItems
from ._keeper import LeaseKeeper
from ._queue import Claims, FaultGate, Preflight, Resolver
from ._recovery import Recovery

RENEW_EVERY = renew_every(LEASE_SECONDS)
#: Named points where tests kill the process (WFRUN_CRASH_AT), in the order a run
#: passes them. The engine's own points (runner.CRASH_POINTS) lie in between.
CRASH_POINTS = ("after_queued_commit", "after_claim", "during_starting",
                "before_executor_release", "after_running", "before_outcome_recorded",
                "after_session_append")

__all__ = ["CRASH_POINTS", "LEASE_SECONDS", "RENEW_EVERY", "Activation", "EngineOptions",
           "LaunchCoordinator", "PreflightError", "Resolver"]


class LaunchCoordinator:
    """One runner's launch layer over one store: prepare, claim, execute, cancel."""

    def __init__(self, store: Store, resolver: Resolver, runs_dir: Path, *, runner_id: str,
                 clock: Clock | None = None, options: EngineOptions | None = None,
                 lease_seconds: float = LEASE_SECONDS, renew_every: float = RENEW_EVERY,
                 secrets: tuple[str, ...] = (),
                 crash: Callable[[str], None] | None = None,
                 scrub_input: bool = True, rows: BundleRows | None = None,
                 for_sessions: bool = False) -> None:
        self.store = store
        self.resolver = resolver
        self.runs_dir = runs_dir
        self.runner_id = runner_id
        self.clock = clock or SystemClock()
        self.lease_seconds = lease_seconds
        self.renew_every = renew_every
        # Crash injection for tests: called at named points, a no-op in production. The
        # collaborators share one seam, so a test may set `crash` before a run.
        self._crashes = CrashPoints(crash)
        self.reader = RunReader(runs_dir, rows)
        self.book = LaunchBook(store)  # the launch queue, as every layer above the store sees it
        self._held = HeldInput(secrets, lambda: self._engines.options.secret_source)
        # writeOnly input of launches queued here, by run id (never in the store).
        self.held: dict[str, dict[str, Any]] = self._held.values
        # Checkpoint after input is cleared, so no stale WAL frame keeps a copy of it.
        self._scrub = store.input_scrub(self.clock.monotonic, enabled=scrub_input)
        self._engines = Engines(store, self.book, runs_dir, self.clock, self._held,
                                options or EngineOptions(), rows=rows,
                                lease_seconds=lease_seconds)
        self._engines.children = LaunchChildren(self)  # a fan-out's `workflow:` bodies
        self.faults = FaultGate(self.clock)  # claiming waits after a full/read-only disk
        self._claims = Claims(self.book, runner_id, self.clock, lease_seconds,
                              self.faults, self._scrub)
        self._keeper = LeaseKeeper(store, self.book, self.clock, lease_seconds, renew_every,
                                   runner_id, tick=self._scrub.tick)
        self._endings = Endings(store, self.book, runner_id, self.reader, self._engines, self._held,
                                self._scrub, crash=self._crashes, for_sessions=for_sessions)
        hold = FaultHold(self.book, runner_id, self.reader, self.faults, self._endings,
                         self._engines)
        self._activator = Activator(store, self.book, resolver, self.reader, self.clock,
                                    runs_dir=runs_dir, lease_seconds=lease_seconds,
                                    claims=self._claims, keeper=self._keeper,
                                    engines=self._engines, endings=self._endings,
                                    faults=hold, held=self._held, scrub=self._scrub,
                                    crash=self._crashes)
        self._recovery = Recovery(store, self.book, runner_id, self.clock, lease_seconds,
                                  reader=self.reader, resolver=resolver,
                                  endings=self._endings, engines=self._engines,
                                  scrub=self._scrub)
        self._preflight = Preflight(store, self.book, resolver, self.reader, self.clock,
                                    runs_dir, self._held, crash=self._crashes,
                                    cancel=self._recovery.cancel)

        # What callers call is the collaborators' own methods, not forwards to them:
        # a reader walks from here straight to the work.
        # Preparation (queue.py): every pre-reply check, then one committed `queued`
        # row with the final run id (`prepare`; `claim_by`: claimed by that runner in
        # the same commit; `options`: private launch options such as a rerun's plan).
        # `plan` and `queued`: a detached start whose row another commit writes (group
        # commit of trigger firings).
        self.prepare = self._preflight.prepare
        self.plan = self._preflight.plan
        self.queued = self._preflight.queued
        # Claims (queue.py): the next launch, one by id (an explicit resume, a
        # foreground run), or a claim `execute` takes with a run's ending (a host
        # slot's next run).
        self.claim_next = self._claims.next
        self.claim = self._claims.by_id
        self.next_claim = self._claims.next_claim
        # The one run path (activator.py): `execute` runs a claimed launch to its end
        # (fresh, resumed, or only recorded) and returns how the run ended, or None when
        # it failed to start or another runner won; `then_claim` (from `next_claim`):
        # the ending's commit also claims the next launch. A session does `begin` (up
        # to `running`) at its idle boundary and `drive`s the run on a worker thread.
        self.execute = self._activator.execute
        self.begin = self._activator.begin
        self.drive = self._activator.drive
        # Endings (endings.py): an engine outcome onto the launch row, with a follow-up
        # when one is due; a claimed launch failed with one follow-up for its session.
        self.record_outcome = self._endings.record
        self.fail_launch = self._endings.fail_launch
        # Cancellation and recovery (recovery.py): cancel now, or ask the live runner of
        # a running launch (a dead runner's is taken over); `starting` rows whose lease
        # expired reconciled with their bundles.
        self.cancel = self._recovery.cancel
        self.recover_expired = self._recovery.recover_expired
        # Redacted, bounded text (held.py); the project's files named relative to it
        # (queue.py); the activations' owed input scrub, now; an engine that only
        # records endings (no claim: unfenced, engines.py).
        self.safe = self._held.safe
        self.relative = self._preflight.relative
        self.flush_scrub = self._scrub.flush
        self.pay_idle_scrub = self._claims.pay_idle_scrub
        self.bare_engine = self._engines.bare

    # -- what callers read and set -----------------------------------------------------
    @property
    def options(self) -> EngineOptions:
        """The engines' options (a caller may set them before a run)."""
        return self._engines.options

    @options.setter
    def options(self, value: EngineOptions) -> None:
        self._engines.options = value

    @property
    def secrets(self) -> tuple[str, ...]:
        """Values redacted wherever a launch message is persisted or shown to a model."""
        return self._held.secrets

    @secrets.setter
    def secrets(self, value: tuple[str, ...]) -> None:
        self._held.secrets = value

    @property
    def crash(self) -> Callable[[str], None]:
        """The crash seam's hook (tests set it before a run)."""
        return self._crashes.hook or _no_crash

    @crash.setter
    def crash(self, hook: Callable[[str], None]) -> None:
        self._crashes.hook = hook

    @property
    def claim_error(self) -> StoreUnavailable | None:
        """The last claim the store refused (busy, full, read-only), else None."""
        return self._claims.error

    @property
    def crash_causes(self) -> dict[str, str]:
        """Why a run crashed here, by run id: the newest few, in memory."""
        return self._endings.crash_causes

    # -- preparation ---------------------------------------------------------------------
    def prepare_here(self, ref: str, run_input: Any = None, *,
                     parent_run_id: str | None = None, detached: bool = False,
                     run_id: str | None = None, options: dict[str, Any] | None = None
                     ) -> LaunchRecord:
        """Queue a launch this process runs now (`wfrun run`, `answer`; `detached`:
        `start --wait`): claimed in the enqueue's own commit, so no host ever sees it
        queued. Only a launch with this runner's affinity fails when a full disk
        refuses its bundle (`faults.py`); a detached one goes back to the queue."""
        record = self.prepare(ref, run_input, parent_run_id=parent_run_id,
                              affinity_runner_id=None if detached else self.runner_id,
                              claim_by=self.runner_id, lease_seconds=self.lease_seconds,
                              run_id=run_id, options=options)
        self._claims.mark_by_id(record.run_id)
        return record

    def host_items(self) -> HostItems:
        """A host's item worker: items of shared fan-out nodes of any run (ADR 0008)."""
        return HostItems(self.store, self._engines, self.resolver, self.clock,
                         runner_id=self.runner_id, lease_seconds=self.lease_seconds,
                         crash=self._crashes)
