"""The launch queue's two ends: what goes in (`Preflight`), what is taken out (`Claims`).

Preparation runs every check a start can run before the reply, then commits one
`queued` row. Nothing is stored when a check fails; when they all pass, the row
holds the final run id, the source identity, the digest and the private input.
Every way of starting a run comes through here (`wfrun run` and `wfrun answer` too).

A runner claims the next launch (`Claims.next`), one launch by id (`by_id`: an
explicit resume, a foreground run), or queues a launch claimed in its own commit
(`coordinator.prepare_here`, remembered with `mark_by_id`). A run claimed by id
has no claim loop after it, so its runner pays the owed input scrub when it ends.
After a full or read-only disk refused a bundle, claiming waits (`FaultGate`) so a
host does not spin claiming and releasing the same launch.
"""

from __future__ import annotations

import json
import logging
import math
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from runner._leases import LEASE_SECONDS
from runner.compiler import WorkflowDefinition
from runner.compiler._templates import TemplateError, render_native
from runner.engine import check_input, new_run_id
from runner.engine._secrets import split_input
from runner.errors import (
    ConflictError,
    DefinitionInvalid,
    InputError,
    MachineFault,
    NotFoundError,
    WfrunError,
)
from runner.store import (
    InputScrub,
    LaunchBook,
    LaunchGate,
    LaunchRecord,
    LostRace,
    NewLaunch,
    NextClaim,
    StoreError,
    StoreUnavailable,
)

from ._errors import PreflightError
from ._held import HeldInput

if TYPE_CHECKING:
    from runner.clock import Clock
    from runner.engine import RunReader
    from runner.store import Store

    from ._activation import CrashPoints

log = logging.getLogger("wfrun.launch")


# -- the put end: preflight ---------------------------------------------------------

class Resolver(Protocol):
    """Finds and compiles a workflow by name or path (raises NotFound/DefinitionInvalid)."""

    def compile(self, ref: str) -> tuple[WorkflowDefinition, str]: ...


@dataclass(frozen=True)
class PlannedLaunch:
    """A start that passed every check (`Preflight.plan`): its row, and the writeOnly
    input values this process keeps for it."""

    launch: NewLaunch
    hidden: dict[str, Any]


