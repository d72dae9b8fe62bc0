"""Durable deferred launch: preparation in the tool call, activation at a safe boundary.

Preparation (`prepare`) runs every check that can run before the reply, then
commits a `queued` row with the final run id; nothing else is stored when a
check fails. Activation (`activate`) happens later, at an idle boundary of the
owning session or in a host: claim -> `starting` -> re-check the source (hash,
authoritative) -> build the engine and bundle -> `running` -> fence -> first node.
A startup failure becomes `failed` with a stable code and a safe message, plus
one eligible turn intent for the owning session, in one store transaction.
"""

from __future__ import annotations

import logging
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from runner.clock import Clock, SystemClock
from runner.compiler import WorkflowDefinition
from runner.engine import (
    AgentStepExecutor,
    Engine,
    NotificationSink,
    RunControl,
    RunOutcome,
    check_input,
    new_run_id,
)
from runner.engine.bundle import MANIFEST, read_json, read_trace
from runner.engine.processes import ProcessRegistry
from runner.engine.runner import Observer, RunDriver
from runner.errors import (
    ClaimLost,
    ConflictError,
    DefinitionInvalid,
    InputError,
    NotFoundError,
    OperationFailed,
    TemporaryError,
    WfrunError,
)
from runner.store import (
    LaunchErrorCode,
    LaunchRecord,
    LostRace,
    NewLaunch,
    Store,
    StoreError,
    StoreUnavailable,
    TurnCause,
)

from .intents import new_intent
from .keeper import CANCEL_EVENT, LeaseKeeper
from .safety import safe_message

log = logging.getLogger(__name__)
LEASE_SECONDS = 30.0
MIN_REDACTED_INPUT = 8  # shorter input strings are too likely to be ordinary words
RENEW_EVERY = 10.0


class Resolver(Protocol):
    """Finds and compiles a workflow by name or path (raises NotFound/DefinitionInvalid)."""

    def compile(self, ref: str) -> tuple[WorkflowDefinition, str]: ...


