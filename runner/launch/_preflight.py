"""Preparation: every check a start can run before the reply, then one `queued` row.

Nothing is stored when a check fails; when they all pass, one committed row holds
the final run id, the source identity, the digest and the private input. Every
way of starting a run comes through here (`wfrun run` and `wfrun answer` too).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from runner._leases import LEASE_SECONDS
from runner.compiler import WorkflowDefinition
from runner.compiler._templates import TemplateError, render_native
from runner.engine import check_input, new_run_id
from runner.engine._secrets import split_input
from runner.errors import DefinitionInvalid, InputError, NotFoundError, WfrunError
from runner.store import LaunchBook, LaunchGate, LaunchRecord, LostRace, NewLaunch, StoreError

from ._held import HeldInput

if TYPE_CHECKING:
    from runner.clock import Clock
    from runner.engine import RunReader
    from runner.store import Store

    from ._activation import CrashPoints

log = logging.getLogger("wfrun.launch")


class Resolver(Protocol):
    """Finds and compiles a workflow by name or path (raises NotFound/DefinitionInvalid)."""

    def compile(self, ref: str) -> tuple[WorkflowDefinition, str]: ...


class PreflightError(InputError):
    """A start request failed a check; nothing was stored."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


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
