"""Finite execution of one run; run bundles; the agent-step contract (DESIGN §4).

Imports only `runner.compiler`, the hook API `runner.steps` (and the leaf modules
`runner.errors`, `runner.clock`, `runner.lazy`).

The names below load on first use (PEP 562): a view that reads a bundle
(`RunReader`, `fold`) must not pay for the executor, the node kinds and Jinja2
(issue 15, cold start).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from runner.lazy import lazy_names

if TYPE_CHECKING:
    from .agent import AgentStep, AgentStepExecutor, StepContract, ToolResult, parse_tolerant
    from .attempts import Attempt, fold_attempts
    from .bundle import FolderBundle
    from .control import RunControl
    from .engine import Engine, check_input, new_run_id
    from .reader import RunReader
    from .rows import BundleRows, MemoryRows
    from .runner import NotificationSink, RunOutcome
    from .state import TERMINAL, RunState, fold

#: public name -> the submodule that defines it
_LAZY: dict[str, str] = {
    **dict.fromkeys(("AgentStep", "AgentStepExecutor", "StepContract", "ToolResult",
                     "parse_tolerant"), "agent"),
    **dict.fromkeys(("Attempt", "fold_attempts"), "attempts"),
    "FolderBundle": "bundle",
    "RunControl": "control",
    **dict.fromkeys(("Engine", "check_input", "new_run_id"), "engine"),
    "RunReader": "reader",
    **dict.fromkeys(("BundleRows", "MemoryRows"), "rows"),
    **dict.fromkeys(("NotificationSink", "RunOutcome"), "runner"),
    **dict.fromkeys(("TERMINAL", "RunState", "fold"), "state"),
}


__getattr__, __dir__ = lazy_names(__name__, _LAZY)


__all__ = [
    "TERMINAL",
    "AgentStep",
    "AgentStepExecutor",
    "Attempt",
    "BundleRows",
    "Engine",
    "FolderBundle",
    "MemoryRows",
    "NotificationSink",
    "RunControl",
    "RunOutcome",
    "RunReader",
    "RunState",
    "StepContract",
    "ToolResult",
    "check_input",
    "fold",
    "fold_attempts",
    "new_run_id",
    "parse_tolerant",
]
