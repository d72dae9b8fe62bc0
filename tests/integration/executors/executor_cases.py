"""Building a real `AgentStep` the way the engine does, for executor tests."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from waiting import DEADLINE

from runner.engine._agent import AgentStep, StepContract
from runner.engine._control import RunControl

RESULT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["verdict", "score"],
    "properties": {"verdict": {"enum": ["pass", "fail"]}, "score": {"type": "integer"}},
}
TASK = "Review the change in src/app.py and report a verdict."


@dataclass
class Case:
    """A step plus what the engine would observe: control and published updates."""

    step: AgentStep
    control: RunControl
    updates: list[tuple[str, str, Any]] = field(default_factory=list)

    cancelled_at: float | None = None

    def cancel_when(self, ready: Callable[[], object], timeout: float = DEADLINE) -> None:
        """Cancel once `ready()` is true (the child wrote its pid, the server is
        hanging): the cancel then always lands where the test means it to, however
        slow the child was to start. Gives up (without cancelling) after `timeout`."""
        def watch() -> None:
            end = time.monotonic() + timeout
            while not ready():
                if time.monotonic() > end:
                    return
                time.sleep(0.01)
            self.cancel()

        threading.Thread(target=watch, daemon=True).start()

    def cancel(self) -> None:
        self.cancelled_at = time.monotonic()
        self.control.cancel()


MakeStep = Callable[..., Case]


def new_case(schema: dict[str, Any] | None = RESULT_SCHEMA, timeout: float | None = 8.0,
             attempt: str = "a1b2c3d4e5f60718") -> Case:
    control = RunControl()
    contract = StepContract("review-20260101T000000Z-0badcafe", "review", "review",
                            attempt, schema)
    deadline = time.monotonic() + timeout if timeout is not None else None
    case = Case(AgentStep(contract=contract, prompt=TASK + contract.render(),
                          control=control, deadline=deadline,
                          monotonic=time.monotonic), control)
    case.step.on_update = lambda kind, key, data: case.updates.append((kind, key, data))
    return case
