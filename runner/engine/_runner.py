"""The run loop: one node at a time, every step recorded before it counts.

`RunDriver` owns one open run: its bundle, its state (a fold of the trace) and
its control. Each event is appended to the trace first and then applied to the
state with the same `RunState.apply` a resume replays, so a live run and a
resumed one cannot diverge. Completed nodes are never re-run: a node's
`node_finished` is fsync'd before the next node starts, in one append with that
node's `node_started` (the loop routes first; `emit(hold=)`).
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import suppress
from typing import TYPE_CHECKING, Any

from runner._safety import bound, mask_values, redact
from runner.clock import Clock, iso
from runner.compiler import Node, WorkflowDefinition
from runner.compiler._fanout import FANOUT_KINDS as _FANOUT_ROWS
from runner.compiler._kinds import KINDS
from runner.compiler._templates import SCOPE, Scope, TemplateError, render_native
from runner.errors import ClaimLost

from . import _tracing as tracing
from ._cache import StepCache, keep, lookup
from ._control import PAUSED, RunControl
from ._driverports import DriverFanout, StepRecorder
from ._items import ChildRuns, ItemLedger, MemoryLedger
from ._livelog import LiveLog
from ._nodecontext import NodeContext, NodeResult
from ._nodes import execute, new_attempt_id
from ._processes import ProcessRegistry
from ._routing import route
from ._runtypes import CrashPoint, LaunchLink, NotificationSink, Observer, RunOutcome, retry_delay
from ._secrets import EMPTY, RunSecrets, restore_input
from ._state import (
    TRACE_SCHEMA,
    RunState,
    ScopedValues,
    externalize,
    has_artifacts,
    internalize,
    plain_text,
)

if TYPE_CHECKING:
    from ._agent import AgentStepExecutor
    from ._space import RunBundle

#: Kinds whose node gets a `FanoutPort` (its items run through this driver).
FANOUT_KINDS = frozenset(k.name for k in _FANOUT_ROWS)

UPDATE_RATE = 20.0  # updates per second per run, with a burst of 100
UPDATE_BURST = 100.0
MAX_UPDATE_PAIRS = 1024
# state.json is a projection: after a node it is rewritten only when this long (engine
# clock) has passed since the last rewrite, so a chain of fast nodes does not pay an
# atomic file replace each. Run-level events (start, resume, pause, wait, end) and
# parking always rewrite it, so it is exact whenever a run stops.
STATE_EVERY = 0.1
STATE_SPREAD = 8
_NODE_ENDS = frozenset({"node_finished", "node_failed"})
#: Each stream of one attempt's log keeps at most this many bytes (its head for stdout,
#: and stderr too: the action's own output cap usually cuts first).
LOG_CAP = 1_048_576


class RunDriver:
    def __init__(self, *, run_id: str, definition: WorkflowDefinition, bundle: RunBundle,
                 state: RunState, clock: Clock, control: RunControl,
                 executor: AgentStepExecutor | None, notifications: NotificationSink | None,
                 observer: Observer | None, work_dir: str, project_root: str | None,
                 crash_point: CrashPoint | None = None,
                 processes: ProcessRegistry | None = None,
                 secrets: RunSecrets = EMPTY) -> None:
        self.launch: LaunchLink | None = None  # set by the engine (a claimed launch)
        # Where fan-out items are durable: the ledger `make_items` (set by the engine: the
        # store's, via launch) makes when the first fan-out node asks (driverports.py).
        self.make_items: Callable[[], ItemLedger] = MemoryLedger
        self.items: ItemLedger | None = None
        self.children: ChildRuns | None = None  # `workflow:` bodies (set by the engine)
        self.run_id = run_id
        self.definition = definition
        self.bundle = bundle
        self.state = state
        self.clock = clock
        self.control = control
        # Where the loop's renders run (compiler/_templates.py): the workflow's budget,
        # stopped when the run is cancelled or parked; each attempt sets its deadline.
        self.scope = Scope(definition.template_budget, clock.monotonic, None, control)
        self.executor = executor
        self.notifications = notifications
        # Itself unless OTEL_* asks for spans (asked once per process, then read).
        self.observer = observer if tracing.decided and tracing.current is None \
            else tracing.observer(observer)
        self.work_dir = work_dir
        self.project_root = project_root
        self.resuming_node: str | None = None
        # The crash seam (tests): each named point is called only when one is given.
        self.crash = crash_point
        self.processes = processes
        # Resolved for this process only; every recorded event is masked with them.
        self.secrets = secrets
        # Whether any recorded value holds an artifact ref or an escape: only then does
        # `context` pay for a walk over every output (checked per event, not per node).
        # A new run's state holds nothing yet.
        recorded = [state.input, state.outputs, state.results, state.scope_inputs]
        self._refs = any(recorded) and has_artifacts(recorded)
        # Each scope's outputs/results as nodes see them, kept up to date per event.
        self._scoped = ScopedValues(state, self.live if self._refs else None)
        if state.outputs or state.results:  # a resumed run's: built once from its fold
            self._scoped.reset()
        self._tokens = UPDATE_BURST
        self._token_at = clock.monotonic()
        self._state_at = clock.monotonic()
        self._ends_since_state = 0
        self._logs: dict[str, int] = {}  # attempt -> node_log events recorded
        # A node's end not yet written: (event, sync, state); see `emit(hold=)`.
        self._held: list[tuple[dict[str, Any], bool, bool]] = []
        self._between = False  # a node ended and the loop routed on: crash seam pending
        self.cache: StepCache | None = None  # kept results (`cache:`); set by the engine
        self.cache_reads = True  # False: --no-cache (results are still kept)

    # -- recording ---------------------------------------------------------------
    def emit(self, kind: str, payload: dict[str, Any] | None = None, *, node: str | None = None,
             attempt: str | None = None, sync: bool = False, state: bool = False,
             hold: bool = False, plain: bool = False) -> None:
        """Record one event. `hold`: a node's end that the loop routes from before it is
        written; it goes to the store in one append with the next event (the next node's
        `node_started`, an include's entry, the run's ending), so a 3-node run pays one
        durable write per node boundary instead of two. Applied to the state at once.
        `plain`: the caller knows the payload has nothing to mask, move out or escape
        (`finish`, `record_logs`): written as it is, not walked."""
        event: dict[str, Any] = {"schema": TRACE_SCHEMA, "seq": self.state.trace_seq + 1,
                                 "at": iso(self.clock.now()), "type": kind, "run_id": self.run_id}
        if node is not None:
            event["node"] = node
        if attempt is not None:
            event["attempt"] = attempt
        if plain:
            event["payload"] = payload or {}
        else:
            # Masked before anything is written: the trace, artifacts, the state folded
            # from them and every view of them only ever hold `***` for a secret.
            marked = [False]
            payload = payload or {}
            if self.secrets.masked:
                payload = self.secrets.mask_json(payload)
            event["payload"] = externalize(payload, self.bundle.write_artifact, marked)
            if marked[0] and not self._refs:
                self._refs = True
                self._scoped.live = self.live  # from now on, values are read back
        if hold:
            self.state.apply(event)
            self._scoped.applied(event)
            self._held.append((event, sync, state))
            return
        held, self._held = self._held, []
        batch = [event]
        if held:  # plain loops: a comprehension is a frame of its own, twice per event
            batch = []
            for e, s, _ in held:
                batch.append(e)
                sync = sync or s
            batch.append(event)
        self.bundle.append(batch, sync=sync)
        for e, _, s in held:  # applied when held; what follows a write follows it now
            self._recorded(e, s)
        self.state.apply(event)
        self._scoped.applied(event)
        self._recorded(event, state)
        if held and self._between and kind in ("node_started", "include_entered"):
            # The last node's end and what comes next are recorded; the next node's
            # work has not begun.
            self._between = False
            if self.crash is not None:  # always here: _between is set only with one
                self.crash("between_nodes")

    def flush_held(self) -> None:
        """Write a held node end alone (parking, letting go of the run)."""
        held, self._held = self._held, []
        if held:
            self.bundle.append([e for e, _, _ in held], sync=any(s for _, s, _ in held))
            for e, _, s in held:
                self._recorded(e, s)

    def _recorded(self, event: dict[str, Any], state: bool) -> None:
        kind = event["type"]
        if state:
            finished = kind in _NODE_ENDS
            if finished and self.crash is not None:
                self.crash("after_trace_append")
            now = self.clock.monotonic()
            self._ends_since_state += finished
            # A rewrite costs O(recorded values) (~8 µs per node here): after a node it
            # also waits for 1/STATE_SPREAD of the run's node count, so it stays O(1)
            # per node, ~STATE_SPREAD x 8 µs (a 5,000-node run would otherwise be
            # O(n²) in state.json alone). Readers fold the trace, never state.json.
            if not finished or (now - self._state_at >= STATE_EVERY and self._ends_since_state
                                >= len(self.state.results) // STATE_SPREAD):
                self.bundle.replace_state(self.state.to_json())
                self._state_at = now
                self._ends_since_state = 0
                if finished and self.crash is not None:
                    self.crash("after_state_replace")
        if self.observer is not None:
            self.observer(event, self.state)

    def prompt_sent(self, node: str, attempt: str, kind: str, prompt: str) -> None:
        self.emit("agent_prompt_sent", {"kind": kind, "prompt": prompt}, node=node,
                  attempt=attempt)

    def record_log(self, node: str, attempt: str, stdout: str, stderr: str,
                   stdout_cut: bool = False, stderr_cut: bool = False,
                   exit_code: int | None = None, *, hold: bool = False) -> None:
        """One attempt's stdout and stderr (`wfrun logs`): bounded, masked by `emit`,
        long streams in artifacts/ by the size rule. `hold`: written with the next
        event or `flush_held` (`record_logs`)."""
        # stderr is diagnostics: credential-shaped text is redacted as well (runner._safety).
        out, err = bound(stdout, LOG_CAP), bound(redact(stderr), LOG_CAP)
        self._logs[attempt] = self._logs.get(attempt, 0) + 1  # names the next live log
        self.emit("node_log", {"stdout": out, "stderr": err,
                               "stdout_truncated": stdout_cut or out != stdout,
                               "stderr_truncated": stderr_cut or err != stderr,
                               "exit_code": exit_code}, node=node, attempt=attempt, hold=hold)

    def record_logs(self, logs: list[tuple[str, str, dict[str, Any]]]) -> None:
        """Logs items kept elsewhere (node, attempt, log as the host's item recorded it:
        `_itemhost._Recorder`), each checked as `record_log` does, in one trace write.
        Short ASCII text in a run that masks nothing has nothing to cut, replace or move
        out: that log is emitted `plain` (a 1,000-item map's end walked each)."""
        masks = bool(self.secrets.masked)
        for node, attempt, log in logs:
            out, err = str(log.get("stdout", "")), str(log.get("stderr", ""))
            code = log.get("exit_code")
            seen = redact(err)
            if masks or not (plain_text(out) and plain_text(seen)) or not (
                    code is None or type(code) is int):
                self.record_log(node, attempt, out, err, bool(log.get("stdout_truncated")),
                                bool(log.get("stderr_truncated")), code, hold=True)
                continue
            self._logs[attempt] = self._logs.get(attempt, 0) + 1
            self.emit("node_log", {"stdout": out, "stderr": seen,
                                   "stdout_truncated": bool(log.get("stdout_truncated")),
                                   "stderr_truncated": bool(log.get("stderr_truncated"))
                                   or seen != err, "exit_code": code},
                      node=node, attempt=attempt, hold=True, plain=True)
        self.flush_held()

    def live_log(self, node: str, attempt: str, extra: tuple[str, ...],
                 cap_chars: int) -> LiveLog:
        """The live log of a running attempt (`logs --follow`), masked like its event
        will be: the run's secrets and `extra` (the step's own secret-named values)."""
        values = mask_values([*self.secrets.masked, *extra])
        return LiveLog(self.bundle.live_logs(), node, attempt, values, cap_bytes=LOG_CAP,
                       cap_chars=cap_chars, turn=self._logs.get(attempt, 0))

    def publish_update(self, kind: str, key: str, data: Any) -> None:
        now = self.clock.monotonic()
        self._tokens = min(UPDATE_BURST, self._tokens + (now - self._token_at) * UPDATE_RATE)
        self._token_at = now
        pair = f"{kind}:{key}"
        if self._tokens < 1 or (pair not in self.state.updates
                                and len(self.state.updates) >= MAX_UPDATE_PAIRS):
            return  # over the rate or pair limit: drop, updates are advisory
        self._tokens -= 1
        self.emit("update_published", {"type": kind, "key": key, "data": data},
                  node=self.state.current_node, attempt=self.state.current_attempt)

    def notify(self, node: str, attempt: str, notification_id: str, kind: str,
               message: str, channels: tuple[str, ...] = ()) -> None:
        message = self.secrets.mask(message)  # it goes to the store's outboxes and a session
        payload: dict[str, Any] = {"notification_id": notification_id, "kind": kind,
                                   "message": message}
        if channels:
            payload["channels"] = list(channels)
        self.emit("notification_emitted", payload, node=node, attempt=attempt, sync=True)
        if self.notifications is not None:
            self.notifications.emit(self.run_id, node, attempt, notification_id, kind, message,
                                    channels)

    # -- context -----------------------------------------------------------------
    def node_context(self, node: Node, attempt: str, deadline: float | None) -> NodeContext:
        """What one attempt is given (nodecontext.py): never the driver itself."""
        recorder = StepRecorder(self, node.id, attempt)
        return NodeContext(
            run_id=self.run_id, workflow=self.definition.name, node=node, attempt=attempt,
            deadline=deadline, values=self.context(node.scope),
            visit=self.state.visits.get(node.id, 1), resuming=self.resuming_node == node.id,
            control=self.control, clock=self.clock, secrets=self.secrets, logs=recorder,
            updates=recorder, executor=self.executor, work_dir=self.work_dir,
            processes=self.processes,
            fanout=DriverFanout(self) if node.kind in FANOUT_KINDS else None)

    def context(self, scope: str) -> dict[str, Any]:
        st = self.state
        run_input = st.input if not scope else st.scope_inputs.get(scope)
        if not scope and self.secrets.hidden:  # writeOnly fields, recorded as `***`
            run_input = restore_input(run_input, self.secrets.hidden)
        if self._refs:
            run_input = self.live(run_input)
        outputs, results = self._scoped.lend(scope)
        ctx = {"input": run_input, "outputs": outputs, "results": results,
               "secrets": dict(self.secrets.secrets), "env": dict(self.secrets.env),
               "run": {"id": self.run_id, "workflow": self.definition.name, "step": st.steps,
                       "started_at": st.started_at, "parent_run_id": st.parent_run_id},
               "project": {"root": self.project_root}}
        return ctx

    def live(self, value: Any) -> Any:
        """A recorded value as nodes see it: artifact refs read back, escapes removed.

        The state holds values as persisted; one re-emitted from it (a final output, an
        include's exit output) must pass through here first, or it is escaped twice.
        """
        if has_artifacts(value):
            return internalize(value, self.bundle.read_artifact)
        return value

    # -- the loop ----------------------------------------------------------------
    def drive(self, at: str | None) -> RunOutcome:
        token = SCOPE.set(self.scope)  # as `with self.scope:` does, once per run
        try:
            return self._drive(at)
        except BaseException as exc:
            if isinstance(exc, Exception) and not isinstance(exc, ClaimLost):
                # A bug: a run written whole writes what it ran, as a run written as it
                # goes has (the launch layer then ends it failed); refused, it is let go.
                with suppress(Exception):
                    self.bundle.write_held()
            # A node end still held is not written: the node runs again, as after a kill.
            self.bundle.close()  # a refused write (ClaimLost) or a bug: let go of the run
            raise
        finally:
            SCOPE.reset(token)

    def _drive(self, at: str | None) -> RunOutcome:
        while True:
            if at is None:  # the run's output is its last node's
                last = self.state.last_node
                output = self.state.outputs.get(last) if last else None
                if self._refs:  # only a run that recorded a ref or an escape walks it
                    output = self.live(output)
                return self.finish("completed", final_output=output,
                                   recorded=not self._refs and not self.secrets.masked)
            if self.control.stopping or self.control.pause_requested:
                stop = self._boundary()
                if stop is not None:
                    return stop
            node = self.definition.nodes[at]
            if node.kind == "include_entry":
                entered = self._enter(node)
                if isinstance(entered, RunOutcome):
                    return entered
                at = entered
                continue
            if node.kind == "include_exit":
                at = self._exit(node)
                continue
            # A resumed node re-runs the step it already counted; only new steps are bounded
            # (the run's max_steps, and an include's own inside one: `_step_limit`).
            if (self.state.steps >= self.definition.max_steps or node.scope) \
                    and self.resuming_node != node.id:
                limit = self._step_limit(node)
                if limit is not None:
                    return self.finish("failed", error={"code": "max_steps", "message": limit})
            result = self._run_node(node)
            if result.outcome == "parked":
                return self.park()
            if result.outcome == "cancelled":
                return self.finish("cancelled", error=result.error)
            row = KINDS.get(node.kind)  # the node-kind table: checkpoint waits, fail fails
            end = row.ends if row is not None else None
            if end == "fail":
                return self.finish("failed", error={**(result.error or {}), "node": node.id})
            if end == "wait" and result.outcome == "ok":
                return self.wait(node.id, result.output)
            edge = self.definition.edges.get(node.id)
            if result.outcome == "ok" and (edge is None or edge.to is not None):
                nxt = None if edge is None else edge.to  # the end, or a plain edge: no switch
            else:
                routed = self.next_after(node.id, result.outcome, result.output,
                                         result.error, result.extra)
                if isinstance(routed, RunOutcome):
                    return routed
                nxt = routed
            if nxt is not None and self.crash is not None:
                # Routed, the node's end still held: a kill here loses it (the node runs
                # again), as a kill just before its end was written always did.
                self.crash("after_routing")
                self._between = True
            at = nxt

    def next_after(self, node_id: str, outcome: str, output: Any, error: dict[str, Any] | None,
                   extra: dict[str, Any]) -> str | RunOutcome | None:
        """Where the run goes after `node_id` ended with `outcome`: the next node, None
        (the end), or the run's ending (a routing failure, a failure no edge catches)."""
        res = {"outcome": outcome, "error": error, **extra}
        r = route(self.definition.edges.get(node_id), outcome, output, res)
        if r.error:
            return self.finish("failed", error={"code": "routing", "message": r.error,
                                                "node": node_id})
        if r.next is None and outcome != "ok":
            status = "timed_out" if outcome == "timed_out" else "failed"
            return self.finish(status, error={**(error or {}), "node": node_id})
        return r.next

    def _boundary(self) -> RunOutcome | None:
        """Stop, cancel or pause requests take effect between nodes (asked only when
        the control holds one: `stopping` or `pause_requested`)."""
        if self.control.stop_reason == "park":
            return self.park()
        if self.control.stop_reason == "cancel":
            return self.finish("cancelled", error={"code": "cancelled",
                                                   "message": self.control.reason or "cancelled"})
        if self.control.pause_requested and self.control.park_on_pause:
            # `wfrun pause`: recorded as paused, then parked at this boundary (no node
            # is interrupted); its launch waits, holding no slot, for `wfrun unpause`.
            self.emit("run_paused", {"parked": True}, sync=True, state=True)
            self.control.park(PAUSED)
            return self.park()
        if self.control.pause_requested:
            self.emit("run_paused", {}, sync=True, state=True)
            while self.control.pause_requested and not self.control.stopping:
                self.control.wake.wait(0.1)
                self.control.rearm()
            if self.control.stopping:
                return self._boundary()
            self.emit("run_resumed", {"reason": "unpaused"}, sync=True, state=True)
        return None

    def _step_limit(self, node: Node) -> str | None:
        st, d = self.state, self.definition
        if st.steps >= d.max_steps:
            return f"the run reached max_steps ({d.max_steps}) before node '{node.id}'"
        if node.scope:
            entry = d.nodes.get(node.scope)
            child_max = getattr(entry.spec, "max_steps", None) if entry else None
            used = st.scope_steps.get(node.scope, 0)
            if child_max is not None and used >= child_max:
                return (f"include '{node.scope}' reached its max_steps ({child_max}) before "
                        f"node '{node.id}'")
        return None

    def _enter(self, node: Node) -> str | RunOutcome | None:
        spec = node.spec
        ctx = self.context(node.scope)
        try:
            self.scope.deadline = None  # no node's: an include's input
            child_input = render_native(getattr(spec, "input", None) or {}, ctx)
        except TemplateError as exc:
            return self.finish("failed", error={"code": "template_error", "node": node.id,
                                                "message": f"include input: {exc}"})
        self.emit("include_entered", {"mount": node.id, "input": child_input}, node=node.id)
        edge = self.definition.edges[node.id]
        return edge.to

    def _exit(self, node: Node) -> str | None:
        spec = node.spec
        source = getattr(spec, "source", "")
        mount = getattr(spec, "mount", "")
        output = self.live(self.state.outputs.get(source))
        self.emit("include_exited", {"mount": mount, "exit": getattr(spec, "exit", ""),
                                     "output": output}, node=node.id, sync=True)
        edge = self.definition.edges.get(node.id)
        return edge.to if edge is not None and edge.to else None

    def _run_node(self, node: Node) -> NodeResult:
        attempts = max(node.retry.attempts, 1)
        resumed = self.resuming_node == node.id
        cache_as: str | None = None  # the node's cache key (`cache:`), once computed
        for k in range(attempts):
            attempt = new_attempt_id()
            started = iso(self.clock.now())
            start_mono = self.clock.monotonic()
            deadline = start_mono + node.timeout if node.timeout is not None else None
            started_payload = {"kind": node.kind, "scope": node.scope, "retry": k,
                               "counts_step": not resumed, "resumed": resumed}
            if node.kind == "parallel":
                started_payload.update(_branch_order(node))
            self.emit("node_started", started_payload, node=node.id, attempt=attempt)
            self.scope.deadline = deadline  # the attempt's renders stop at its timeout
            cached = None
            if node.cache is not None and self.cache is not None and k == 0:
                cache_as, cached = lookup(self.cache, self.definition.name, node,
                                          self.context(node.scope), self.cache_reads)
            result = cached or execute(self.node_context(node, attempt, deadline))
            if cached is not None and "cached_from" in cached.extra:
                # `wfrun logs` says the node's result came from the cache: nothing ran.
                self.emit("node_log", {"stdout": "", "stderr": "", "stdout_truncated": False,
                                       "stderr_truncated": False, "exit_code": None,
                                       "cached_from": cached.extra["cached_from"]},
                          node=node.id, attempt=attempt)
            self.resuming_node = None
            resumed = False
            duration = int((self.clock.monotonic() - start_mono) * 1000)
            if result.outcome == "parked":
                return result
            # `retry` on the end too: the fold numbers the attempt (results.X.attempt).
            base = {"outcome": result.outcome, "kind": node.kind, "started_at": started,
                    "duration_ms": duration, "retry": k, **result.extra}
            if result.outcome == "ok" and cache_as is not None and "cached_from" not in \
                    result.extra:
                assert self.cache is not None  # cache_as is set only with one
                # As the trace holds it: a secret in the output is kept masked.
                keep(self.cache, cache_as, self.definition.name, node, self.run_id,
                     self.secrets.mask_json(result.output))
            if result.outcome == "ok":
                # A pure node's end is not flushed on its own: running it again changes
                # nothing outside the run, so the next flush (the ending's, or an
                # effectful node's) makes it durable with what follows it.
                self.emit("node_finished", {**base, "output": result.output}, node=node.id,
                          attempt=attempt, sync=not node.pure, state=True, hold=True)
                return result
            retry = result.outcome in ("failed", "timed_out") and k + 1 < attempts
            delay = retry_delay(self.run_id, node.id, k + 1, node.retry.backoff,
                                node.retry.max_delay) if retry else 0.0
            # A retry waits out its delay: its end is written now, not held.
            self.emit("node_failed", {**base, "error": result.error, "will_retry": retry,
                                      "retry_in_ms": int(delay * 1000)},
                      node=node.id, attempt=attempt, sync=True, state=True, hold=not retry)
            if not retry:
                return result
            self.control.rearm()  # a pause request or a finished hook may have set wake
            if self.clock.sleep(delay, self.control.wake) or self.control.stopping:
                if self.control.stop_reason == "park":
                    return NodeResult("parked")
                if self.control.stopping:
                    return NodeResult("cancelled", error={"code": "cancelled",
                                                          "message": self.control.reason or ""})
                self.control.rearm()
        return result

    # -- endings -----------------------------------------------------------------
    def finish(self, status: str, *, final_output: Any = None,
               error: dict[str, Any] | None = None, recorded: bool = False) -> RunOutcome:
        """`recorded`: `final_output` is a node's output as the state holds it, in a run
        that recorded no ref or escape and masks nothing: written as it is, not walked
        (it is its own externalized form), the same object as the node's, so the
        bundle encodes a long one once (runner/_canonical.py, `Spliced`)."""
        kind = {"completed": "run_completed", "failed": "run_failed",
                "timed_out": "run_timed_out", "cancelled": "run_cancelled"}[status]
        payload: dict[str, Any] = {"final_output": final_output}
        if error is not None:
            payload["error"] = error
        self.emit(kind, payload, sync=True, state=True, plain=recorded and error is None)
        return self._close_bundle(recorded=True)

    def wait(self, node_id: str, output: Any) -> RunOutcome:
        self.emit("run_waiting", {"waiting_on": node_id, "final_output": output}, sync=True,
                  state=True)
        return self._close_bundle(recorded=True)

    def park(self) -> RunOutcome:
        """Stop without a terminal event; `resume` continues at the interrupted node.
        A clean park says so in the trace (`run_parked`): the node it interrupted did
        not die, so its start is not counted against NODE_START_BUDGET."""
        self.bundle.write_held()  # a run written whole parks from `running`, as any run
        if self.control.clean:
            self.emit("run_parked", {"node": self.state.current_node,
                                     "reason": self.control.reason or "parked"}, sync=True)
        else:
            self.flush_held()
        self.bundle.replace_state(self.state.to_json())
        self.bundle.close()
        return RunOutcome(self.run_id, "running", True, None, None, self.state,
                          self.control.reason)

    def _close_bundle(self, recorded: bool = False) -> RunOutcome:
        """Seal the ended run's bundle; returns its outcome. `recorded`: this driver has
        just recorded the ending, whose final output went through `emit`, which sets
        `_refs` if it holds a ref or an escape, so an output without one is not walked
        (twice, for a 1,000-item map's list)."""
        st = self.state
        output = st.final_output if recorded and not self._refs else self.live(st.final_output)
        outcome = RunOutcome(self.run_id, st.status, False, output, st.error, st)
        manifest = self.bundle.read_manifest()
        manifest.update({"status": st.status, "finished_at": st.finished_at})
        self.bundle.write_manifest(manifest)
        # A folder has the ending's event and manifest by now; a database bundle holds
        # them for the seal's transaction (engine/_dbbundle.py), so a kill here leaves it
        # without its ending and the next holder records the ending again.
        if self.crash is not None:
            self.crash("before_seal")
        # Joined to its launch, the seal also records how the launch ended.
        self.bundle.seal(None if self.launch is None else self.launch.ended(outcome))
        self.bundle.close()
        return outcome

    def outcome(self) -> RunOutcome:
        st = self.state
        return RunOutcome(self.run_id, st.status, False, self.live(st.final_output), st.error, st)


def _branch_order(node: Node) -> dict[str, Any]:
    """A parallel node's branch names in item order (the snapshot sorts them): views
    name a running branch's row by it."""
    branches = getattr(node.spec, "branches", None)
    return {"branches": [name for name, _ in branches]} if branches else {}
