"""Finite execution of one run; run bundles; the agent-step contract (DESIGN §4).

Imports only `runner.compiler` (and the leaf modules `runner.errors`, `runner.clock`).
"""

from __future__ import annotations

from .agent import AgentStep, AgentStepExecutor, StepContract, ToolResult, parse_tolerant
from .bundle import BundleWriter, FolderBundle
from .control import RunControl
from .engine import Engine, check_input, new_run_id
from .reader import RunReader
from .runner import NotificationSink, RunOutcome
from .state import TERMINAL, RunState, fold

__all__ = [
    "TERMINAL",
    "AgentStep",
    "AgentStepExecutor",
    "BundleWriter",
    "Engine",
    "FolderBundle",
    "NotificationSink",
    "RunControl",
    "RunOutcome",
    "RunReader",
    "RunState",
    "StepContract",
    "ToolResult",
    "check_input",
    "fold",
    "new_run_id",
    "parse_tolerant",
]
