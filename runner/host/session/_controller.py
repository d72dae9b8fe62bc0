"""The session controller: wfrun's `HostListener` for one agent session.

It answers `workflow` tool calls, activates queued launches only at safe idle
boundaries (a settled turn, or session start with no active turn), runs the
activated workflow on a worker thread, delivers agent steps into the session
(the `session` executor), and at each boundary has `_delivery` send what is due
(turn intents, presentations, notifications), each at most once.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from runner import _jsonin as jsonin
from runner.compiler._schemamessages import cut
from runner.engine import AgentStep, RunControl, RunOutcome
from runner.engine._agent import TurnKind
from runner.errors import InputError, NotFoundError, WfrunError
from runner.launch import (
    LaunchCoordinator,
    PreflightError,
    workflow_name,
)
from runner.launch._coordinator import Activation
from runner.launch._intents import (
    AGENT_STEP_TYPE,
)
from runner.store import (
    LaunchRecord,
    StoreError,
)

from ._delivery import Deliveries, NotificationOutbox
from ._protocol import Host, ToolReply
from ._replies import bounded, code_of, error_reply
from ._tool import validate_call

if TYPE_CHECKING:
    from runner.host.runtime._watch import SourceWatch

log = logging.getLogger(__name__)
Lister = Callable[[int], str]


@runtime_checkable
class SessionRefs(Protocol):
    """A resolver that knows where a session may read workflows from (compiler/_workflows.py)."""

    def session_ref(self, ref: str) -> str: ...


StatusReader = Callable[[str], dict[str, Any]]


@dataclass
class _StepTurn:
    step: AgentStep
    message: str
    kind: TurnKind
    sending: bool = False
    delivered: bool = False  # set only after the message is in the session
    started: bool = False  # a turn started after delivery (only its settle counts)
    held: bool = False  # the run is paused: no turn counts until it resumes
    settled: threading.Event = field(default_factory=threading.Event)


#: How many of its latest run outcomes a session controller keeps.
KEPT_OUTCOMES = 32


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
        self.book = coordinator.book  # the launch queue
        self.lister = lister
        self.status_reader = status
        self.session_id = host.session_id()
        self._lock = threading.RLock()
        self._turn_active = False
        self._shutdown = False
        self.active: Activation | None = None
        self._thread: threading.Thread | None = None
        self._step: _StepTurn | None = None
        self._resume_wanted: str | None = None  # a parked run `resume` asked for
        # The latest runs' outcomes, for diagnostics: bounded, as a session may last
        # for days and each holds the run's state and final output.
        self.outcomes: list[RunOutcome] = []
        self.errors: list[str] = []
        # False for a host with no turn-settled signal (a hookless MCP client): nothing
        # says the initiating turn ended, so queued launches wait for a session start
        # or the hand-over when the client exits, never for the next tool call.
        self.activates_at_settle = True
        self._recheck: threading.Thread | None = None  # a boundary when a lease ends
        self.deliveries = Deliveries(host, coordinator, self.session_id)

    # -- HostListener ----------------------------------------------------------------
    def on_session_start(self, reason: str) -> None:
        if not self.host.is_idle():
            return  # recovery waits for the next settled turn
        self._boundary(activate=True)

    def on_turn_started(self) -> None:
        with self._lock:
            self._turn_active = True
            if self._step is not None and self._step.delivered:
                self._step.started = True

    def on_turn_settled(self, aborted: bool) -> None:
        with self._lock:
            self._turn_active = False
            turn, act = self._step, self.active
        if aborted and act is not None:
            # Escape holds the run instead of nudging it: the open step stays open and
            # this turn is not one the model spent on it (no reminder, no failure).
            act.control.pause()
            if turn is not None:
                self._hold(turn)
            self.host.notify(f"workflow run {act.record.run_id} paused; the workflow tool's "
                             "resume action (in Pi: /workflow resume) continues it")
            return
        if turn is not None and turn.delivered and turn.started and not turn.held:
            # A duplicate settle before the step's own turn began is not a turn the
            # model spent on the step; it must not cost a reminder.
            turn.settled.set()
        self._boundary()

    def on_session_shutdown(self, reason: str) -> None:
        with self._lock:
            self._shutdown = True
            act = self.active
        if act is not None:
            # Parked `auto`: resumed by whoever takes the hand-over below first.
            act.control.park(f"session shutdown: {reason}", auto_resume=True)
        if self._thread is not None:
            self._thread.join(timeout=10)
        self._hand_over()

    def _hand_over(self) -> None:
        """Runs outlive their session: what it queued, parked or still holds goes to
        the hosts (a `wfrun host` continues it; the session takes it back if it starts
        first); how it ends reaches the session's next turn as a turn intent. A run
        still held here (its park did not land in time) follows when its lease ends."""
        try:
            handed = self.book.hand_over(self.session_id)
        except StoreError as exc:
            log.warning("launches of session %s not handed over: %s", self.session_id,
                        exc.message)
            return
        for record in handed:
            log.info("run %s (%s) handed over to the hosts", record.run_id, record.status)

    def activate_now(self) -> None:
        """Activate what this session queued now, not at a turn's end: a launch a client
        follows as an MCP task (it polls; no turn of its own waits for the run)."""
        self._boundary(activate=True)

    def open_step(self) -> tuple[str, str, str] | None:
        """(run id, step, attempt) of the agent step now waiting on this session's model
        (delivered, not yet submitted), else None."""
        with self._lock:
            turn = self._step
            if turn is None or not turn.delivered:
                return None
            contract = turn.step.contract
            return contract.run_id, contract.step, contract.attempt

    def deliver_pending(self) -> None:
        """Deliver what is due without activating anything (a host with no settle
        signal, before each call: an outcome a `wfrun host` reported meanwhile)."""
        self._boundary(activate=False)

    def on_tool_call(self, call_id: str, name: str, args: dict[str, Any]) -> ToolReply:
        """One `workflow` call; every reply bounded, every error one JSON object whose
        hints name tool actions (replies.py)."""
        action = args.get("action") if isinstance(args, dict) else None
        if name != "workflow":
            return error_reply(f"unknown tool {json.dumps(cut(name, 40))}; the tool is "
                               "'workflow'", None, "unknown_tool")
        if jsonin.too_deep(args):  # every host's way in: bridge, MCP, in-process
            return error_reply(f"the tool arguments are nested deeper than {jsonin.MAX_DEPTH} "
                               "levels; send a flatter JSON object", None, "invalid_input")
        try:
            verb, params = validate_call(args)
            return bounded(self._dispatch(verb, params))
        except PreflightError as exc:
            return error_reply(self.coordinator.relative(exc.message), action, exc.code)
        except StoreError as exc:  # before its base class, WfrunError
            return error_reply(self.coordinator.safe(f"the workflow store failed: {exc.message}"),
                               action, "store_unavailable")
        except WfrunError as exc:
            return error_reply(self.coordinator.relative(exc.message), action, code_of(exc))

    # -- tool actions ----------------------------------------------------------------
    def _dispatch(self, action: str, p: dict[str, Any]) -> ToolReply:
        if action in ("submit", "update"):
            turn = self._step
            if turn is None:
                return error_reply("no workflow step is open in this session", action,
                                   "no_open_step")
            res = turn.step.handle_tool_call({"action": action, **p})
            if not res.ok:
                return error_reply(res.message, action, "rejected", {"ok": False})
            return ToolReply(res.message, {"action": action, "ok": res.ok})
        if action == "start":
            record = self.coordinator.prepare(self._session_ref(p["workflow"]), p.get("input"),
                                              session_id=self.session_id)
            self._watch_queued()
            name = workflow_name(record.workflow_ref)
            return ToolReply(f"Workflow {name} queued (run {record.run_id}).",
                             {"action": "start", "workflow": name, "runId": record.run_id,
                              "queued": True})
        if action == "answer":
            parent = p.get("runId") or self._waiting_run()
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
                return self._resume_parked() if action == "resume" else error_reply(
                    "no workflow is running in this session", action, "not_running")
            if action == "pause":
                act.control.pause()
                with self._lock:
                    turn = self._step
                if turn is not None:
                    self._hold(turn)
            else:
                act.control.resume()
                self._release_hold()
            return ToolReply(f"Workflow run {act.record.run_id} {action}d.",
                             {"action": action, "runId": act.record.run_id})
        if action == "status":
            return self._status(p.get("runId"))
        offset = int(p.get("offset", 0))
        text = self.lister(offset) if self.lister else "no workflow catalog is configured"
        return ToolReply(text, {"action": "list", "offset": offset})

    def _resume_parked(self) -> ToolReply:
        """`resume` with no active run: this session's explicitly parked run continues
        (seed 000: parked -> starting on an explicit resume) at the next boundary, like
        a start, so nothing runs inside the model's turn."""
        parked = self.book.query(statuses=["parked"], session_id=self.session_id)
        if not parked:
            return error_reply("no workflow run of this session is paused or parked",
                               "resume", "not_parked")
        run_id = parked[-1].run_id
        with self._lock:
            self._resume_wanted = run_id
        return ToolReply(f"Workflow run {run_id} resumes after this turn.",
                         {"action": "resume", "runId": run_id, "queued": True})

    def _session_ref(self, ref: str) -> str:
        """The model's workflow name or path, confined to the project and the user folder
        (paths relative to the project) when the resolver knows them (`Workflows`)."""
        resolver = self.coordinator.resolver
        if not isinstance(resolver, SessionRefs):
            return ref
        try:
            return resolver.session_ref(ref)
        except NotFoundError as exc:
            raise PreflightError("workflow_not_found", exc.message) from None

    def _cancel(self, run_id: str | None) -> ToolReply:
        act = self.active
        if act is not None and (run_id is None or run_id == act.record.run_id):
            act.control.cancel("cancelled by the model")
            return self._cancel_reply(act.record.run_id, done=False)
        if run_id is None:
            held = self.book.reservation(self.session_id)
            if held is None:
                return error_reply("nothing to cancel in this session", "cancel",
                                   "nothing_to_cancel")
            run_id = held.run_id
        record = self.coordinator.cancel(run_id)
        return self._cancel_reply(run_id, done=record.status == "cancelled")

    @staticmethod
    def _cancel_reply(run_id: str, *, done: bool) -> ToolReply:
        """"cancelled" only once the launch is; a running run stops at a safe point."""
        if done:
            return ToolReply(f"Workflow run {run_id} cancelled.",
                             {"action": "cancel", "runId": run_id, "status": "cancelled"})
        return ToolReply(f"Cancel requested for workflow run {run_id}; it stops at the next "
                         "safe point.", {"action": "cancel", "runId": run_id,
                                         "status": "cancel_requested"})

    def _status(self, run_id: str | None) -> ToolReply:
        if run_id is None:
            # Seed 000: the session's reservation, else the run it displayed last.
            held = self.book.reservation(self.session_id)
            shown = held or next(iter(reversed(self.book.query(
                session_id=self.session_id))), None)
            if shown is None:
                return ToolReply("no workflow is queued or running in this session",
                                 {"action": "status", "runId": None})
            run_id = shown.run_id
        view = dict(self.status_reader(run_id)) if self.status_reader else {}
        # The tool's replies keep the session protocol's spelling (runId); the view is the
        # CLI's (run_id, as every `--json` output spells it).
        view.pop("run_id", None)
        view = {"runId": run_id, **view}
        state = view.get("status", "unknown")
        text = f"Run {run_id}: {state}"
        if view.get("interrupted"):
            text = (f"Run {run_id}: interrupted (its runner stopped mid-run; it resumes at "
                    "the interrupted node when this session or a `wfrun host` takes it over)")
        act = self.active
        if act is not None and act.record.run_id == run_id and act.control.pause_requested:
            # Held in the session (Escape, or the pause action); the bundle says running.
            view = {**view, "paused": True}
            text += " (paused; the resume action continues it)"
        if state == "waiting":
            text += f" (at a checkpoint; the answer action with runId '{run_id}' continues it)"
        error = view.get("error")
        if isinstance(error, dict):
            text += f" ({error.get('code')}: {error.get('message')})"
        elif error:
            text += f" ({error})"
        return ToolReply(text, {"action": "status", **view})

    def _waiting_run(self) -> str:
        """The one run of this session waiting at a checkpoint, from the store (any
        process of the session, before or after a restart); else InputError."""
        rows = self.book.query(session_id=self.session_id)
        answered = {r.parent_run_id for r in rows if r.parent_run_id}
        reader = self.coordinator.reader
        waiting = [r.run_id for r in reversed(rows)
                   if r.status == "done" and r.ending == "waiting"
                   and r.run_id not in answered and not reader.answered(r.run_id)]
        if not waiting:
            raise InputError("no run of this session is waiting at a checkpoint; pass runId "
                             "to answer another run")
        if len(waiting) > 1:
            shown = ", ".join(waiting[:5]) + (", …" if len(waiting) > 5 else "")
            raise InputError(f"{len(waiting)} runs of this session are waiting ({shown}); "
                             "pass runId to say which one to answer")
        return waiting[0]

    def _workflow_ref(self, run_id: str) -> str:
        record = self.book.get(run_id)
        if record is not None:
            return record.workflow_ref
        manifest = self.coordinator.reader.manifest(run_id)
        return str(manifest.get("workflow_ref") or manifest.get("workflow"))

    # -- boundaries --------------------------------------------------------------------
    def _boundary(self, activate: bool | None = None) -> None:
        """A safe idle point: activate queued work, then deliver what is due."""
        if self._shutdown:
            return
        if self.activates_at_settle if activate is None else activate:
            self._activate()
        self._watch_queued()
        self.deliveries.turn_intents()
        self.deliveries.notifications()
        self._deliver_step()

    def _watch_queued(self) -> None:
        """Hand the optional source watch this session's queued launches (it only
        reports drift; activation's digest check decides)."""
        if self.watch is None:
            return
        try:
            self.watch.update(self.book.query(statuses=["queued"],
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
        record = (self._claim_resumed() or self._take_over_dead()
                  or self.coordinator.claim_next(self.session_id))
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

    def _claim_resumed(self) -> LaunchRecord | None:
        """The parked run a `resume` asked for, claimed by id (an explicit resume)."""
        with self._lock:
            run_id, self._resume_wanted = self._resume_wanted, None
        if run_id is None:
            return None
        try:
            return self.coordinator.claim(run_id)
        except WfrunError as exc:  # cancelled, taken or gone since: say so, go on
            log.warning("run %s not resumed: %s", run_id, exc.message)
            self.errors.append(exc.message)
            return None

    def _take_over_dead(self) -> LaunchRecord | None:
        """A run of this session whose runner died (the client's process group killed
        mid-step) is taken over now, at this boundary, not after its lease: a session
        started again and left idle must not leave it for the user's next message."""
        from runner.host.runtime._launches import dead_local_runner

        try:
            held = self.book.query(statuses=["starting", "running"],
                                             session_id=self.session_id)
        except StoreError:
            return None
        now = self.store.now_ms()
        for record in held:
            dead = dead_local_runner(record.runner_id)
            if dead is None or dead == self.coordinator.runner_id:
                if record.lease_live(now) and record.runner_id != self.coordinator.runner_id:
                    # Alive, or elsewhere: its lease decides. Look again when it ends,
                    # idle or not, so a runner that died there is not left to a user.
                    self._look_again(record.claim_expires_at or now)
                continue
            try:
                return self.coordinator.claim(record.run_id, dead_runner=dead)
            except WfrunError as exc:
                log.info("run %s not taken over: %s", record.run_id, exc)
        return None

    def _look_again(self, expires_ms: int) -> None:
        """One boundary of an idle session once the store's clock passed `expires_ms`
        (looked at every second: the store's clock is the lease's)."""
        with self._lock:
            if self._recheck is not None and self._recheck.is_alive():
                return

            def later() -> None:
                while not self._shutdown:
                    left = expires_ms - self.store.now_ms()
                    if left < 0:
                        break
                    self.coordinator.clock.sleep(min(left / 1000 + 0.05, 1.0))
                # Only where idleness is known (a hookless client may be mid-turn).
                if (self.activates_at_settle and not self._shutdown
                        and self.host.is_idle() and not self._turn_active):
                    self._boundary(activate=True)

            self._recheck = threading.Thread(target=later, daemon=True,
                                             name=f"wfrun-recheck-{self.session_id}")
            self._recheck.start()

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
                del self.outcomes[:-KEPT_OUTCOMES]
        if self.host.is_idle() and not self._shutdown:
            self._boundary()

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

    def _hold(self, turn: _StepTurn) -> None:
        """A paused run's open step: its turns stop counting until `resume`."""
        with self._lock:
            turn.held = True

    def _release_hold(self) -> None:
        """On resume, a held step is delivered again (a new turn for it), at once when
        the session is idle, else at the next boundary."""
        with self._lock:
            turn = self._step
            if turn is None or not turn.held:
                return
            turn.held = False
            turn.kind = "resume"
            turn.sending = turn.delivered = turn.started = False
            idle = not self._turn_active
        if idle and self.host.is_idle():
            self._deliver_step()

    def _step_done(self, turn: _StepTurn) -> None:
        with self._lock:
            if self._step is turn:
                self._step = None

    def notification_sink(self) -> NotificationOutbox:
        return NotificationOutbox(self.deliveries, self.session_id, self.host)