class Preflight:
    """Prepares launches for one runner: the checks, then the `queued` row."""

    def __init__(self, store: Store, book: LaunchBook, resolver: Resolver, reader: RunReader,
                 clock: Clock, runs_dir: Path, held: HeldInput, *,
                 crash: CrashPoints,
                 cancel: Callable[[str], LaunchRecord]) -> None:
        self.store = store
        self.book = book
        self.resolver = resolver
        self.reader = reader
        self.clock = clock
        self.runs_dir = runs_dir
        self._held = held
        self.crash = crash
        self.cancel = cancel  # the runner's cancel (a `cancel_*` concurrency strategy)

    def safe(self, text: str, run_input: Any = None) -> str:
        return self._held.safe(text, run_input)

    def relative(self, text: str) -> str:
        """`text` with the project's files named relative to it (`relative`)."""
        return relative(self.runs_dir, text)

    def prepare(self, ref: str, run_input: Any = None, *, session_id: str | None = None,
                parent_run_id: str | None = None, presentation_pending: str | None = None,
                affinity_runner_id: str | None = None, run_id: str | None = None,
                claim_by: str | None = None, lease_seconds: float = LEASE_SECONDS,
                options: dict[str, Any] | None = None) -> LaunchRecord:
        """Every pre-reply check, then one committed `queued` row with the final run id
        (`claim_by`: claimed by that runner in the same commit; `options`: the private
        launch options, kept until it runs, e.g. a rerun's plan)."""
        definition, stored_ref, value = self._checked(ref, run_input, parent_run_id)
        if presentation_pending is None and session_id is not None:
            presentation_pending = self._pending_presentation(session_id)
        if presentation_pending is not None:
            raise PreflightError("activation_failed", "the final presentation of run "
                                 f"{presentation_pending} is still pending; let it arrive, then "
                                 "start the next workflow")
        try:
            if session_id is not None:
                held = self.book.reservation(session_id)
                if held is not None:
                    raise PreflightError("activation_failed", _reserved(held.run_id, held.status))
            launch, hidden = self._launch(
                definition, stored_ref, value, run_id, session_id=session_id,
                parent_run_id=parent_run_id, affinity_runner_id=affinity_runner_id,
                options=options)
            result = self.book.enqueue(launch, claim_by=claim_by,
                                       lease_seconds=lease_seconds)
        except StoreError as exc:
            raise PreflightError("store_unavailable", self.safe(
                f"the workflow store is unavailable: {exc.message}")) from None
        except ValueError as exc:  # the store refuses the input (too large, not plain JSON)
            raise PreflightError("input_invalid", self.safe(str(exc))) from None
        return self._queued(launch, hidden, result, claim_by)

    def plan(self, ref: str, run_input: Any, run_id: str) -> PlannedLaunch:
        """`prepare`'s checks for a detached start whose row another commit writes
        (a trigger's firings that arrive together: `TriggerLedger.fire_many`, one
        commit for all); then `queued` with what that commit made of it."""
        definition, stored_ref, value = self._checked(ref, run_input, None)
        try:
            return PlannedLaunch(*self._launch(definition, stored_ref, value, run_id))
        except ValueError as exc:
            raise PreflightError("input_invalid", self.safe(str(exc))) from None

    def queued(self, planned: PlannedLaunch, record: LaunchRecord) -> LaunchRecord:
        """After a planned launch was queued: as `prepare` after its commit."""
        return self._queued(planned.launch, planned.hidden, record, None)

    def _checked(self, ref: str, run_input: Any, parent_run_id: str | None
                 ) -> tuple[WorkflowDefinition, str, Any]:
        """The compiled workflow, the ref stored, and the input checked against it."""
        try:
            definition, stored_ref = self.resolver.compile(ref)
        except NotFoundError as exc:
            raise PreflightError("workflow_not_found", self.relative(exc.message)) from None
        except DefinitionInvalid as exc:
            raise PreflightError("workflow_invalid", self.relative(exc.message)) from None
        try:
            if parent_run_id is not None:
                # A continuation's input is the answer; the parent's input is carried.
                self._check_parent(parent_run_id, definition)
                return definition, stored_ref, _plain_json(run_input)
            return definition, stored_ref, check_input(
                definition, {} if run_input is None else run_input)
        except PreflightError:
            raise
        except InputError as exc:
            raise PreflightError("input_invalid", exc.message) from None

    def _launch(self, definition: WorkflowDefinition, stored_ref: str, value: Any,
                run_id: str | None, *, session_id: str | None = None,
                parent_run_id: str | None = None, affinity_runner_id: str | None = None,
                options: dict[str, Any] | None = None) -> tuple[NewLaunch, dict[str, Any]]:
        """The row to queue, and the writeOnly input values this process keeps."""
        # A controller child's run id is saved on its request before it is queued.
        run_id = run_id or new_run_id(definition.name, self.clock.now())
        hidden: dict[str, Any] = {}
        if parent_run_id is None and definition.write_only:
            # writeOnly fields never reach the store: the row holds `***`, this
            # process holds the value (a host elsewhere cannot activate it).
            value, hidden = split_input(definition, value)
        source = dict(definition.sources_json)
        # Flow control only where the workflow asks for it (a continuation has none).
        gated = parent_run_id is None and (definition.concurrency is not None
                                           or definition.rate_limit is not None)
        gate = launch_gate(definition, value) if gated else None
        return NewLaunch(
            run_id=run_id, workflow_ref=stored_ref, source=source,
            definition_digest=definition.digest, input=value,
            workflow_path=definition.source.path if definition.source else None,
            origin_session_id=session_id, parent_run_id=parent_run_id,
            affinity_runner_id=affinity_runner_id, options=options, gate=gate), hidden

    def _queued(self, launch: NewLaunch, hidden: dict[str, Any],
                result: LaunchRecord | LostRace, claim_by: str | None) -> LaunchRecord:
        """After the commit: the kept values, then a lost race named, or the
        concurrency strategy applied."""
        if hidden and not isinstance(result, LostRace):
            self._held.values[launch.run_id] = hidden
        if self.crash.hook is not None:
            self.crash.hook("after_queued_commit")
        if isinstance(result, LostRace):
            if result.reason == "session_reserved":
                raise PreflightError("activation_failed",
                                     _reserved(result.holder or "?", "active"))
            if result.reason == "continuation_exists":
                raise PreflightError("activation_failed", f"run '{launch.parent_run_id}' was "
                                     f"already answered (run {result.holder}); each waiting "
                                     "run continues once")
            raise PreflightError("activation_failed", f"could not queue the run ({result.reason})")
        gate = launch.gate
        if gate is not None and gate.strategy in ("cancel_newest", "cancel_running") \
                and claim_by is None:
            return self._apply_strategy(result, gate)
        return result

    def _apply_strategy(self, record: LaunchRecord, gate: LaunchGate) -> LaunchRecord:
        """`concurrency.strategy` when the key is full: `cancel_newest` cancels the run
        just queued, `cancel_running` the oldest runs holding the key (the new one
        starts once they have stopped)."""
        assert gate.concurrency_key is not None
        assert gate.concurrency_limit is not None
        try:
            holders = self.book.gate_holders(gate.concurrency_key)
            over = len(holders) - gate.concurrency_limit + 1
            if over <= 0:
                return record
            if gate.strategy == "cancel_newest":
                return self.cancel(record.run_id)
            for run_id, _ in holders[:over]:
                self.cancel(run_id)
        except WfrunError as exc:  # it ended meanwhile, or the store refused: it waits
            log.info("concurrency %s: %s", gate.strategy, exc.message)
        return record

    def _pending_presentation(self, session_id: str) -> str | None:
        """A run of this session whose closing presentation is not delivered yet."""
        try:
            pending = self.store.turn_intents.list_eligible(session_id)
        except StoreError:
            return None
        for intent in pending:
            if intent.cause == "presentation":
                return intent.run_id
        return None

    def _check_parent(self, parent_run_id: str, definition: WorkflowDefinition) -> None:
        try:
            manifest = self.reader.manifest(parent_run_id)
        except NotFoundError:
            raise PreflightError("workflow_not_found",
                                 f"no run '{parent_run_id}' to continue") from None
        except StoreError:
            raise  # the store failed, not the parent: the caller says so
        except WfrunError as exc:
            raise PreflightError("activation_failed", exc.message) from None
        status = self.reader.status(parent_run_id) or manifest.get("status")
        if status != "waiting":
            raise PreflightError("activation_failed", f"run '{parent_run_id}' is "
                                 f"{status}, not waiting at a checkpoint")
        if self.reader.answered(parent_run_id):
            child = self.reader.continued_by(parent_run_id)
            raise PreflightError("activation_failed", f"run '{parent_run_id}' was already "
                                 f"answered{f' (run {child})' if child else ''}; each waiting "
                                 "run continues once")
        if manifest.get("definition_digest") != definition.digest:
            raise PreflightError("source_changed", f"the workflow changed since run "
                                 f"'{parent_run_id}' started; start a new run instead")