class PreflightError(InputError):
    """A start request failed a check; nothing was stored."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


@dataclass
class EngineOptions:
    executor: Callable[[LaunchRecord], AgentStepExecutor | None] = lambda _r: None
    notifications: NotificationSink | None = None
    observer: Observer | None = None
    durability: str = "full"
    project_root: Path | None = None
    processes: ProcessRegistry | None = None


def _classify(exc: BaseException) -> tuple[LaunchErrorCode, str]:
    """A stable code and a safe, actionable reason for a startup failure."""
    if isinstance(exc, NotFoundError):
        return "workflow_not_found", exc.message
    if isinstance(exc, DefinitionInvalid):
        return "workflow_invalid", exc.message
    if isinstance(exc, InputError) and "input" in exc.message:
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
    definition: WorkflowDefinition
    engine: Engine
    control: RunControl = field(default_factory=RunControl)
    claim_lost: bool = False
    driver: RunDriver | None = None
    checkpoint: str | None = None  # set for continuations: the parent's checkpoint

    @property
    def workflow(self) -> str:
        return self.definition.name or _workflow_name(self.record.workflow_ref)


class LaunchCoordinator:
    def __init__(self, store: Store, resolver: Resolver, runs_dir: Path, *, runner_id: str,
                 clock: Clock | None = None, options: EngineOptions | None = None,
                 lease_seconds: float = LEASE_SECONDS, renew_every: float = RENEW_EVERY,
                 secrets: tuple[str, ...] = (),
                 crash: Callable[[str], None] | None = None,
                 scrub_input: bool = True) -> None:
        self.store = store
        # Crash injection for tests: called at named points, a no-op in production.
        self.crash: Callable[[str], None] = crash or (lambda _point: None)
        self.resolver = resolver
        self.runs_dir = runs_dir
        self.runner_id = runner_id
        self.clock = clock or SystemClock()
        self.options = options or EngineOptions()
        self.lease_seconds = lease_seconds
        self.renew_every = renew_every
        self.secrets = secrets
        self._keeper = LeaseKeeper(self)
        # Checkpoint after input is cleared, so the -wal file keeps no copy of it.
        self.scrub_input = scrub_input

    def safe(self, text: str, run_input: Any = None) -> str:
        """Redacted, bounded text; string values of `run_input` (8+ characters) are
        redacted too, so a message that echoes raw input (a rendered command, a
        parse error) never carries it into the store or a model-facing turn."""
        return safe_message(text, self.secrets + _input_strings(run_input))

    # -- preparation ---------------------------------------------------------------
    def prepare(self, ref: str, run_input: Any = None, *, session_id: str | None = None,
                parent_run_id: str | None = None,
                presentation_pending: str | None = None) -> LaunchRecord:
        """Every pre-reply check, then one committed `queued` row with the final run id."""
        try:
            definition, stored_ref = self.resolver.compile(ref)
        except NotFoundError as exc:
            raise PreflightError("workflow_not_found", exc.message) from None
        except DefinitionInvalid as exc:
            raise PreflightError("workflow_invalid", exc.message) from None
        try:
            if parent_run_id is not None:
                # A continuation's input is the answer; the parent's input is carried.
                self._check_parent(parent_run_id, definition)
                value = _plain_json(run_input)
            else:
                value = check_input(definition, {} if run_input is None else run_input)
        except PreflightError:
            raise
        except InputError as exc:
            raise PreflightError("input_invalid", exc.message) from None
        if presentation_pending is not None:
            raise PreflightError("activation_failed", "the final presentation of run "
                                 f"{presentation_pending} is still pending; let it arrive, then "
                                 "start the next workflow")
        try:
            if session_id is not None:
                held = self.store.launches.find_session_reservation(session_id)
                if held is not None:
                    raise PreflightError("activation_failed", _reserved(held.run_id, held.status))
            run_id = new_run_id(definition.name, self.clock.now())
            source = {"source": definition.source.to_json() if definition.source else None,
                      "sources": [s.to_json() for s in definition.sources]}
            result = self.store.launches.enqueue(NewLaunch(
                run_id=run_id, workflow_ref=stored_ref, source=source,
                definition_digest=definition.digest, input=value,
                workflow_path=definition.source.path if definition.source else None,
                origin_session_id=session_id, parent_run_id=parent_run_id))
        except StoreError as exc:
            raise PreflightError("store_unavailable", self.safe(
                f"the workflow store is unavailable: {exc.message}")) from None
        except ValueError as exc:  # the store refuses the input (too large, not plain JSON)
            raise PreflightError("input_invalid", self.safe(str(exc))) from None
        self.crash("after_queued_commit")
        if isinstance(result, LostRace):
            if result.reason == "session_reserved":
                raise PreflightError("activation_failed",
                                     _reserved(result.holder or "?", "active"))
            raise PreflightError("activation_failed", f"could not queue the run ({result.reason})")
        return result

    def _check_parent(self, parent_run_id: str, definition: WorkflowDefinition) -> None:
        path = self.runs_dir / parent_run_id / MANIFEST
        if not path.is_file():
            raise PreflightError("workflow_not_found", f"no run '{parent_run_id}' to continue")
        manifest = read_json(path)
        if manifest.get("status") != "waiting":
            raise PreflightError("activation_failed", f"run '{parent_run_id}' is "
                                 f"{manifest.get('status')}, not waiting at a checkpoint")
        if manifest.get("definition_digest") != definition.digest:
            raise PreflightError("source_changed", f"the workflow changed since run "
                                 f"'{parent_run_id}' started; start a new run instead")

    # -- activation ----------------------------------------------------------------
    def claim_next(self, session_id: str | None) -> LaunchRecord | None:
        try:
            return self.store.launches.claim_next(runner_id=self.runner_id, session_id=session_id,
                                                  lease_seconds=self.lease_seconds)
        except StoreUnavailable:
            return None

    def activate(self, record: LaunchRecord) -> Activation | None:
        """Take a claimed `starting` launch to `running`; None when it failed or lost."""
        assert record.claim_token is not None
        token = record.claim_token
        self.crash("after_claim")
        try:
            definition, _ = self.resolver.compile(record.workflow_ref)
            if definition.digest != record.definition_digest:
                raise _SourceChanged()
            value = record.input()
            if record.parent_run_id is None:
                value = check_input(definition, value)
        except _SourceChanged:
            self.fail_launch(record, token, "source_changed", "the workflow source changed after "
                             "it was queued; review the change, then start it again")
            return None
        except Exception as exc:
            code, reason = _classify(exc)
            self.fail_launch(record, token, code, reason)
            return None
        try:
            engine = self._engine(record, token)  # builds the executor: it can fail too
        except Exception as exc:
            code, reason = _classify(exc)
            self.fail_launch(record, token, code, reason)
            return None
        act = Activation(record, token, definition, engine)
        try:
            if record.parent_run_id is not None:
                # A continuation: the launch input is the answer to the parent's checkpoint.
                driver, act.checkpoint = engine.prepare_answer(
                    record.parent_run_id, value, lambda _m: definition, control=act.control,
                    run_id=record.run_id, definition=definition)
            else:
                _, driver = engine.create(definition, value, workflow_ref=record.workflow_ref,
                                          run_id=record.run_id, control=act.control)
            bundle = driver.bundle
        except ClaimLost:
            self._drop_unstarted_bundle(record.run_id)
            return None  # cancelled or reclaimed while starting; the winner decides
        except Exception as exc:
            code, reason = _classify(exc)
            self.fail_launch(record, token, code, reason)
            return None
        self.crash("during_starting")
        running = self.store.launches.mark_running(record.run_id, token)
        if isinstance(running, LostRace):
            # Cancellation won the race: record it in the bundle we own, run nothing.
            bundle.fence = lambda: True
            driver.finish("cancelled", error={"code": "cancelled",
                                               "message": "cancelled before it started"})
            return None
        self._scrub()
        act.record = running
        act.driver = driver
        return act

    def run(self, act: Activation) -> RunOutcome | None:
        """Release the engine to run the first node; record how the run ended."""
        driver = act.driver
        assert driver is not None
        self.crash("before_executor_release")
        self._keeper.add(act)
        try:
            if act.checkpoint is not None:
                outcome = act.engine.drive_continuation(driver, act.checkpoint)
            else:
                outcome = driver.drive(act.definition.start)
        except ClaimLost:
            return self._lost(act, driver)
        finally:
            self._keeper.remove(act)
        self.record_outcome(act, outcome)
        return outcome

    def execute(self, record: LaunchRecord) -> RunOutcome | None:
        """Run a claimed launch to its end: activate a fresh one, resume one with a bundle."""
        if not (self.runs_dir / record.run_id).exists():
            act = self.activate(record)
            return self.run(act) if act is not None else None
        return self.resume_parked(record)

    def resume_parked(self, record: LaunchRecord,
                      on_control: Callable[[Activation], None] | None = None
                      ) -> RunOutcome | None:
        """Resume a parked (or crashed running) run this runner just claimed."""
        assert record.claim_token is not None
        token = record.claim_token
        engine = self._engine(record, token)
        act = Activation(record, token, WorkflowDefinition("", "", {}, {}), engine)
        if on_control is not None:
            on_control(act)
        if record.status == "starting":
            running = self.store.launches.mark_running(record.run_id, token)
            if isinstance(running, LostRace):
                return None
            act.record = running
        self._keeper.add(act)
        try:
            outcome = engine.resume(record.run_id, lambda m: self.resolver.compile(
                str(m.get("workflow_ref")))[0], control=act.control)
        except ClaimLost:
            return None
        except WfrunError as exc:
            self.fail_launch(act.record, token, "activation_failed", exc.message)
            return None
        finally:
            self._keeper.remove(act)
        self.record_outcome(act, outcome)
        return outcome

    def _drop_unstarted_bundle(self, run_id: str) -> None:
        """Cancellation won while the bundle was being created (the fence failed part
        way): no node ran, so the half-made bundle goes and the cancelled launch row
        stays the record, instead of a bundle that says `running` forever."""
        try:
            current = self.store.launches.get(run_id)
        except StoreError:
            return
        root = self.runs_dir / run_id
        if current is None or current.status != "cancelled" or not root.is_dir():
            return
        try:
            events = read_trace(root).events
        except (OperationFailed, OSError):
            return
        if all(event.get("type") == "run_started" for event in events):
            shutil.rmtree(root, ignore_errors=True)

    def _engine(self, record: LaunchRecord, token: str) -> Engine:
        launches = self.store.launches

        # While the row is `running` and our lease has a third of its length left,
        # nothing else can change it: a reclaim needs an expired lease, a cancel of a
        # running row needs our token. Only then is the fence answered locally; every
        # other write asks the store.
        margin_ms = self.lease_seconds * 1000 / 3
        known = {"running": False, "expires": 0}

        def fence() -> bool:
            if known["running"] and self.store.now_ms() + margin_ms < known["expires"]:
                return True
            try:
                held = launches.check_claim(record.run_id, token)
            except StoreError:
                return False
            if isinstance(held, LostRace):
                known["running"] = False
                return False
            known["running"] = held.status == "running"
            known["expires"] = held.claim_expires_at or 0
            return True

        opts = self.options
        return Engine(runs_dir=self.runs_dir, clock=self.clock, executor=opts.executor(record),
                      notifications=opts.notifications, observer=opts.observer,
                      durability=opts.durability, project_root=opts.project_root,
                      work_dir=opts.project_root, fence=fence, processes=opts.processes)

    def _lost(self, act: Activation, driver: RunDriver) -> RunOutcome | None:
        current = self.store.launches.get(act.record.run_id)
        if current is not None and current.status == "cancelled":
            driver.bundle.fence = lambda: True
            return driver.finish("cancelled", error={"code": "cancelled", "message": "cancelled"})
        driver.bundle.close()
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

    def record_outcome(self, act: Activation, outcome: RunOutcome) -> None:
        """Map an engine outcome onto the launch row, with a follow-up when one is due."""
        launches = self.store.launches
        run_id, token = act.record.run_id, act.token
        if outcome.parked:
            launches.park(run_id, token)
            return
        if outcome.status == "cancelled":
            launches.cancel(run_id, claim_token=token)
            return
        launches.finish(run_id, token)
        session = act.record.origin_session_id
        if session is None or outcome.status not in ("failed", "timed_out"):
            return
        error = outcome.error or {}
        cause: TurnCause = "timed_out" if outcome.status == "timed_out" else "failed"
        intent = new_intent(session_id=session, run_id=run_id, workflow=act.workflow,
                            cause=cause, source=f"run_{outcome.status}",
                            state=outcome.status,
                            reason=self.safe(str(error.get("message", "")), outcome.state.input),
                            node=error.get("node"))
        result = self.store.turn_intents.ensure(intent)
        if not isinstance(result, LostRace):
            self.store.turn_intents.make_eligible(intent.intent_id)

    # -- failures, cancellation, recovery --------------------------------------------
    def fail_launch(self, record: LaunchRecord, token: str, code: LaunchErrorCode,
                    reason: str) -> LaunchRecord | LostRace:
        message = self.safe(reason, None if record.input_cleared else record.input())
        intent = None
        if record.origin_session_id is not None:
            intent = new_intent(session_id=record.origin_session_id, run_id=record.run_id,
                                workflow=_workflow_name(record.workflow_ref),
                                cause="launch_failed", source="launch_failed",
                                state="failed_to_start", reason=message, node="$launch")
        result = self.store.launches.fail(record.run_id, token, code=code, message=message,
                                          turn_intent=intent)
        if isinstance(result, LostRace):
            return result  # a stale handler: the winner (e.g. a cancel) decided
        self._scrub()
        self.store.run_events.append(record.run_id, "launch_failed",
                                     {"code": code, "message": message},
                                     workflow_ref=record.workflow_ref, runner_id=self.runner_id)
        return result

    def cancel(self, run_id: str) -> LaunchRecord:
        """Cancel a queued/starting/parked launch now, or ask the runner of a running one."""
        record = self.store.launches.get(run_id)
        if record is None:
            raise NotFoundError(f"no queued or running launch '{run_id}'")
        if record.status == "running":
            self.store.run_events.append(run_id, CANCEL_EVENT, {}, runner_id=self.runner_id)
            return record
        result = self.store.launches.cancel(run_id)
        if isinstance(result, LostRace):
            if result.status in ("done", "failed", "cancelled"):
                raise ConflictError(f"run '{run_id}' already ended ({result.status})")
            raise ConflictError(f"run '{run_id}' changed state ({result.status}); try again")
        self._scrub()
        return result

    def _scrub(self) -> None:
        """After a transition cleared private input: fold the WAL into the database
        file and truncate it, so no stale WAL frame keeps a copy (`secure_delete`
        already zeroes it in the database file). Best effort: a busy store keeps the
        frames until the next scrub or checkpoint."""
        checkpoint = getattr(self.store, "checkpoint", None)
        if not self.scrub_input or checkpoint is None:
            return
        try:
            checkpoint()
        except StoreError as exc:
            log.debug("could not checkpoint the store after clearing input: %s", exc.message)

    def recover_expired(self, session_id: str | None = None) -> list[LaunchRecord]:
        """Reconcile `starting` rows whose lease expired with what their bundles show."""
        out: list[LaunchRecord] = []
        now = self.store.now_ms()
        for record in self.store.launches.query(statuses=["starting"], session_id=session_id):
            if record.lease_live(now):
                continue
            outcome, code, message = self._bundle_outcome(record)
            intent = None
            if outcome == "failed" and record.origin_session_id is not None:
                intent = new_intent(session_id=record.origin_session_id, run_id=record.run_id,
                                    workflow=_workflow_name(record.workflow_ref),
                                    cause="launch_failed",
                                    source="recovery", state="failed_to_start",
                                    reason=message or "", node="$launch")
            result = self.store.launches.recover_expired_starting(
                record.run_id, epoch=record.epoch, outcome=outcome, code=code, message=message,
                turn_intent=intent)
            if not isinstance(result, LostRace):
                out.append(result)
        if any(r.status != "queued" for r in out):
            self._scrub()
        return out

    def _bundle_outcome(self, record: LaunchRecord) -> tuple[Any, Any, str | None]:
        path = self.runs_dir / record.run_id / MANIFEST
        if not path.exists():
            return "queued", None, None
        try:
            manifest = read_json(path)
        except (OperationFailed, NotFoundError):
            return "failed", "activation_failed", "the run bundle is unreadable"
        if manifest.get("definition_digest") != record.definition_digest:
            return "failed", "source_changed", "the run bundle does not match the launch"
        try:
            current, _ = self.resolver.compile(record.workflow_ref)
        except WfrunError:
            current = None
        if current is None or current.digest != record.definition_digest:
            return "failed", "source_changed", ("the workflow source changed or disappeared "
                                                "while the run was starting")
        status = manifest.get("status")
        mapping = {"running": ("running", None, None), "waiting": ("parked", None, None),
                   "completed": ("done", None, None), "cancelled": ("cancelled", None, None)}
        if status in mapping:
            return mapping[status]
        return "failed", "activation_failed", f"the run ended {status} during startup"


class _SourceChanged(Exception):
    pass


def _input_strings(value: Any) -> tuple[str, ...]:
    found: list[str] = []
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            if len(item) >= MIN_REDACTED_INPUT:
                found.append(item)
        elif isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return tuple(sorted(found, key=len, reverse=True))  # longest first


def _plain_json(value: Any) -> Any:
    import json

    try:
        return json.loads(json.dumps(value, allow_nan=False))
    except (TypeError, ValueError):
        raise InputError("the answer must be JSON") from None


def _workflow_name(ref: str) -> str:
    name = ref.rsplit("/", 1)[-1]
    for suffix in (".yaml", ".yml"):
        name = name.removesuffix(suffix)
    return name


def _reserved(run_id: str, status: str) -> str:
    return (f"this session already has workflow run {run_id} ({status}); wait for it to end or "
            "cancel it before starting another")
