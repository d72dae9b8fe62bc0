"""The session controller: wfrun's `HostListener` for one agent session.

It answers `workflow` tool calls, activates queued launches only at safe idle
boundaries (a settled turn, or session start with no active turn), runs the
activated workflow on a worker thread, delivers agent steps into the session
(the `session` executor), and delivers turn intents, presentations and passive
notifications with a session-log scan first so nothing is sent twice.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any

from runner.compiler.templates import TemplateError, render_text
from runner.engine import AgentStep, RunControl, RunOutcome
from runner.engine.agent import TurnKind
from runner.errors import WfrunError
from runner.launch import (
    LaunchCoordinator,
    PreflightError,
    fallback_text,
    message_id,
    workflow_name,
)
from runner.launch.coordinator import Activation
from runner.launch.intents import (
    AGENT_STEP_TYPE,
    DEFERRED_TURN_TYPE,
    MESSAGE_SCHEMA,
    NOTIFICATION_TYPE,
    PRESENTATION_TYPE,
)
from runner.store import LostRace, NewNotification, StoreError, TurnIntent, TurnResolution

from .protocol import Host, SessionEntry, ToolReply
from .tool import validate_call

if TYPE_CHECKING:
    from runner.host.runtime.watch import SourceWatch

log = logging.getLogger(__name__)
RESOLUTION_BY_TYPE: dict[str, TurnResolution] = {
    AGENT_STEP_TYPE: "workflow_prompt", PRESENTATION_TYPE: "presentation",
    DEFERRED_TURN_TYPE: "fallback"}
Lister = Callable[[int], str]
StatusReader = Callable[[str], dict[str, Any]]


@dataclass
class _StepTurn:
    step: AgentStep
    message: str
    kind: TurnKind
    sending: bool = False
    delivered: bool = False  # set only after the message is in the session
    started: bool = False  # a turn started after delivery (only its settle counts)
    settled: threading.Event = field(default_factory=threading.Event)


class SessionExecutor:
    """Agent steps go into the owning session as messages; the model submits via the tool."""

    name = "session"

    def __init__(self, controller: SessionController) -> None:
        self.controller = controller

    def run_turn(self, step: AgentStep, message: str, kind: TurnKind) -> None:
        turn = _StepTurn(step, message, kind)
        self.controller._enqueue_step(turn)
        while not turn.settled.is_set() and not step.should_stop() and not step.accepted:
            turn.settled.wait(0.05)
        self.controller._step_done(turn)


class SessionController:
    def __init__(self, host: Host, coordinator: LaunchCoordinator, *,
                 lister: Lister | None = None, status: StatusReader | None = None,
                 watch: SourceWatch | None = None) -> None:
        self.host = host
        self.watch = watch  # optional, owned (started, stopped) by the session adapter
        self.coordinator = coordinator
        self.store = coordinator.store
        self.lister = lister
        self.status_reader = status
        self.session_id = host.session_id()
        self._lock = threading.RLock()
        self._turn_active = False
        self._shutdown = False
        self.active: Activation | None = None
        self._thread: threading.Thread | None = None
        self._step: _StepTurn | None = None
        self.outcomes: list[RunOutcome] = []
        self.errors: list[str] = []

    # -- HostListener ----------------------------------------------------------------
    def on_session_start(self, reason: str) -> None:
        if not self.host.is_idle():
            return  # recovery waits for the next settled turn
        self._boundary()

    def on_turn_started(self) -> None:
        with self._lock:
            self._turn_active = True
            if self._step is not None and self._step.delivered:
                self._step.started = True

    def on_turn_settled(self, aborted: bool) -> None:
        with self._lock:
            self._turn_active = False
            turn = self._step
        if turn is not None and turn.delivered and turn.started:
            # A duplicate settle before the step's own turn began is not a turn the
            # model spent on the step; it must not cost a reminder.
            turn.settled.set()
        if aborted and self.active is not None:
            self.active.control.pause()  # Escape holds the run instead of nudging it
            return
        self._boundary()

    def on_session_shutdown(self, reason: str) -> None:
        with self._lock:
            self._shutdown = True
            act = self.active
        if act is not None:
            # Only this session ever claims its launches, so `auto` here means: resumed
            # when this session starts again (seed 000 §6), never by a host.
            act.control.park(f"session shutdown: {reason}", auto_resume=True)
        if self._thread is not None:
            self._thread.join(timeout=10)

    def on_tool_call(self, call_id: str, name: str, args: dict[str, Any]) -> ToolReply:
        if name != "workflow":
            return ToolReply(f"unknown tool '{name}'", is_error=True)
        try:
            action, params = validate_call(args)
            return self._dispatch(action, params)
        except PreflightError as exc:
            return ToolReply(exc.message, {"action": args.get("action"), "code": exc.code},
                             is_error=True)
        except WfrunError as exc:
            return ToolReply(exc.message, {"action": args.get("action")}, is_error=True)
        except StoreError as exc:
            return ToolReply(self.coordinator.safe(f"the workflow store failed: {exc.message}"),
                             {"action": args.get("action")}, is_error=True)

    # -- tool actions ----------------------------------------------------------------
    def _dispatch(self, action: str, p: dict[str, Any]) -> ToolReply:
        if action in ("submit", "update"):
            turn = self._step
            if turn is None:
                return ToolReply("no workflow step is open in this session", is_error=True)
            res = turn.step.handle_tool_call({"action": action, **p})
            return ToolReply(res.message, {"action": action, "ok": res.ok}, is_error=not res.ok)
        if action == "start":
            record = self.coordinator.prepare(p["workflow"], p.get("input"),
                                              session_id=self.session_id)
            self._watch_queued()
            name = workflow_name(record.workflow_ref)
            return ToolReply(f"Workflow {name} queued (run {record.run_id}).",
                             {"action": "start", "workflow": name, "runId": record.run_id,
                              "queued": True})
        if action == "answer":
            parent = p.get("runId") or self._waiting_run()
            if parent is None:
                return ToolReply("no run of this session is waiting; pass runId", is_error=True)
            ref = self._workflow_ref(parent)
            record = self.coordinator.prepare(ref, p["input"], session_id=self.session_id,
                                              parent_run_id=parent)
            self._watch_queued()
            return ToolReply(f"Answer queued as run {record.run_id} (continues {parent}).",
                             {"action": "answer", "runId": record.run_id, "parentRunId": parent,
                              "queued": True})
        if action == "cancel":
            return self._cancel(p.get("runId"))
        if action in ("pause", "resume"):
            act = self.active
            if act is None:
                return ToolReply("no workflow is running in this session", is_error=True)
            if action == "pause":
                act.control.pause()
            else:
                act.control.resume()
            return ToolReply(f"Workflow run {act.record.run_id} {action}d.",
                             {"action": action, "runId": act.record.run_id})
        if action == "status":
            return self._status(p.get("runId"))
        offset = int(p.get("offset", 0))
        text = self.lister(offset) if self.lister else "no workflow catalog is configured"
        return ToolReply(text, {"action": "list", "offset": offset})

    def _cancel(self, run_id: str | None) -> ToolReply:
        act = self.active
        if act is not None and (run_id is None or run_id == act.record.run_id):
            act.control.cancel("cancelled by the model")
            return ToolReply(f"Workflow run {act.record.run_id} is being cancelled.",
                             {"action": "cancel", "runId": act.record.run_id})
        if run_id is None:
            held = self.store.launches.find_session_reservation(self.session_id)
            if held is None:
                return ToolReply("nothing to cancel in this session", is_error=True)
            run_id = held.run_id
        record = self.coordinator.cancel(run_id)
        return ToolReply(f"Workflow run {run_id} cancelled.",
                         {"action": "cancel", "runId": run_id, "status": record.status})

    def _status(self, run_id: str | None) -> ToolReply:
        if run_id is None:
            held = self.store.launches.find_session_reservation(self.session_id)
            if held is None:
                return ToolReply("no workflow is queued or running in this session",
                                 {"action": "status", "runId": None})
            run_id = held.run_id
        view = dict(self.status_reader(run_id)) if self.status_reader else {}
        # The tool's replies keep the session protocol's spelling (runId); the view is the
        # CLI's (run_id, as every `--json` output spells it).
        view.pop("run_id", None)
        view = {"runId": run_id, **view}
        state = view.get("status", "unknown")
        text = f"Run {run_id}: {state}"
        error = view.get("error")
        if isinstance(error, dict):
            text += f" ({error.get('code')}: {error.get('message')})"
        elif error:
            text += f" ({error})"
        return ToolReply(text, {"action": "status", **view})

    def _waiting_run(self) -> str | None:
        for outcome in reversed(self.outcomes):
            if outcome.status == "waiting":
                return outcome.run_id
        return None

    def _workflow_ref(self, run_id: str) -> str:
        record = self.store.launches.get(run_id)
        if record is not None:
            return record.workflow_ref
        manifest = self.coordinator.reader.manifest(run_id)
        return str(manifest.get("workflow_ref") or manifest.get("workflow"))

    # -- boundaries --------------------------------------------------------------------
    def _boundary(self) -> None:
        """A safe idle point: activate queued work, then deliver what is due."""
        if self._shutdown:
            return
        self._activate()
        self._watch_queued()
        self._deliver_intents()
        self._deliver_notifications()
        self._deliver_step()

    def _watch_queued(self) -> None:
        """Hand the optional source watch this session's queued launches (it only
        reports drift; activation's digest check decides)."""
        if self.watch is None:
            return
        try:
            self.watch.update(self.store.launches.query(statuses=["queued"],
                                                        session_id=self.session_id))
        except StoreError as exc:
            log.debug("source watch not refreshed: %s", exc.message)

    def _activate(self) -> None:
        with self._lock:
            if self.active is not None or (self._thread is not None
                                           and self._thread.is_alive()):
                return
        try:
            self.coordinator.recover_expired(self.session_id)
        except StoreError as exc:
            log.warning("launch recovery failed: %s", exc.message)
        record = self.coordinator.claim_next(self.session_id)
        if record is None:
            return
        # Activation happens here, at the boundary; only the nodes run on the worker.
        act = self.coordinator.begin(record, control=RunControl(), on_start=self._adopt)
        if act is None:
            with self._lock:
                self.active = None
            return
        target = partial(self.coordinator.drive, act)
        with self._lock:
            self._thread = threading.Thread(target=self._run, args=(target,), daemon=True,
                                            name=f"wfrun-run-{record.run_id}")
            self._thread.start()

    def _adopt(self, act: Activation) -> None:
        """The run's control becomes the session's, so pause/cancel reach it."""
        with self._lock:
            self.active = act

    def _run(self, target: Callable[[], RunOutcome | None]) -> None:
        try:
            outcome = target()
        except Exception as exc:  # execute catches everything; this is a last guard
            log.exception("workflow run crashed")
            self.errors.append(f"{type(exc).__name__}: {exc}")
            outcome = None
        with self._lock:
            self.active = None
            if outcome is not None:
                self.outcomes.append(outcome)
        if self.host.is_idle() and not self._shutdown:
            self._boundary()

    def _presentation_text(self, intent: TurnIntent) -> str | None:
        """Render a run's closing presentation from its definition and bundle."""
        coordinator = self.coordinator
        try:
            record = self.store.launches.get(intent.run_id)
            if record is None or record.status != "done":
                return None
            definition, _ = coordinator.resolver.compile(record.workflow_ref)
            if definition.digest != record.definition_digest or not definition.presentation:
                return None
            state = coordinator.reader.state(intent.run_id)
            live = partial(coordinator.reader.live, intent.run_id)
            ctx = {"input": live(state.input), "outputs": live(state.outputs),
                   "results": live(state.results),
                   "run": {"id": intent.run_id, "status": state.status}, "project": {}}
            return render_text(definition.presentation, ctx)[:50_000]
        except (WfrunError, StoreError, TemplateError) as exc:
            log.warning("presentation of %s failed: %s", intent.run_id, exc)
            return None

    # -- deliveries --------------------------------------------------------------------
    def _sent_ids(self, key: str) -> dict[str, SessionEntry]:
        out: dict[str, SessionEntry] = {}
        for entry in self.host.read_session_entries():
            details = entry.details or {}
            value = details.get(key)
            if isinstance(value, str):
                out[value] = entry
        return out

    def _deliver_intents(self) -> None:
        intents = self.store.turn_intents
        try:
            eligible = intents.list_eligible(self.session_id)
        except StoreError:
            return
        for intent in eligible:
            claimed = intents.claim_delivery(intent.intent_id)
            if isinstance(claimed, LostRace):
                continue
            token = claimed.delivery_claim_token or ""
            seen = self._sent_ids("turnIntentId").get(intent.intent_id)
            if seen is not None:
                # Sent before a crash; resolve without sending it again.
                seen_as = RESOLUTION_BY_TYPE.get(seen.custom_type or "", "fallback")
                intents.resolve(intent.intent_id, token, resolution=seen_as,
                                message_id=message_id(intent.intent_id, seen_as))
                continue
            details = {"schema": MESSAGE_SCHEMA, "turnIntentId": intent.intent_id,
                       "runId": intent.run_id, "cause": intent.cause}
            kind = DEFERRED_TURN_TYPE
            resolution: TurnResolution = "fallback"
            text = None
            if intent.cause in ("presentation", "controller_interrupted", "claim_lost"):
                # A run that ended with a presentation: it resolves whatever intent of
                # the run is pending, instead of a second turn.
                text = self._presentation_text(intent)
                if text is not None:
                    kind, resolution = PRESENTATION_TYPE, "presentation"
                    details["presentationId"] = f"presentation:{intent.run_id}"
            if text is None:
                text = fallback_text(intent.fallback_facts)
            try:
                self.host.append_message(kind, text, details,
                                         deliver_as="follow_up", trigger_turn=True)
            except Exception:
                intents.release_delivery(intent.intent_id, token)
                raise
            self.coordinator.crash("after_session_append")
            intents.resolve(intent.intent_id, token,
                            resolution=resolution,
                            message_id=message_id(intent.intent_id, resolution))

    def _deliver_notifications(self) -> None:
        notes = self.store.notifications
        try:
            pending = notes.list_pending(self.session_id)
        except StoreError:
            return
        if not pending:
            return
        sent = self._sent_ids("notificationId")
        for note in pending:
            try:
                claimed = notes.claim_delivery(note.notification_id)
                if isinstance(claimed, LostRace):
                    continue
                if note.notification_id not in sent:
                    self.host.append_message(NOTIFICATION_TYPE, note.content,
                                             {"notificationId": note.notification_id,
                                              "runId": note.run_id, "kind": note.kind},
                                             deliver_as="next_turn", trigger_turn=False)
                notes.mark_delivered(note.notification_id, claimed.delivery_claim_token or "")
            except StoreError as exc:
                # A passive report stays in the outbox; after the claim lease a later
                # boundary finds it in the session log (or sends it) and marks it. A
                # store hiccup here must not fail the notify node or the host's turn.
                log.warning("notification %s not delivered yet: %s", note.notification_id,
                            exc.message)

    # -- the session executor's side -----------------------------------------------------
    def _enqueue_step(self, turn: _StepTurn) -> None:
        with self._lock:
            self._step = turn
        if self.host.is_idle() and not self._turn_active:
            self._deliver_step()

    def _deliver_step(self) -> None:
        with self._lock:
            turn = self._step
            if turn is None or turn.sending or self._shutdown:
                return
            turn.sending = True
        details = {"runId": turn.step.contract.run_id, "step": turn.step.contract.step,
                   "attempt": turn.step.contract.attempt, "kind": turn.kind}
        self.host.append_message(AGENT_STEP_TYPE, turn.message, details,
                                 deliver_as="follow_up", trigger_turn=True)
        with self._lock:
            turn.delivered = True

    def quiet(self) -> bool:
        """True when no workflow work is in flight: no run, or one waiting on the session."""
        with self._lock:
            thread, turn = self._thread, self._step
        if thread is None or not thread.is_alive():
            return True
        return turn is not None and turn.delivered and not turn.settled.is_set()

    def wait_quiet(self, timeout: float = 30.0) -> None:
        """Block until `quiet()` (for hosts that drive turns on one thread, like tests)."""
        clock = self.coordinator.clock
        end = clock.monotonic() + timeout
        while not self.quiet():
            if clock.monotonic() > end:
                raise TimeoutError("the workflow run did not reach a quiet point in time")
            clock.sleep(0.002)

    def _step_done(self, turn: _StepTurn) -> None:
        with self._lock:
            if self._step is turn:
                self._step = None

    def notification_sink(self) -> NotificationOutbox:
        return NotificationOutbox(self)


class NotificationOutbox:
    """`notify` nodes write to the store's outbox; the controller delivers them."""

    def __init__(self, controller: SessionController) -> None:
        self.controller = controller
        self._index: dict[tuple[str, str], int] = {}

    def emit(self, run_id: str, node: str, attempt: str, notification_id: str, kind: str,
             message: str) -> None:
        visit = int(notification_id.rsplit(":", 1)[-1]) if ":" in notification_id else 1
        store = self.controller.store
        store.notifications.insert(NewNotification(
            notification_id=notification_id, run_id=run_id, node_id=node, attempt_id=attempt,
            notification_index=visit, target_session_id=self.controller.session_id,
            kind="final" if kind == "final" else "progress", content=message))
        if self.controller.host.is_idle():
            self.controller._deliver_notifications()
