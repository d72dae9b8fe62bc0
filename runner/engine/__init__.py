"""Finite execution of one run; run bundles; the agent-step contract (DESIGN §4).

Imports only `runner.compiler`, the hook API `runner.steps` (and the leaf modules
`runner.errors`, `runner.clock`, `runner._lazy`).

The names below load on first use (PEP 562): a view that reads a bundle
(`RunReader`, `fold`) must not pay for the executor, the node kinds and Jinja2
(issue 15, cold start).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from runner._lazy import lazy_names

if TYPE_CHECKING:
    from ._agent import AgentStep, AgentStepExecutor
    from ._attempts import fold_attempts
    from ._control import RunControl
    from ._engine import Engine, check_input, new_run_id
    from ._reader import RunReader
    from ._runtypes import NotificationSink, RunOutcome
    from ._state import RunState, fold

#: public name -> the submodule that defines it
_LAZY: dict[str, str] = {
    **dict.fromkeys(("AgentStep", "AgentStepExecutor"), "_agent"),
    "fold_attempts": "_attempts",
    "RunControl": "_control",
    **dict.fromkeys(("Engine", "check_input", "new_run_id"), "_engine"),
    "RunReader": "_reader",
    **dict.fromkeys(("NotificationSink", "RunOutcome"), "_runner"),
    **dict.fromkeys(("RunState", "fold"), "_state"),
}


__getattr__, __dir__ = lazy_names(__name__, _LAZY)


__all__ = [
    "AgentStep",
    "AgentStepExecutor",
    "Engine",
    "NotificationSink",
    "RunControl",
    "RunOutcome",
    "RunReader",
    "RunState",
    "check_input",
    "fold",
    "fold_attempts",
    "new_run_id",
    ]
