"""Durable deferred launch: preparation in the tool call, one `execute` for every run.

Preparation (`prepare`, in preflight.py) runs every check that can run before
the reply, then commits a `queued` row with the final run id. Every run, from
whatever source (`wfrun run`, `wfrun start`, the session tool, continuations,
controller children), is such a row, and a claimed row is run by `execute`.

`LaunchCoordinator` is the wiring (procrastinate's `app.py`): it builds one runner's
collaborators once and gives each the others it needs. None of them imports it back.

    preflight.py   Preflight       every check before the reply, then the queued row
    claims.py      Claims          take launches from the queue; give a lease back
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
from runner.engine import Engine, RunControl, RunOutcome, RunReader
from runner.engine._rows import BundleRows
from runner.store import (
    LaunchBook,
    LaunchErrorCode,
    LaunchRecord,
    LostRace,
    NextClaim,
    Store,
    StoreUnavailable,
)

from ._activation import Activation, CrashPoints, _no_crash
from ._activator import Activator
from ._claims import Claims, FaultGate
from ._endings import Endings
from ._engines import EngineOptions, Engines
from ._faults import FaultHold
from ._held import HeldInput
from ._items import LaunchChildren
from ._itemwork import HostItems
from ._keeper import LeaseKeeper
from ._preflight import PlannedLaunch, Preflight, PreflightError, Resolver
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
        self._engines = Engines(store, runs_dir, self.clock, self._held,
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
        self._preflight = Preflight(store, self.book, resolver, self.reader, self.clock,
                                    runs_dir, self._held, crash=self._crashes,
                                    cancel=lambda run_id: self.cancel(run_id))
        self._recovery = Recovery(store, self.book, runner_id, self.clock, lease_seconds,
                                  reader=self.reader, resolver=resolver,
                                  endings=self._endings, engines=self._engines,
                                  scrub=self._scrub)

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

    def safe(self, text: str, run_input: Any = None) -> str:
        """Redacted, bounded text (held.py)."""
        return self._held.safe(text, run_input)

    def relative(self, text: str) -> str:
        """`text` with the project's files named relative to it."""
        return self._preflight.relative(text)

    # -- preparation ---------------------------------------------------------------------
    def prepare(self, ref: str, run_input: Any = None, *, session_id: str | None = None,
                parent_run_id: str | None = None, presentation_pending: str | None = None,
                affinity_runner_id: str | None = None, run_id: str | None = None,
                claim_by: str | None = None, lease_seconds: float = LEASE_SECONDS,
                options: dict[str, Any] | None = None) -> LaunchRecord:
        """Every pre-reply check, then one committed `queued` row with the final run id
        (`claim_by`: claimed by that runner in the same commit; `options`: private launch
        options such as a rerun's plan); preflight.py."""
        return self._preflight.prepare(
            ref, run_input, session_id=session_id, parent_run_id=parent_run_id,
            presentation_pending=presentation_pending,
            affinity_runner_id=affinity_runner_id, run_id=run_id, claim_by=claim_by,
            lease_seconds=lease_seconds, options=options)

    def plan(self, ref: str, run_input: Any, run_id: str) -> PlannedLaunch:
        """A detached start's checks, its row written by another commit (group
        commit of trigger firings); then `queued`. preflight.py."""
        return self._preflight.plan(ref, run_input, run_id)

    def queued(self, planned: PlannedLaunch, record: LaunchRecord) -> LaunchRecord:
        return self._preflight.queued(planned, record)

    # -- claims ------------------------------------------------------------------------
    def claim_next(self, session_id: str | None) -> LaunchRecord | None:
        return self._claims.next(session_id)

    def claim(self, run_id: str, *, dead_runner: str | None = None) -> LaunchRecord:
        """Claim one launch by id (an explicit resume, a foreground run)."""
        return self._claims.by_id(run_id, dead_runner=dead_runner)

    def next_claim(self) -> NextClaim | None:
        """A claim for `execute` to take with a run's ending (a host slot's next run)."""
        return self._claims.next_claim()

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

    # -- the one execute -----------------------------------------------------------------
    def execute(self, record: LaunchRecord, *, control: RunControl | None = None,
                on_start: Callable[[Activation], None] | None = None,
                force: bool = False,
                then_claim: NextClaim | None = None) -> RunOutcome | None:
        """Run a claimed launch to its end (fresh, resumed, or only recorded); returns
        how the run ended, or None when it failed to start or another runner won.
        `then_claim` (from `next_claim`): the transition that records the run's ending
        also claims the next launch (`then_claim.record`), one commit for both."""
        return self._activator.execute(record, control=control, on_start=on_start,
                                       force=force, then_claim=then_claim)

    def begin(self, record: LaunchRecord, *, control: RunControl | None = None,
              on_start: Callable[[Activation], None] | None = None,
              force: bool = False) -> Activation | None:
        """The first half of `execute`, up to `running` (a session does it at its idle
        boundary and drives the run on a worker thread). None: nothing to drive."""
        return self._activator.begin(record, control=control, on_start=on_start,
                                     force=force)

    def drive(self, act: Activation) -> RunOutcome | None:
        """The second half of `execute`: run the nodes, record the ending."""
        return self._activator.drive(act)

    # -- endings -------------------------------------------------------------------------
    def record_outcome(self, act: Activation, outcome: RunOutcome) -> None:
        """Map an engine outcome onto the launch row, with a follow-up when one is due."""
        self._endings.record(act, outcome)

    def fail_launch(self, record: LaunchRecord, token: str, code: LaunchErrorCode,
                    reason: str, *, fixed: bool = False) -> LaunchRecord | LostRace:
        """Fail a claimed launch with one eligible follow-up for its session."""
        return self._endings.fail_launch(record, token, code, reason, fixed=fixed)

    def host_items(self) -> HostItems:
        """A host's item worker: items of shared fan-out nodes of any run (ADR 0008)."""
        return HostItems(self.store, self._engines, self.resolver, self.clock,
                         runner_id=self.runner_id, lease_seconds=self.lease_seconds,
                         crash=self._crashes)

    def bare_engine(self) -> Engine:
        """An engine that only records endings (no claim: unfenced)."""
        return self._engines.bare()

    # -- cancellation and recovery -----------------------------------------------------
    def cancel(self, run_id: str) -> LaunchRecord:
        """Cancel a launch now, or ask the live runner of a running one. A running
        launch whose runner died (its lease expired) is taken over and cancelled."""
        return self._recovery.cancel(run_id)

    def recover_expired(self, session_id: str | None = None) -> list[LaunchRecord]:
        """Reconcile `starting` rows whose lease expired with what their bundles show."""
        return self._recovery.recover_expired(session_id)

    def flush_scrub(self) -> None:
        """Scrub the input of the activations since the last scrub, if any."""
        self._scrub.flush()