def relative(runs_dir: Path, text: str) -> str:
    """Messages shown to a model or kept in the store name files relative to the
    project, never by absolute path (it says where the user's files live)."""
    root = str(runs_dir.parent.parent) + "/"
    return text.replace(root, "") if len(root) > 1 else text


#: The longest rendered concurrency or rate key.
GATE_KEY_MAX = 200


def launch_gate(definition: WorkflowDefinition, value: Any) -> LaunchGate | None:
    """The run's flow-control gate: its keys rendered over its input (DESIGN §10)."""
    concurrency, rate = definition.concurrency, definition.rate_limit
    if concurrency is None and rate is None:
        return None
    context = {"input": value, "workflow": definition.name}

    def key(template: str, what: str) -> str:
        try:
            text = str(render_native(template, context))
        except TemplateError as exc:
            raise PreflightError("input_invalid", f"{what} key: {exc}") from None
        if not text or len(text) > GATE_KEY_MAX or not text.isprintable():
            raise PreflightError("input_invalid", f"{what} key must render to 1-"
                                 f"{GATE_KEY_MAX} printable characters")
        return f"{definition.name}:{text}"

    return LaunchGate(
        concurrency_key=key(concurrency.key, "concurrency") if concurrency else None,
        concurrency_limit=concurrency.limit if concurrency else None,
        strategy=concurrency.strategy if concurrency else None,
        rate_key=key(rate.key, "rate_limit") if rate else None,
        rate_limit=rate.limit if rate else None,
        rate_per_ms=max(1, round(rate.per * 1000)) if rate else None)


