"""The run state: a pure fold of trace events (the trace is the truth), the
per-scope views of its values that follow each fold, and the values' persisted form.

`RunState.apply` is used both live (right after an event is appended) and on
resume (replaying the whole trace), so the two can never disagree.

`ScopedValues` keeps each scope's `outputs` and `results` (keyed by local id, values
as nodes see them) in step with the run state, event by event, so building a node's
context costs the same at node 5,000 as at node 5 (it used to re-scan every recorded
value twice per node: O(n²) per run). A child scope sees its own values only.

Long strings leave the trace: a value is persisted (`externalize`, as the driver
emits it) with each string over 4 KiB stored in `artifacts/` and replaced by
`{"$artifact": {path, media_type, bytes, sha256}}`; a user object that happens to use
the key `$artifact` (or `$escaped`) is wrapped as `{"$escaped": ...}` so reading back
(`internalize`) is unambiguous.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

STATE_SCHEMA = "wfrun.run-state.v1"
TRACE_SCHEMA = "wfrun.trace-event.v1"
TERMINAL = frozenset({"completed", "failed", "timed_out", "cancelled"})
STATUSES = ("running", "waiting", "completed", "failed", "timed_out", "cancelled")
EVENT_TYPES = (
    "run_started", "node_started", "agent_prompt_sent", "node_finished", "node_failed",
    "update_published", "notification_emitted", "include_entered", "include_exited",
    "run_paused", "run_resumed", "run_completed", "run_waiting", "run_failed",
    "run_timed_out", "run_cancelled", "run_interrupted", "run_parked",
)
_NODE_ENDS = frozenset({"node_finished", "node_failed"})
Live = Callable[[Any], Any]
_TERMINAL_EVENTS = {"run_completed": "completed", "run_failed": "failed",
                    "run_timed_out": "timed_out", "run_cancelled": "cancelled"}


@dataclass
class RunState:
    run_id: str
    workflow: str = ""
    status: str = "running"
    paused: bool = False
    input: Any = None
    parent_run_id: str | None = None
    started_at: str | None = None
    finished_at: str | None = None
    current_node: str | None = None
    current_attempt: str | None = None
    current_node_started_at: str | None = None
    last_node: str | None = None  # the last node that finished (any outcome)
    steps: int = 0
    # Steps per include invocation (mount path -> count), bounded by the child's max_steps.
    scope_steps: dict[str, int] = field(default_factory=dict)
    scope_inputs: dict[str, Any] = field(default_factory=dict)
    outputs: dict[str, Any] = field(default_factory=dict)
    results: dict[str, dict[str, Any]] = field(default_factory=dict)
    visits: dict[str, int] = field(default_factory=dict)
    updates: dict[str, dict[str, Any]] = field(default_factory=dict)
    notifications: int = 0
    waiting_on: str | None = None
    final_output: Any = None
    error: dict[str, Any] | None = None
    trace_seq: int = 0
    carried_steps: int = 0
    # A rerun (engine/_rerun.py): the node it executes first, and what it reran.
    start_at: str | None = None
    rerun: dict[str, Any] | None = None
    # A rerun's fan-out from node: the old run's items that ended ok (label -> output).
    reused_items: dict[str, dict[str, Any]] = field(default_factory=dict)
    continued_at: str | None = None
    # How many times `current_node` started without ending and without a clean park
    # (`run_parked`): a start after such a start of the same node means the process
    # running it died. Resume bounds it (engine.py, NODE_START_BUDGET).
    current_node_starts: int = 0

    @property
    def terminal(self) -> bool:
        return self.status in TERMINAL

    def apply(self, event: dict[str, Any]) -> None:
        kind = event["type"]
        p = event.get("payload") or {}
        self.trace_seq = int(event["seq"])
        node = event.get("node")
        at = event.get("at")
        if kind == "run_started":
            self.workflow = p.get("workflow", "")
            self.input = p.get("input")
            self.parent_run_id = p.get("parent_run_id")
            self.started_at = at
            carried = p.get("carried")
            if carried:  # a rerun's or a continuation's: copies, the event stays as written
                self.outputs = copy.deepcopy(carried.get("outputs", {}))
                self.results = copy.deepcopy(carried.get("results", {}))
                self.steps = self.carried_steps = int(carried.get("steps", 0))
                self.scope_inputs = copy.deepcopy(carried.get("scope_inputs", {}))
            else:  # a fresh run (most): nothing to copy
                self.outputs, self.results, self.scope_inputs = {}, {}, {}
                self.steps = self.carried_steps = 0
            self.start_at = p.get("start_at")
            self.rerun = p.get("rerun")
            reused = p.get("reused_items")
            self.reused_items = copy.deepcopy(reused) if reused else {}
            # A continuation begins after its parent's checkpoint (`wfrun answer`).
            self.continued_at = p.get("checkpoint") if p.get("continued_from") else None
        elif kind == "node_started":
            unfinished = self.current_node == node and self.current_node is not None
            self.current_node_starts = self.current_node_starts + 1 if unfinished else 1
            self.current_node = node
            self.current_attempt = event.get("attempt")
            self.current_node_started_at = at
            if p.get("counts_step", True) and p.get("retry", 0) == 0:
                self.steps += 1
                scope = p.get("scope") or ""
                if scope:
                    self.scope_steps[scope] = self.scope_steps.get(scope, 0) + 1
            # A resumed start is the same visit (a fan-out node finds its items by it).
            if p.get("retry", 0) == 0 and node and not p.get("resumed"):
                self.visits[node] = self.visits.get(node, 0) + 1
        elif kind in ("node_finished", "node_failed"):
            result = {
                # The attempt's number (1 = the first try), as docs/workflows.md says; the
                # attempt's id (the trace's, the agent contract's) is `attempt_id`.
                "attempt": int(p.get("retry") or 0) + 1,
                "attempt_id": event.get("attempt"),
                "outcome": p.get("outcome", "ok" if kind == "node_finished" else "failed"),
                "started_at": p.get("started_at"),
                "finished_at": at,
                "duration_ms": p.get("duration_ms"),
                "kind": p.get("kind"),
            }
            for key in ("items", "branches"):  # a fan-out node's per-item outcomes
                if key in p:
                    result[key] = p[key]
            if not p.get("will_retry"):
                self.steps += int(p.get("item_steps") or 0)  # each item counts a step
            if kind == "node_finished":
                result["output"] = p.get("output")
                if node:
                    self.outputs[node] = p.get("output")
            else:
                result["error"] = p.get("error")
                if node and "output" in p:
                    self.outputs[node] = p["output"]  # a fan-out's list, null per failure
                elif node and not p.get("will_retry"):
                    self.outputs.pop(node, None)  # a later failure removes the output
            if p.get("will_retry"):
                result["will_retry"] = True
            if p.get("cached_from"):
                result["cached_from"] = p["cached_from"]  # a `cache:` hit: nothing ran
            if node:
                self.results[node] = result
                if not p.get("will_retry"):
                    self.last_node = node
            self.current_node = None
            self.current_attempt = None
            self.current_node_started_at = None
            self.current_node_starts = 0
        elif kind == "include_entered":
            mount = p.get("mount", "")
            prefix = mount + "/"
            # Re-entry starts empty: forget the previous invocation's outputs.
            for key in [k for k in self.outputs if k.startswith(prefix)]:
                del self.outputs[key]
            for key in [k for k in self.results if k.startswith(prefix)]:
                del self.results[key]
            for key in [k for k in self.scope_steps if k == mount or k.startswith(prefix)]:
                del self.scope_steps[key]
            self.scope_inputs[mount] = p.get("input")
        elif kind == "include_exited":
            mount = p.get("mount", "")
            self.outputs[mount] = {"exit": p.get("exit"), "output": p.get("output")}
        elif kind == "update_published":
            key = f"{p.get('type')}:{p.get('key')}"
            self.updates[key] = {"node": node, "type": p.get("type"), "key": p.get("key"),
                                 "data": p.get("data"), "at": at}
        elif kind == "notification_emitted":
            self.notifications += 1
        elif kind == "run_paused":
            self.paused = True
        elif kind == "run_resumed":
            self.paused = False
            if self.status == "waiting":
                self.status = "running"
        elif kind == "run_waiting":
            self.status = "waiting"
            self.waiting_on = p.get("waiting_on")
            self.final_output = p.get("final_output")
            self.finished_at = at
        elif kind in _TERMINAL_EVENTS:
            self.status = _TERMINAL_EVENTS[kind]
            self.final_output = p.get("final_output")
            self.error = p.get("error")
            self.finished_at = at
            self.current_node = None
            self.current_attempt = None
        elif kind == "run_interrupted":
            self.current_node = None
        elif kind == "run_parked" and self.current_node is not None:
            # Stopped cleanly (a host's SIGTERM, a Ctrl-C): that start of the node did
            # not end in a death, so the crash-loop budget does not count it.
            self.current_node_starts = max(self.current_node_starts - 1, 0)

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": STATE_SCHEMA,
            "run_id": self.run_id,
            "workflow": self.workflow,
            "status": self.status,
            "paused": self.paused,
            "input": self.input,
            "parent_run_id": self.parent_run_id,
            "started_at": self.started_at,
            "finished_at": self.finished_at,
            "current_node": self.current_node,
            "current_attempt": self.current_attempt,
            "current_node_started_at": self.current_node_started_at,
            "current_node_starts": self.current_node_starts,
            "last_node": self.last_node,
            "steps": self.steps,
            "carried_steps": self.carried_steps,
            "start_at": self.start_at,
            "rerun": self.rerun,
            "scope_steps": self.scope_steps,
            "scope_inputs": self.scope_inputs,
            "outputs": self.outputs,
            "results": self.results,
            "visits": self.visits,
            "updates": self.updates,
            "notifications": self.notifications,
            "waiting_on": self.waiting_on,
            "final_output": self.final_output,
            "error": self.error,
            "trace_seq": self.trace_seq,
        }


def fold(run_id: str, events: list[dict[str, Any]]) -> RunState:
    state = RunState(run_id)
    for event in events:
        state.apply(event)
    return state


def scoped(values: dict[str, Any], scope: str) -> dict[str, Any]:
    """Entries written in `scope`, keyed by their local ids.

    Root nodes have ids without '/'; a node of mount `fix` is `fix/plan`; the
    mount itself (`fix`) carries the exit output `{exit, output}` in its parent.
    """
    if not scope:
        return {k: v for k, v in values.items() if "/" not in k}
    prefix = scope + "/"
    cut = len(prefix)
    return {k[cut:]: v for k, v in values.items()
            if k.startswith(prefix) and "/" not in k[cut:]}


@dataclass(eq=False)  # one per driver, compared by identity
class ScopedValues:
    """Per-scope views of `RunState.outputs` / `results`, updated per applied event.

    Made empty, as a new run's state is; one made over a resumed run's state is
    `reset` once, to build them from its fold.

    A view handed to a node (`lend(scope)`) is never changed afterwards: the next
    change to that scope copies it first (copy on write), so a context a node or hook
    holds on to stays the snapshot it was given.

    A key `fix/plan` is `plan` in scope `fix`; `plan` is in scope '' (`rpartition`).
    `live` reads a recorded value back as nodes see it; None while no recorded value
    holds an artifact ref or an escape (the driver sets it when one does).
    """

    _state: RunState
    live: Live | None
    _outputs: dict[str, dict[str, Any]] = field(default_factory=dict, init=False)
    _results: dict[str, dict[str, Any]] = field(default_factory=dict, init=False)
    # ids of view dicts handed out since their last copy
    _lent: set[int] = field(default_factory=set, init=False)

    def reset(self) -> None:
        """Build every view again from the state's values (a resumed run's, a carried one's)."""
        self._outputs, self._results, self._lent = {}, {}, set()
        live = self.live
        for key, value in self._state.outputs.items():
            scope, _, local = key.rpartition("/")
            self._outputs.setdefault(scope, {})[local] = value if live is None else live(value)
        for key, value in self._state.results.items():
            scope, _, local = key.rpartition("/")
            self._results.setdefault(scope, {})[local] = value if live is None else live(value)

    def lend(self, scope: str) -> tuple[dict[str, Any], dict[str, Any]]:
        """The scope's outputs and results, as nodes see them: handed out, so `_sync`
        copies each before it changes."""
        outputs = self._outputs.setdefault(scope, {})
        results = self._results.setdefault(scope, {})
        self._lent.add(id(outputs))
        self._lent.add(id(results))
        return outputs, results

    def _sync(self, table: dict[str, dict[str, Any]], source: dict[str, Any],
              key: str) -> None:
        scope, _, local = key.rpartition("/")
        view = table.get(scope)
        if view is None:
            view = table[scope] = {}
        elif id(view) in self._lent:  # handed out: copied before it changes
            self._lent.discard(id(view))
            view = table[scope] = dict(view)
        if key in source:
            value = source[key]
            view[local] = value if self.live is None else self.live(value)
        else:
            view.pop(local, None)

    def applied(self, event: dict[str, Any]) -> None:
        """Follow `RunState.apply(event)`, which has just run (the same keys change)."""
        kind = event["type"]
        node = event.get("node")
        st = self._state
        if kind in _NODE_ENDS and node:
            self._sync(self._outputs, st.outputs, node)
            self._sync(self._results, st.results, node)
        elif kind == "include_entered":
            mount = (event.get("payload") or {}).get("mount", "")
            prefix = mount + "/"
            # The state forgot every key under the mount: those scopes start empty again
            # (fresh dicts; a lent one stays as it was).
            for table in (self._outputs, self._results):
                for scope in [s for s in table if s == mount or s.startswith(prefix)]:
                    self._lent.discard(id(table[scope]))
                    table[scope] = {}
        elif kind == "include_exited":
            mount = (event.get("payload") or {}).get("mount", "")
            self._sync(self._outputs, st.outputs, mount)
        elif kind == "run_started" and (st.outputs or st.results or self._outputs
                                        or self._results):
            self.reset()  # a continuation's or a rerun's carried values (a new run: none)


