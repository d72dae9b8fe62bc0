"""What one attempt of one node is given, and what it hands back.

A node executor (`nodes.py`, one per kind in the node-kind table) sees a narrow
`NodeContext`: the run's control, clock and secrets, where its logs and updates
go, the agent executor, and its own node, attempt, deadline and template values.
It never sees the run driver, so it cannot reach the bundle, the state or the
loop, and the run loop (`runner.py`) is the one place that records events.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol

from runner.clock import Clock
from runner.compiler import Node

from ._control import RunControl
from ._items import ItemLedger
from ._livelog import LiveLog
from ._processes import ProcessRegistry
from ._secrets import RunSecrets

if TYPE_CHECKING:
    from ._agent import AgentStepExecutor

Outcome = Literal["ok", "failed", "timed_out", "cancelled", "parked"]


@dataclass
class NodeResult:
    outcome: Outcome
    output: Any = None
    error: dict[str, Any] | None = None
    extra: dict[str, Any] = field(default_factory=dict)  # goes into $result (e.g. exit_code)


class StepLogs(Protocol):
    """One attempt's logs (`wfrun logs`): recorded events and the live file."""

    def record(self, stdout: str, stderr: str, stdout_cut: bool = False,
               stderr_cut: bool = False, exit_code: int | None = None) -> None: ...

    def live(self, extra: tuple[str, ...], cap_chars: int) -> LiveLog: ...


class StepUpdates(Protocol):
    """What an attempt tells the run as it goes: progress updates, notifications to
    the run's origin, and the prompts it sends an agent (all recorded in the trace)."""

    def publish(self, kind: str, key: str, data: Any) -> None: ...

    def notify(self, notification_id: str, kind: str, message: str,
               channels: tuple[str, ...] = ()) -> None: ...

    def prompt_sent(self, kind: str, prompt: str) -> None: ...


class FanoutPort(Protocol):
    """What a fan-out node (`parallel`, `map`: fanout.py) has of its run besides its own
    attempt: where its items are durable, the run's step budget, and a context per item
    (recorded as `NODE[i]`, under the item's own control)."""

    @property
    def items(self) -> ItemLedger: ...

    def steps_left(self) -> int: ...

    def item_context(self, node: Node, attempt: str, deadline: float | None,
                     values: dict[str, Any], control: RunControl,
                     lock: threading.Lock, span: str | None = None) -> NodeContext: ...

    def template_scope(self, deadline: float | None,
                       control: RunControl) -> AbstractContextManager[object]: ...

    def record_logs(self, logs: list[tuple[str, str, dict[str, Any]]]) -> None:
        """Logs items kept elsewhere (`NODE[i]`, attempt, log as `StepLogs.record` takes
        it): recorded in the run's trace in one write."""
        ...

    def run(self, ctx: NodeContext) -> NodeResult:
        """Run the fan-out node `ctx` is for (engine/_fanout.py)."""
        ...

    def crash(self, point: str) -> None:
        """The crash seam at a named point (runner.CRASH_POINTS), on the run's thread."""
        ...

    def child_run(self, workflow: str, value: Any, run_id: str,
                  control: RunControl) -> NodeResult:
        """A `workflow:` body: the linked child run `run_id`, to its end."""
        ...

    def reused(self, node: str, visit: int) -> tuple[str, dict[str, Any]] | None:
        """A rerun's fan-out from node, on its first visit: the run it reran and the
        outputs of the items that ended ok there, by label (engine/_rerun.py)."""
        ...


@dataclass(frozen=True)
class NodeContext:
    run_id: str
    workflow: str  # the definition's name
    node: Node
    attempt: str
    deadline: float | None  # on `clock.monotonic()`; None: no deadline
    values: dict[str, Any]  # the template context of the node's scope
    visit: int  # how many times the run has entered this node (1 the first time)
    resuming: bool  # re-running the step the run was interrupted in
    control: RunControl
    clock: Clock
    secrets: RunSecrets
    logs: StepLogs
    updates: StepUpdates
    executor: AgentStepExecutor | None
    work_dir: str
    processes: ProcessRegistry | None = None
    fanout: FanoutPort | None = None  # a fan-out node's (set by the run loop)
    # The attempt whose span a step's TRACEPARENT names when not its own: a fan-out
    # item has no span, so its map node's ("": none known, on an item host).
    span: str | None = None

    def remaining(self) -> float | None:
        if self.deadline is None:
            return None
        return max(self.deadline - self.clock.monotonic(), 0.0)


Executor = Callable[[NodeContext], NodeResult]


def fail(code: str, message: str, **extra: Any) -> NodeResult:
    return NodeResult("failed", error={"code": code, "message": message[:2000]}, extra=extra)


def stopped(control: RunControl) -> NodeResult:
    """The ending of an attempt a cancel or park interrupted."""
    if control.stop_reason == "park":
        return NodeResult("parked")
    return NodeResult("cancelled", error={"code": "cancelled",
                                          "message": control.reason or "cancelled"})


#: Types a JSON round trip returns as they are (a caller may check before `json_value`).
PLAIN_JSON = frozenset({str, int, bool, type(None)})


def json_value(value: Any, what: str) -> tuple[Any, NodeResult | None]:
    if type(value) in PLAIN_JSON:
        return value, None
    try:
        return json.loads(json.dumps(value, allow_nan=False)), None
    except (TypeError, ValueError):
        return None, fail("not_json", f"{what} returned a value that is not JSON "
                          f"({type(value).__name__})")