def _plain_json(value: Any) -> Any:
    try:
        return json.loads(json.dumps(value, allow_nan=False))
    except (TypeError, ValueError):
        raise InputError("the answer must be JSON") from None


def _reserved(run_id: str, status: str) -> str:
    return (f"this session already has workflow run {run_id} ({status}); wait for it to end or "
            "cancel it before starting another")


# -- the take end: claims ------------------------------------------------------------

HOLD_OFF_SECONDS = 30.0
#: How often a let-go run's lease hand-back asks an unreachable store again.
GIVE_BACK_EVERY = 0.5
#: Claims whose send time is kept for their run's fence (`Claims.sent`); a claim never
#: begun (released at a host's stop) is forgotten once this many wait at a run's begin.
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
        self._idle = False  # an empty queue was found with its scrub left to pay_idle_scrub
        self._lock = threading.Lock()
        self._by_id: set[str] = set()  # launches claimed by id, not yet begun
        self._sent: dict[str, float] = {}  # claim token -> when its claim was sent

    def next(self, session_id: str | None, *, idle_scrub: bool = True) -> LaunchRecord | None:
        """The next claimable launch, claimed; None when there is none, the store is
        unavailable (`error` says why) or claims wait for the disk. None because the
        queue is empty pays the owed input scrub; with `idle_scrub` False it is only
        noted, for `pay_idle_scrub` (a host starts its slots' items first)."""
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
            if idle_scrub:
                self._scrub.flush()  # idle: no activation's input outlives the busy spell
            else:
                self._idle = True
            return None
        self._scrub.tick()
        with self._lock:  # as `sent` does for a claim taken with a run's ending
            self._sent[claimed.claim_token or ""] = at
        return claimed

    def pay_idle_scrub(self) -> None:
        """Pay the input scrub an empty queue made due (`next(..., idle_scrub=False)`)."""
        if self._idle:
            self._idle = False
            self._scrub.flush()

    def sent(self, record: LaunchRecord | None, at: float) -> None:
        """`record` was claimed here by a statement sent at `at` (the engine's monotonic
        clock): its run's fence answers from the claim's lease until it needs to ask
        (`LeaseFence.held`), as it does from `mark_running`'s, instead of reading the
        row before the bundle's first write."""
        if record is None or record.claim_token is None:
            return
        with self._lock:
            self._sent[record.claim_token] = at

    def taken(self, record: LaunchRecord) -> tuple[float | None, bool]:
        """What this runner knows of its claim on `record`, asked once when its run
        begins: when the claim was sent (None: not claimed here, `sent`) and whether it
        was claimed by id (`mark_by_id`: no claim loop follows its run)."""
        with self._lock:
            sent = self._sent.pop(record.claim_token or "", None)
            if len(self._sent) >= SENT_KEPT:  # claims never begun (released at a stop)
                self._sent.clear()
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