# -- the persisted form: long strings as artifacts ------------------------------------

ARTIFACT_THRESHOLD = 4096  # UTF-8 bytes; longer strings move to artifacts/
_MARKERS = ("$artifact", "$escaped")
Writer = Callable[[bytes, str], dict[str, Any]]
Reader = Callable[[dict[str, Any]], bytes]


def plain_text(text: str) -> bool:
    """ASCII within the artifact threshold: persisted as it is (not cut by LOG_CAP,
    not moved out), so a host's log line needs no walk."""
    return len(text) <= ARTIFACT_THRESHOLD and text.isascii()


def externalize(value: Any, write: Writer, marked: list[bool] | None = None) -> Any:
    """`value` as persisted; `marked[0]` becomes True when the result holds a marker
    (an artifact or an escaped object), which `has_artifacts` would otherwise find in
    a second walk of every event."""
    if isinstance(value, str):
        if len(value) > _SHORT and len(value.encode()) > ARTIFACT_THRESHOLD:
            if marked is not None:
                marked[0] = True
            return {"$artifact": write(value.encode(), "text/plain; charset=utf-8")}
        return value
    if isinstance(value, dict):
        # Scalars and short strings (most values) are kept without a call of their own;
        # plain loops, as a comprehension is a frame of its own (several per event).
        inner = {}
        for k, v in value.items():
            inner[k] = v if v is None or type(v) in _SCALARS or (
                type(v) is str and len(v) <= _SHORT) else externalize(v, write, marked)
        if len(value) == 1 and next(iter(value)) in _MARKERS:
            if marked is not None:
                marked[0] = True
            return {"$escaped": inner}
        return inner
    if isinstance(value, list):
        out = []
        for v in value:
            out.append(externalize(v, write, marked))
        return out
    return value


_SCALARS = frozenset({bool, int, float})  # nothing to move or escape: no call for them
# A string this short cannot pass the threshold (UTF-8 takes at most 4 bytes a character).
_SHORT = ARTIFACT_THRESHOLD // 4


def internalize(value: Any, read: Reader) -> Any:
    if isinstance(value, dict):
        if len(value) == 1:
            key = next(iter(value))
            if key == "$artifact" and isinstance(value[key], dict):
                return read(value[key]).decode()
            if key == "$escaped" and isinstance(value[key], dict):
                return {k: internalize(v, read) for k, v in value[key].items()}
        return {k: internalize(v, read) for k, v in value.items()}
    if isinstance(value, list):
        return [internalize(v, read) for v in value]
    return value


def has_artifacts(value: Any) -> bool:
    if isinstance(value, dict):
        if len(value) == 1 and next(iter(value)) in _MARKERS:
            return True
        return any(has_artifacts(v) for v in value.values())
    if isinstance(value, list):
        return any(has_artifacts(v) for v in value)
    return False
