"""Building a real `AgentStep` the way the engine does, for executor tests."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from runner.engine.agent import AgentStep, StepContract
from runner.engine.control import RunControl

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

    def cancel_after(self, seconds: float) -> None:
        threading.Timer(seconds, self.control.cancel).start()


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
