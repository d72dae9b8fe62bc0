"""The narrow ports a run driver hands out, so neither a node nor a fan-out node holds the
driver itself: an attempt's logs and updates (`StepRecorder`, nodecontext.StepLogs and
StepUpdates) and a fan-out node's view of its run (`DriverFanout`, fanout.FanoutPort).
Both speak to the driver through `DriverSide`, the part of it they use."""

from __future__ import annotations

import threading
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from runner.clock import Clock
from runner.compiler import Node, WorkflowDefinition
from runner.compiler._templates import Scope

from ._control import RunControl
from ._fanout import run_fanout
from ._items import ChildRuns, ItemLedger
from ._livelog import LiveLog
from ._nodecontext import NodeContext, NodeResult
from ._processes import ProcessRegistry
from ._runtypes import CrashPoint
from ._secrets import RunSecrets
from ._state import RunState

if TYPE_CHECKING:
    from ._agent import AgentStepExecutor


class DriverSide(Protocol):
    """What the ports use of a `RunDriver`."""

    run_id: str
    definition: WorkflowDefinition
    state: RunState
    items: ItemLedger | None
    make_items: Callable[[], ItemLedger]
    children: ChildRuns | None
    clock: Clock
    secrets: RunSecrets
    executor: AgentStepExecutor | None
    work_dir: str
    processes: ProcessRegistry | None

    crash: CrashPoint | None

    def live(self, value: Any) -> Any: ...

    def record_logs(self, logs: list[tuple[str, str, dict[str, Any]]]) -> None: ...

    def record_log(self, node: str, attempt: str, stdout: str, stderr: str,
                   stdout_cut: bool = False, stderr_cut: bool = False,
                   exit_code: int | None = None) -> None: ...

    def live_log(self, node: str, attempt: str, extra: tuple[str, ...],
                 cap_chars: int) -> LiveLog: ...

    def publish_update(self, kind: str, key: str, data: Any) -> None: ...

    def notify(self, node: str, attempt: str, notification_id: str, kind: str,
               message: str, channels: tuple[str, ...] = ()) -> None: ...

    def prompt_sent(self, node: str, attempt: str, kind: str, prompt: str) -> None: ...


class DriverFanout:
    """`FanoutPort`: what a fan-out node has of its run. Its items record through the
    driver one at a time (`lock`: the trace has one writer)."""

    __slots__ = ("_driver",)

    def __init__(self, driver: DriverSide) -> None:
        self._driver = driver

    @property
    def items(self) -> ItemLedger:
        d = self._driver
        if d.items is None:  # made on first use: a run without fan-out makes none
            d.items = d.make_items()
        return d.items

    def steps_left(self) -> int:
        return max(self._driver.definition.max_steps - self._driver.state.steps, 0)

    def item_context(self, node: Node, attempt: str, deadline: float | None,
                     values: dict[str, Any], control: RunControl,
                     lock: threading.Lock, span: str | None = None) -> NodeContext:
        d = self._driver
        recorder = StepRecorder(d, node.id, attempt, lock)
        return NodeContext(
            run_id=d.run_id, workflow=d.definition.name, node=node, attempt=attempt,
            deadline=deadline, values=values, visit=d.state.visits.get(node.id, 1),
            resuming=False, control=control, clock=d.clock, secrets=d.secrets,
            logs=recorder, updates=recorder, executor=d.executor, work_dir=d.work_dir,
            processes=d.processes, span=span)

    def template_scope(self, deadline: float | None, control: RunControl) -> Scope:
        d = self._driver
        return Scope(d.definition.template_budget, d.clock.monotonic, deadline, control)

    def record_logs(self, logs: list[tuple[str, str, dict[str, Any]]]) -> None:
        self._driver.record_logs(logs)

    def run(self, ctx: NodeContext) -> NodeResult:
        return run_fanout(ctx, self)

    def crash(self, point: str) -> None:
        crash = self._driver.crash
        if crash is not None:
            crash(point)

    def child_run(self, workflow: str, value: Any, run_id: str,
                  control: RunControl) -> NodeResult:
        children = self._driver.children
        if children is None:
            return NodeResult("failed", error={
                "code": "unsupported", "message": "a workflow: body needs a launch queue "
                "(run it with `wfrun run` or a host)"})
        outcome, output, error = children.run(workflow, value, run_id, control)
        if outcome not in ("ok", "failed", "timed_out", "cancelled", "parked"):
            outcome = "failed"
        return NodeResult(outcome, output, error)  # type: ignore[arg-type]

    def reused(self, node: str, visit: int) -> tuple[str, dict[str, Any]] | None:
        st = self._driver.state
        items = st.reused_items.get(node) if visit == 1 else None
        return (str((st.rerun or {}).get("of")), items) if items else None


@dataclass(slots=True)
class StepRecorder:
    """One attempt's logs and updates (nodecontext.StepLogs, StepUpdates), recorded
    through the driver's `emit`: the node gets these, not the driver. A fan-out item's
    recorder holds its lock around each, as items record from their own threads."""

    _driver: DriverSide
    _node: str
    _attempt: str
    _lock: AbstractContextManager[object] = field(default_factory=nullcontext)

    def record(self, stdout: str, stderr: str, stdout_cut: bool = False,
               stderr_cut: bool = False, exit_code: int | None = None) -> None:
        with self._lock:
            self._driver.record_log(self._node, self._attempt, stdout, stderr, stdout_cut,
                                    stderr_cut, exit_code)

    def live(self, extra: tuple[str, ...], cap_chars: int) -> LiveLog:
        return self._driver.live_log(self._node, self._attempt, extra, cap_chars)

    def publish(self, kind: str, key: str, data: Any) -> None:
        with self._lock:
            self._driver.publish_update(kind, key, data)

    def notify(self, notification_id: str, kind: str, message: str,
               channels: tuple[str, ...] = ()) -> None:
        with self._lock:
            self._driver.notify(self._node, self._attempt, notification_id, kind, message,
                                channels)

    def prompt_sent(self, kind: str, prompt: str) -> None:
        with self._lock:
            self._driver.prompt_sent(self._node, self._attempt, kind, prompt)
