"""Durable deferred launch: preparation in the tool call, one `execute` for every run.

Preparation (`prepare`, in preflight.py) runs every check that can run before
the reply, then commits a `queued` row with the final run id. Every run, from
whatever source (`wfrun run`, `wfrun start`, the session tool, continuations,
controller children), is such a row, and a claimed row is run by `execute`,
which decides once what the row needs:

    no bundle, or a half-made one     activate: re-check the source, create the
                                      bundle, `running`, first node
    a bundle that has ended           record the ending the bundle shows
    a bundle that is running          resume it (replay, re-run the interrupted node)

and maps how the run ended onto the row (done | failed | cancelled | parked),
so a launch's terminal state always agrees with its bundle. Any unexpected
exception on this path is caught at one boundary and fails the launch (the
bundle ended too, the reservation released, one follow-up for a session).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from runner.clock import Clock, SystemClock
from runner.compiler import WorkflowDefinition
from runner.engine import (
    AgentStepExecutor,
    Engine,
    NotificationSink,
    RunControl,
    RunOutcome,
    RunReader,
    check_input,
)
from runner.engine.processes import ProcessRegistry
from runner.engine.rows import BundleRows
from runner.engine.runner import Observer, RunDriver
from runner.engine.secrets import NO_SOURCE, SecretMissing, SecretSource, restore_input
from runner.engine.secrets import resolve as resolve_secrets
from runner.errors import (
    ClaimLost,
    ConflictError,
    DefinitionInvalid,
    InputError,
    MachineFault,
    NotFoundError,
    TemporaryError,
    WfrunError,
    machine_fault,
)
from runner.safety import one_line, safe_message, secret_values
from runner.store import (
    MAX_ACTIVATION_CRASHES,
    LaunchErrorCode,
    LaunchRecord,
    LostRace,
    NextClaim,
    Store,
    StoreError,
    StoreUnavailable,
    TurnCause,
)

from .faults import FaultGate, hold, store_fault
from .intents import new_intent
from .keeper import LeaseKeeper
from .link import Link, Step, Transition
from .preflight import Preflight, PreflightError, Resolver, workflow_name

log = logging.getLogger(__name__)
_T = TypeVar("_T")
LEASE_SECONDS = 30.0
RENEW_EVERY = 10.0
#: An activation's input scrub (a WAL checkpoint) is batched: it runs when this
#: coordinator finds the queue empty, when a run it claimed by id ends, or once
#: SCRUB_BATCH activations or SCRUB_SECONDS have passed since the first one owed
#: (checked at each activation, claim and run end, and every CANCEL_POLL by the keeper
#: while a run executes). docs/store.md has the bound.
SCRUB_BATCH = 64
#: How often a let-go run's lease hand-back asks an unreachable store again.
GIVE_BACK_EVERY = 0.5
SCRUB_SECONDS = 1.0
#: Named points where tests kill the process (WFRUN_CRASH_AT), in the order a run
#: passes them. The engine's own points (runner.CRASH_POINTS) lie in between.
CRASH_POINTS = ("after_queued_commit", "after_claim", "during_starting",
                "before_executor_release", "after_running", "before_outcome_recorded",
                "after_session_append")
#: How an engine ending maps onto the launch row's failure code.
FAILURE_CODES: dict[str, LaunchErrorCode] = {"failed": "run_failed",
                                             "timed_out": "run_timed_out"}

__all__ = ["CRASH_POINTS", "LEASE_SECONDS", "RENEW_EVERY", "Activation", "EngineOptions",
           "LaunchCoordinator", "PreflightError", "Resolver"]


@dataclass
class EngineOptions:
    executor: Callable[[LaunchRecord], AgentStepExecutor | None] = lambda _r: None
    notifications: NotificationSink | None = None
    observer: Observer | None = None
    durability: str = "full"
    project_root: Path | None = None
    processes: ProcessRegistry | None = None
    crash_point: Callable[[str], None] | None = None  # the engine's crash seam (tests)
    # Secrets and env values (`--secret`, the environment), resolved at each activation.
    secret_source: SecretSource = NO_SOURCE


#: How many crash causes a coordinator keeps for its runner to show (a host logs them).
CRASH_CAUSES_KEPT = 16


def _classify(exc: BaseException) -> tuple[LaunchErrorCode, str]:
    """A stable code and a safe, actionable reason for a startup failure."""
    if isinstance(exc, NotFoundError):
        return "workflow_not_found", exc.message
    if isinstance(exc, DefinitionInvalid):
        return "workflow_invalid", exc.message
    if isinstance(exc, InputError):
        return "input_invalid", exc.message
    if isinstance(exc, (StoreError, TemporaryError)):
        return "store_unavailable", "the workflow store is unavailable; try again shortly"
    if isinstance(exc, WfrunError):
        return "activation_failed", exc.message
    # Unexpected errors: the class name only; the text may hold secrets or input.
    return "activation_failed", f"activation failed ({type(exc).__name__}); see the host log"


@dataclass
class Activation:
    """One claimed launch on its way to running (or already running)."""

    record: LaunchRecord
    token: str
    definition: WorkflowDefinition | None = None
    control: RunControl = field(default_factory=RunControl)
    claim_lost: bool = False
    driver: RunDriver | None = None
    engine: Engine | None = None
    checkpoint: str | None = None  # a continuation's first boundary: the parent's checkpoint
    force: bool = False  # resume although the workflow changed (an explicit, recorded choice)
    outcome: RunOutcome | None = None  # set when the bundle had ended before this claim
    by_id: bool = False  # claimed by id (foreground, resume): no claim loop follows it
    # What the fence last learned of the row: whether it is `running` under this claim
    # and until when (on the engine's monotonic clock) the lease surely holds.
    lease: dict[str, Any] = field(default_factory=lambda: {"running": False, "until": 0.0})
    recorded: bool = False  # the ending committed with the bundle's seal (link.py)
    then_claim: NextClaim | None = None  # the next launch, claimed with this one's ending

    def running(self, record: LaunchRecord, sent: float, margin: float) -> None:
        """The row is `running` under this claim (mark_running's committed answer, to
        a statement sent at `sent`)."""
        self.record = record
        self.lease["running"] = True
        self.held(record, sent, margin)

    def held(self, record: LaunchRecord, sent: float, margin: float) -> None:
        """A committed answer (mark_running, a renewal) to a statement sent at `sent` on
        the engine's clock: the database wrote it no earlier, when the lease had
        `claim_expires_at - updated_at` left (both on the database's clock), so the
        lease holds until `sent` plus that, less `margin` for clock drift and a write
        still on its way. The fence answers from this without a round trip."""
        left = ((record.claim_expires_at or 0) - record.updated_at) / 1000
        self.lease["until"] = max(self.lease["until"], sent + left - margin)

    @property
    def run_id(self) -> str:
        return self.record.run_id

    @property
    def workflow(self) -> str:
        if self.definition is not None and self.definition.name:
            return self.definition.name
        return workflow_name(self.record.workflow_ref)


class LaunchCoordinator(Preflight):
    def __init__(self, store: Store, resolver: Resolver, runs_dir: Path, *, runner_id: str,
                 clock: Clock | None = None, options: EngineOptions | None = None,
                 lease_seconds: float = LEASE_SECONDS, renew_every: float = RENEW_EVERY,
                 secrets: tuple[str, ...] = (),
                 crash: Callable[[str], None] | None = None,
                 scrub_input: bool = True, rows: BundleRows | None = None,
                 for_sessions: bool = False) -> None:
        self.store = store
        # A runner outside every session (a host, `wfrun resume`) that runs a session's
        # launch (handed over when the session ended): however the run ends, the
        # session hears it on its next turn. A session's own runs need no such word.
        self.for_sessions = for_sessions
        # Crash injection for tests: called at named points, a no-op in production.
        self.crash: Callable[[str], None] = crash or (lambda _point: None)
        self.resolver = resolver
        self.runs_dir = runs_dir
        # Bundles in the store's database (Postgres): any host can resume any run.
        self.rows = rows
        self.reader = RunReader(runs_dir, rows)
        self.runner_id = runner_id
        self.clock = clock or SystemClock()
        self.options = options or EngineOptions()
        self.lease_seconds = lease_seconds
        self.renew_every = renew_every
        self.secrets = secrets
        # writeOnly input fields of launches queued here: never in the store, only in
        # this process's memory until the launch activates (see docs/secrets.md).
        self.held: dict[str, dict[str, Any]] = {}
        self.faults = FaultGate(self.clock)  # claiming waits after a full/read-only disk
        self.claim_error: StoreUnavailable | None = None  # the last claim the store refused
        self._keeper = LeaseKeeper(store, self.clock, lease_seconds, renew_every, runner_id,
                                   tick=lambda: self._scrub_later(owe=False))
        # Checkpoint after input is cleared, so the -wal file keeps no copy of it.
        self.scrub_input = scrub_input
        self._scrub_lock = threading.Lock()
        self._scrubs_owed = 0
        self._owed_since = 0.0
        self._by_id: set[str] = set()  # launches claimed by id, not yet begun
        # Why a run crashed here, by run id (`_crash_cause`): the newest few, in memory.
        self.crash_causes: dict[str, str] = {}

    @property
    def fence_margin(self) -> float:
        """Seconds of lease the fence keeps in hand before it answers locally."""
        return self.lease_seconds / 3

    def safe(self, text: str, run_input: Any = None) -> str:
        """Redacted, bounded text. Secrets are redacted, not ordinary words: of the run
        input, values that look like secrets (by key name or shape) and single-token
        values of 8+ characters (an id, a key, a path) are masked where a message echoes
        them; phrases ("the change") are left alone."""
        known = [str(v) for held in self.held.values() for v in held.values()]
        known += list(self.options.secret_source.given.values())
        return safe_message(text, self.secrets + tuple(known) + secret_values(run_input)
                            + _token_values(run_input))

    # -- claims ----------------------------------------------------------------------
    def claim_next(self, session_id: str | None) -> LaunchRecord | None:
        if self.faults.active():
            return None  # the disk refused a bundle moments ago: let the launches wait
        try:
            claimed = self.store.launches.claim_next(
                runner_id=self.runner_id, session_id=session_id,
                lease_seconds=self.lease_seconds)
        except StoreUnavailable as exc:
            self.claim_error = exc  # busy, full, read-only: `wfrun host --once` says so
            return None
        self.claim_error = None
        if claimed is None:
            self.flush_scrub()  # idle: no activation's input outlives the busy spell
        else:
            self._scrub_later(owe=False)
        return claimed

    def prepare_here(self, ref: str, run_input: Any = None, *,
                     parent_run_id: str | None = None, detached: bool = False
                     ) -> LaunchRecord:
        """Queue a launch this process runs now (`wfrun run`, `answer`; `detached`:
        `start --wait`): claimed in the enqueue's own commit, so no host ever sees it
        queued. Only a launch with this runner's affinity fails when a full disk
        refuses its bundle (`faults.hold`); a detached one goes back to the queue."""
        record = self.prepare(ref, run_input, parent_run_id=parent_run_id,
                              affinity_runner_id=None if detached else self.runner_id,
                              claim_by=self.runner_id, lease_seconds=self.lease_seconds)
        with self._scrub_lock:
            self._by_id.add(record.run_id)
        return record

    def claim(self, run_id: str, *, dead_runner: str | None = None) -> LaunchRecord:
        """Claim one launch by id (an explicit resume, a foreground run)."""
        result = self.store.launches.claim(run_id, runner_id=self.runner_id,
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
        with self._scrub_lock:
            self._by_id.add(run_id)
        return result

    # -- the one execute -----------------------------------------------------------------
    def execute(self, record: LaunchRecord, *, control: RunControl | None = None,
                on_start: Callable[[Activation], None] | None = None,
                force: bool = False,
                then_claim: NextClaim | None = None) -> RunOutcome | None:
        """Run a claimed launch to its end (fresh, resumed, or only recorded); returns
        how the run ended, or None when it failed to start or another runner won.
        `then_claim` (from `next_claim`): the transition that records the run's ending
        also claims the next launch (`then_claim.record`), one commit for both."""
        act = self.begin(record, control=control, on_start=on_start, force=force)
        if act is None:
            return None
        act.then_claim = then_claim
        return self.drive(act)

    def next_claim(self) -> NextClaim | None:
        """A claim for `execute` to take with a run's ending (a host slot's next run);
        None while claims wait for the disk (`claim_next` takes none then either)."""
        if self.faults.active():
            return None
        return NextClaim(runner_id=self.runner_id, lease_seconds=self.lease_seconds)

    def begin(self, record: LaunchRecord, *, control: RunControl | None = None,
              on_start: Callable[[Activation], None] | None = None,
              force: bool = False) -> Activation | None:
        """The first half of `execute`, up to `running` (a session does it at its idle
        boundary and drives the run on a worker thread). None: nothing to drive."""
        assert record.claim_token is not None, "execute needs a claimed launch"
        act = Activation(record, record.claim_token, control=control or RunControl(),
                         force=force)
        with self._scrub_lock:
            if record.run_id in self._by_id:
                self._by_id.discard(record.run_id)
                act.by_id = True
        if on_start is not None:
            on_start(act)
        return act if self._guarded(act, self._begin) else None

    def drive(self, act: Activation) -> RunOutcome | None:
        """The second half of `execute`: run the nodes, record the ending."""
        try:
            return self._guarded(act, self._drive)
        finally:
            self._keeper.remove(act)
            if act.by_id:
                self.flush_scrub()  # no claim loop follows a run claimed by id
            else:
                self._scrub_later(owe=False)

    def _guarded(self, act: Activation, step: Callable[[Activation], _T]) -> _T | None:
        """The one boundary of the run path: a lost claim lets go, and any unexpected
        exception fails the launch instead of leaving it `running` until its lease
        expires (and crashing again in the next runner)."""
        try:
            return step(act)
        except ClaimLost:
            self._lost(act)
            return None
        except Exception as exc:
            if type(exc) is StoreUnavailable:
                # The database went away (a restart, a network blip) under a read of the
                # launch or its bundle: let go as for a lost claim; the lease expires and
                # a runner that reaches the database takes the launch over. Nothing fails.
                log.warning("run %s: the store is unreachable; letting go (%s)",
                            act.record.run_id, exc)
                self._lost(act)
                return None
            fault = exc if isinstance(exc, MachineFault) else machine_fault(
                exc, f"the run bundle of {act.record.run_id}")
            if fault is None and isinstance(exc, StoreError):
                # The store's own disk refused a transition (`mark_running` on a full
                # disk): the launch waits as for a bundle's, one line, no traceback.
                fault = store_fault(exc)
            if fault is not None:  # a full or read-only disk: the launch waits
                hold(self, act, fault)
                return None
            log.exception("run %s crashed in its runner", act.record.run_id)
            self._crashed(act, exc)
            return None

    def _begin(self, act: Activation) -> bool:
        record = act.record
        self.crash("after_claim")
        engine = self._engine(record, act.token, act.lease, act)
        act.engine = engine
        if record.status == "starting" and record.crash_count >= MAX_ACTIVATION_CRASHES:
            reason = (f"activation crashed {record.crash_count} times in a row; it is not "
                      "tried again. Check the host log, then start it again")
            if self.reader.started(record.run_id):
                engine.abandon(record.run_id, "failed", code="activation_failed",
                               reason=reason)  # the bundle ends as the launch does
            self.fail_launch(record, act.token, "activation_failed", reason, fixed=True)
            return False
        first = self.reader.space.commits_with_store and record.status == "starting" \
            and record.epoch == 1
        if first or not self.reader.started(record.run_id):
            # No bundle, or one whose creator died before `run_started` was durable:
            # nothing ran, and the input is still in the row (it is cleared at running).
            # A bundle committed with the store's own transitions exists only under a
            # claim the store kept, so on the first claim there is none to look for or
            # discard (a read and a write less per run).
            if not first:
                engine.discard_unstarted(record.run_id, record.parent_run_id)
            if record.status != "starting":
                self.fail_launch(record, act.token, "activation_failed",
                                 "the run bundle is missing; start the workflow again")
                return False
            return self._activate(act, engine)
        if record.status == "starting":
            sent = self.clock.monotonic()
            running = self.store.launches.mark_running(record.run_id, act.token)
            if isinstance(running, LostRace):
                self._lost(act)
                return False
            act.running(running, sent, self.fence_margin)
        status = self.reader.status(record.run_id)
        if status is not None and status != "running":
            # The run ended but its runner died before the store recorded it.
            act.outcome = engine.settle(record.run_id)
        return True

    def _drive(self, act: Activation) -> RunOutcome | None:
        engine = act.engine
        assert engine is not None
        try:
            if act.outcome is not None:
                self.record_outcome(act, act.outcome)
                return act.outcome
            if act.driver is None:
                return self._resume(act, engine)
            return self._run(act)
        except ClaimLost:
            return self._lost(act)  # a cancel's ending is still an outcome

    def _activate(self, act: Activation, engine: Engine) -> bool:
        """Take a claimed `starting` launch to `running`; False when it failed or lost."""
        record, token = act.record, act.token
        try:
            definition, _ = self.resolver.compile(record.workflow_ref)
            if definition.digest != record.definition_digest:
                raise _SourceChanged()
            value = restore_input(record.input(), self.held.get(record.run_id, {}))
            if record.parent_run_id is None:
                # A missing secret or writeOnly value is a clear failure before the bundle.
                resolve_secrets(definition, self._secret_source(record.run_id), value)
                value = check_input(definition, value)
        except _SourceChanged:
            self.fail_launch(record, token, "source_changed", "the workflow source changed after "
                             "it was queued; review the change, then start it again",
                             fixed=True)
            return False
        except Exception as exc:
            code, reason = _classify(exc)
            if code in ("workflow_invalid", "workflow_not_found") and self._deleted(record):
                code, reason = "workflow_not_found", (
                    f"workflow '{workflow_name(record.workflow_ref)}' no longer exists (its "
                    "file was removed after the run was queued); restore it or start another")
            self.fail_launch(record, token, code, self.relative(reason))
            return False
        act.definition = definition
        try:
            if record.parent_run_id is not None:
                # A continuation: the launch input is the answer to the parent's checkpoint.
                driver, act.checkpoint = engine.prepare_answer(
                    record.parent_run_id, value, lambda _m: definition, control=act.control,
                    run_id=record.run_id, definition=definition)
            else:
                _, driver = engine.create(definition, value, workflow_ref=record.workflow_ref,
                                          run_id=record.run_id, control=act.control)
        except ClaimLost:
            raise
        except WfrunError as exc:
            code, reason = _classify(exc)
            self.fail_launch(record, token, code, reason)
            return False
        self.crash("during_starting")
        act.driver = driver
        # The launch goes `running` now (a folder) or with the first node's start (a
        # database bundle, link.py): a cancel that won meanwhile refuses it, and `_lost`
        # ends the launch and the bundle.
        driver.bundle.start_launch()
        return True

    @staticmethod
    def _deleted(record: LaunchRecord) -> bool:
        path = record.workflow_path
        return path is not None and not Path(path).exists()

    def _run(self, act: Activation) -> RunOutcome:
        """Release the engine to run the first node; record how the run ended."""
        driver, engine = act.driver, act.engine
        assert driver is not None
        assert engine is not None
        self.crash("before_executor_release")
        self._keeper.add(act)
        if act.checkpoint is not None:
            outcome = engine.drive_continuation(driver, act.checkpoint)
        else:
            assert act.definition is not None
            outcome = driver.drive(act.definition.start)
        self.record_outcome(act, outcome)
        return outcome

    def _resume(self, act: Activation, engine: Engine) -> RunOutcome | None:
        self._keeper.add(act)

        def resolve(manifest: dict[str, Any]) -> WorkflowDefinition:
            definition, _ = self.resolver.compile(str(manifest.get("workflow_ref")))
            act.definition = definition
            return definition

        try:
            outcome = engine.resume(act.record.run_id, resolve, control=act.control,
                                    force=act.force)
        except SecretMissing as exc:
            # Nothing ran and nothing is lost: park it until it is resumed with the value.
            log.warning("run %s not resumed: %s", act.record.run_id, exc.message)
            self.store.launches.park(act.record.run_id, act.token, mode="explicit")
            return None
        self.record_outcome(act, outcome)
        return outcome

    def _engine(self, record: LaunchRecord, token: str,
                known: dict[str, Any] | None = None, act: Activation | None = None) -> Engine:
        launches = self.store.launches

        # While the row is `running` and our lease surely has a third of its length
        # left, nothing else can change it: a reclaim needs an expired lease, a cancel
        # of a running row needs our token. Only then is the fence answered locally, on
        # the engine's clock from the last committed answer (Activation.held); every
        # other write asks the store.
        known = {"running": False, "until": 0.0} if known is None else known

        def fence() -> bool:
            # A database that went away (a restart, a network blip; Postgres raises plain
            # StoreUnavailable) is waited for, up to a third of the lease, and asked again:
            # only its answer says the claim is still ours, so nothing runs unfenced.
            give_up = self.clock.monotonic() + self.lease_seconds / 3
            while True:
                try:
                    if known["running"] and self.clock.monotonic() < known["until"]:
                        return True
                    held = launches.check_claim(record.run_id, token)
                    break
                except StoreError as exc:
                    if type(exc) is not StoreUnavailable or self.clock.monotonic() >= give_up:
                        return False
                    self.clock.sleep(0.2)
            if isinstance(held, LostRace):
                known["running"] = False
                return False
            known["running"] = held == "running"
            return True

        opts = self.options
        return Engine(runs_dir=self.runs_dir, clock=self.clock, executor=opts.executor(record),
                      notifications=opts.notifications, observer=opts.observer,
                      durability=opts.durability, project_root=opts.project_root,
                      work_dir=opts.project_root, fence=fence, processes=opts.processes,
                      crash_point=opts.crash_point,
                      secret_source=self._secret_source(record.run_id),
                      rows=self.rows, claim=token, patience=self.lease_seconds / 3,
                      launch=None if act is None else self._link(act),
                      # Only a take-over (the claim found the row `running`: its runner
                      # died mid-node). A park stopped its node itself; that resumes as before.
                      effects_guarded=lambda: record.status == "running"
                      and self._controller_child(record.run_id))

    def _controller_child(self, run_id: str) -> bool:
        """Whether `run_id` is the current attempt of a controller's child request (its
        action nodes are effects of that controller's operation, seed 004). Both stores
        hold the controller tables; a store without them has no children."""
        requests = getattr(self.store, "workflow_requests", None)
        return requests is not None and requests.find_by_run(run_id) is not None

    def _link(self, act: Activation) -> Link:
        """The launch's transitions that commit in its database bundle's writes."""
        launches = self.store.launches
        run_id, token = act.record.run_id, act.token

        def running() -> Step:
            sent = self.clock.monotonic()

            def ran(record: LaunchRecord) -> None:
                act.running(record, sent, self.fence_margin)
                self._scrub_later()
                self.crash("after_running")  # with the first node's start; it has not run

            return Step(lambda bundle: launches.mark_running(run_id, token, bundle=bundle),
                        ran)

        def ended(outcome: RunOutcome) -> Step | None:
            if outcome.parked:
                return None

            def recorded(_record: LaunchRecord) -> None:
                act.recorded = True

            return Step(self._ending(act, outcome), recorded)

        return Link(running, ended)

    def bare_engine(self) -> Engine:
        """An engine that only records endings (no claim: unfenced, as a folder's lock
        or the launch's own state decides who may write)."""
        return Engine(runs_dir=self.runs_dir, clock=self.clock, rows=self.rows)

    def _secret_source(self, run_id: str) -> SecretSource:
        base = self.options.secret_source
        held = {k: v for k, v in self.held.get(run_id, {}).items() if isinstance(v, str)}
        return SecretSource(given={**base.given, **held}, environ=base.environ) if held \
            else base

    # -- endings ---------------------------------------------------------------------
    def record_outcome(self, act: Activation, outcome: RunOutcome) -> None:
        """Map an engine outcome onto the launch row, with a follow-up when one is due."""
        self.crash("before_outcome_recorded")
        if act.recorded:
            return  # committed with the bundle's seal (link.py)
        if outcome.parked:
            if act.claim_lost:
                return  # another runner owns the row now
            self.store.launches.park(act.record.run_id, act.token,
                                     mode="auto" if act.control.auto_resume else "explicit")
            return
        self._ending(act, outcome)(None)

    def _summary(self, outcome: RunOutcome) -> str:
        """A waiting run's checkpoint summary, safe to show a model (bounded, redacted)."""
        output = outcome.final_output
        summary = output.get("summary") if isinstance(output, dict) else None
        return self.safe(str(summary), outcome.state.input) if summary else ""

    def _ending(self, act: Activation, outcome: RunOutcome) -> Transition:
        """The transition that records how a run ended (not parked) on its launch; it
        takes the bundle's seal along when given one (link.py)."""
        launches = self.store.launches
        run_id, token = act.record.run_id, act.token
        then = act.then_claim
        if outcome.status == "cancelled":
            return lambda bundle: launches.cancel(run_id, claim_token=token, bundle=bundle,
                                                  then_claim=then)
        if outcome.status in ("completed", "waiting"):
            presentation = None
            session = act.record.origin_session_id
            waiting = outcome.status == "waiting"
            presents = act.definition is not None and bool(act.definition.presentation)
            if session is not None and (presents or waiting or self.for_sessions):
                # Durable with the ending: a restarted session still delivers it, and
                # refuses a new start until it has. A checkpoint without a presentation
                # still tells the session that the run waits (the default notice).
                presentation = new_intent(session_id=session, run_id=run_id,
                                          workflow=act.workflow, cause="presentation",
                                          source="run_presentation", state=outcome.status,
                                          node=outcome.state.waiting_on if waiting else None,
                                          reason=self._summary(outcome) if waiting else "")
            return lambda bundle: launches.finish(run_id, token, waiting=waiting,
                                                  turn_intent=presentation, bundle=bundle,
                                                  then_claim=then)
        error = outcome.error or {}
        code = FAILURE_CODES.get(outcome.status, "run_failed")
        if error.get("code") == "interrupted":
            code = "interrupted"
        node = error.get("node")
        reason = str(error.get("message") or f"the run ended {outcome.status}")
        message = self.safe(f"node '{node}': {reason}" if node else reason, outcome.state.input)
        intent = None
        session = act.record.origin_session_id
        if session is not None:
            cause: TurnCause = "timed_out" if outcome.status == "timed_out" else "failed"
            intent = new_intent(session_id=session, run_id=run_id, workflow=act.workflow,
                                cause=cause, source=f"run_{outcome.status}",
                                state=outcome.status, reason=message, node=node)
        return lambda bundle: launches.fail(run_id, token, code=code, message=message,
                                            turn_intent=intent, bundle=bundle,
                                            then_claim=then)

    def fail_launch(self, record: LaunchRecord, token: str, code: LaunchErrorCode,
                    reason: str, *, fixed: bool = False) -> LaunchRecord | LostRace:
        """Fail a claimed launch with one eligible follow-up for its session. A `fixed`
        reason is wfrun's own text: it echoes no input, so none is redacted from it."""
        echoed = None if fixed or record.input_cleared else record.input()
        message = self.safe(reason, echoed)
        intent = None
        if record.origin_session_id is not None:
            intent = new_intent(session_id=record.origin_session_id, run_id=record.run_id,
                                workflow=workflow_name(record.workflow_ref),
                                cause="launch_failed", source="launch_failed",
                                state="failed_to_start", reason=message, node="$launch")
        result = self.store.launches.fail(record.run_id, token, code=code, message=message,
                                          turn_intent=intent)
        if isinstance(result, LostRace):
            return result  # a stale handler: the winner (e.g. a cancel) decided
        self._scrub()
        try:
            self.store.run_events.append(record.run_id, "launch_failed",
                                         {"code": code, "message": message},
                                         workflow_ref=record.workflow_ref,
                                         runner_id=self.runner_id)
        except StoreError:
            log.warning("could not record the launch_failed event of %s", record.run_id)
        return result

    def _crash_cause(self, act: Activation, exc: BaseException) -> str:
        """The exception's class and its text, masked like every run message (the
        secrets held for the run, the run input's secret-looking values) and bounded.
        Kept in memory only (`crash_causes`): the runner that ran the launch shows it
        (a foreground `wfrun run` prints it); what is persisted keeps the class alone,
        since an exception's text may hold input."""
        run_input = act.driver.state.input if act.driver is not None else None
        text = one_line(str(exc)) or "no message"
        return f"{type(exc).__name__}: {self.safe(text, run_input)}"

    def _crashed(self, act: Activation, exc: BaseException) -> None:
        """An unexpected exception on the run path: end the bundle (if the run began)
        and the launch as failed, so neither waits for a lease to expire."""
        began = self._began(act.record.run_id)
        started = act.record.status == "running" or act.driver is not None or began
        reason = (f"the run crashed ({type(exc).__name__}); the runner that ran it logged "
                  "the cause" if started else _classify(exc)[1])
        self.crash_causes[act.record.run_id] = self._crash_cause(act, exc)
        while len(self.crash_causes) > CRASH_CAUSES_KEPT:
            self.crash_causes.pop(next(iter(self.crash_causes)))
        if act.driver is not None:
            act.driver.bundle.close()  # let go of the lock so the ending can be written
        if began:
            # We still hold the claim; the engine may not exist (its factory failed).
            engine = act.engine or self.bare_engine()
            try:
                ended = engine.abandon(act.record.run_id, "failed", code="crashed",
                                       reason=reason)
            except Exception:
                log.exception("could not end the bundle of %s", act.record.run_id)
                ended = None
            if ended is not None and (ended.status, (ended.error or {}).get("code")) != (
                    "failed", "crashed"):
                # The run had ended before the exception: its ending is the truth.
                try:
                    self.record_outcome(act, ended)
                except Exception:
                    log.exception("could not record the ending of %s", act.record.run_id)
                return
        try:
            self.fail_launch(act.record, act.token,
                             "run_failed" if started else _classify(exc)[0], reason)
        except Exception:
            # The store is down: the lease expires and the next runner settles the run
            # from its bundle (which says failed, if the write above got through).
            log.exception("could not record the failure of %s", act.record.run_id)

    def _began(self, run_id: str) -> bool:
        """Whether the run's bundle began; False when it cannot be read (then there is
        no bundle this runner can end either)."""
        try:
            return self.reader.started(run_id)
        except WfrunError:
            return False

    def _lost(self, act: Activation) -> RunOutcome | None:
        """A fence or renewal refused us: a cancel, or another runner took the claim."""
        try:
            current = self.store.launches.get(act.record.run_id)
        except StoreError:
            current = None
        if act.driver is not None:
            act.driver.bundle.close()
        if current is None or (current.claim_token == act.token
                               and current.status in ("starting", "running")):
            # We let go but may still hold the claim (the store was unreachable): hand
            # the lease back so recovery takes the run now, not when the lease runs out.
            self._keeper.remove(act)  # no renewal may race the hand-back
            self.give_back(act.record.run_id, act.token)
        if current is not None and current.status == "cancelled" and act.engine is not None:
            if self.reader.started(act.record.run_id):
                return self._end_cancelled(act.record.run_id)
            act.engine.discard_unstarted(act.record.run_id, act.record.parent_run_id)
            return None
        session = act.record.origin_session_id
        if session is not None:
            intent = new_intent(session_id=session, run_id=act.record.run_id,
                                workflow=act.workflow, cause="claim_lost",
                                source="claim_lost", state="handed_off",
                                reason="another runner took over the run", eligible=False,
                                handoff=True)
            try:
                self.store.turn_intents.ensure(intent)
            except StoreError:
                log.warning("could not record the claim-lost intent for %s", act.record.run_id)
        return None

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
            if self.store.launches.yield_lease(run_id, token):
                log.info("run %s: lease given back (the run is let go)", run_id)
        except StoreError as exc:
            log.debug("run %s: cannot give the lease back yet (%s)", run_id, exc.message)
            return False
        return True

    def _give_back_later(self, run_id: str, token: str) -> None:
        give_up = self.clock.monotonic() + self.lease_seconds
        while self.clock.monotonic() < give_up:
            self.clock.sleep(GIVE_BACK_EVERY)
            if self._give_back_once(run_id, token):
                return

    def _end_cancelled(self, run_id: str) -> RunOutcome | None:
        """The row is `cancelled`: end the bundle the same way. The bundle's lock keeps
        out a runner still writing it (that runner records the cancel itself)."""
        engine = self.bare_engine()
        try:
            return engine.abandon(run_id, "cancelled", code="cancelled", reason="cancelled")
        except WfrunError as exc:
            log.info("run %s: cancel left to its runner (%s)", run_id, exc.message)
            return None

    # -- cancellation and recovery -----------------------------------------------------
    def cancel(self, run_id: str) -> LaunchRecord:
        """Cancel a launch now, or ask the live runner of a running one. A running
        launch whose runner died (its lease expired) is taken over and cancelled."""
        from .recovery import cancel

        return cancel(self, run_id)

    def _scrub(self) -> None:
        """After a transition cleared private input: fold the WAL into the database
        file and truncate it, so no stale WAL frame keeps a copy (`secure_delete`
        already zeroes it in the database file). Best effort: a busy store keeps the
        frames until the next scrub or checkpoint. This scrubs what is owed too."""
        checkpoint = getattr(self.store, "checkpoint", None)
        with self._scrub_lock:
            self._scrubs_owed = 0
        if not self.scrub_input or checkpoint is None:
            return
        try:
            checkpoint()
        except StoreError as exc:
            log.debug("could not checkpoint the store after clearing input: %s", exc.message)

    def _scrub_later(self, *, owe: bool = True) -> None:
        """An activation cleared input: scrub now only once the batch is due (a
        checkpoint per run made every later commit grow the WAL again)."""
        now = self.clock.monotonic()
        with self._scrub_lock:
            if owe:
                if not self._scrubs_owed:
                    self._owed_since = now
                self._scrubs_owed += 1
            due = self._scrubs_owed >= SCRUB_BATCH or (
                self._scrubs_owed > 0 and now - self._owed_since >= SCRUB_SECONDS)
        if due:
            self._scrub()

    def flush_scrub(self) -> None:
        """Scrub the input of the activations since the last scrub, if any."""
        with self._scrub_lock:
            owed = self._scrubs_owed > 0
        if owed:
            self._scrub()

    def recover_expired(self, session_id: str | None = None) -> list[LaunchRecord]:
        """Reconcile `starting` rows whose lease expired with what their bundles show."""
        from .recovery import recover_expired

        return recover_expired(self, session_id)


class _SourceChanged(Exception):
    pass


def _token_values(value: Any, min_chars: int = 8) -> tuple[str, ...]:
    found: list[str] = []
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            if len(item) >= min_chars and not any(c.isspace() for c in item):
                found.append(item)
        elif isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return tuple(sorted(found, key=len, reverse=True))
