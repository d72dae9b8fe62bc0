"""wfrun: declarative, durable workflows for agent and automation work.

The public API is what `__all__` lists; every other module is private. The
error tree loads eagerly; the clock, compiler, engine, store, controller and host
names load on first use, so `wfrun --help` does not pay for them.
"""

from __future__ import annotations

import sys as _sys

from runner.errors import (
    ClaimLost,
    ConflictError,
    DefinitionInvalid,
    InputError,
    NotFoundError,
    OperationFailed,
    PermanentError,
    TemporaryError,
    WfrunError,
)

# No `typing` or clock at run time: `wfrun hook claude-code` runs on every prompt and
# stop, and `wfrun mcp` must answer within Claude Code's wait (issue 33).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from runner.clock import Clock, FakeClock, SystemClock
    from runner.compiler import (
        Compiler,
        CompileResult,
        Diagnostic,
        WorkflowDefinition,
        build_catalog,
        find_project_root,
    )
    from runner.controllers import (
        Condition,
        ControllerManager,
        ReconcileContext,
        define_controller,
    )
    from runner.engine import AgentStep, AgentStepExecutor, Engine, RunControl, RunOutcome
    from runner.host.inprocess import AgentSession
    from runner.host.session import SessionController
    from runner.host.session._reference import JsonlHost
    from runner.launch import LaunchCoordinator
    from runner.store import SqliteStore

__version__ = "0.1.0"

# The compiler is lazy too: `wfrun hook claude-code` runs on every prompt and stop
# and must not pay for YAML, Jinja2 and NetworkX (runner/host/mcp/_hook.py).
_LAZY = {
    "Clock": "runner.clock",
    "FakeClock": "runner.clock",
    "SystemClock": "runner.clock",
    "AgentSession": "runner.host.inprocess",
    "Compiler": "runner.compiler",
    "CompileResult": "runner.compiler",
    "Diagnostic": "runner.compiler",
    "WorkflowDefinition": "runner.compiler",
    "build_catalog": "runner.compiler",
    "find_project_root": "runner.compiler",
    "AgentStep": "runner.engine",
    "AgentStepExecutor": "runner.engine",
    "Engine": "runner.engine",
    "RunControl": "runner.engine",
    "RunOutcome": "runner.engine",
    "SqliteStore": "runner.store",
    "LaunchCoordinator": "runner.launch",
    "Condition": "runner.controllers",
    "ControllerManager": "runner.controllers",
    "ReconcileContext": "runner.controllers",
    "define_controller": "runner.controllers",
    "JsonlHost": "runner.host.session._reference",
    "SessionController": "runner.host.session",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'runner' has no attribute {name!r}")
    __import__(module)  # not importlib: its import is not free
    value = getattr(_sys.modules[module], name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


__all__ = [
    "AgentSession",
    "AgentStep",
    "AgentStepExecutor",
    "ClaimLost",
    "Clock",
    "CompileResult",
    "Compiler",
    "Condition",
    "ConflictError",
    "ControllerManager",
    "DefinitionInvalid",
    "Diagnostic",
    "Engine",
    "FakeClock",
    "InputError",
    "JsonlHost",
    "LaunchCoordinator",
    "NotFoundError",
    "OperationFailed",
    "PermanentError",
    "ReconcileContext",
    "RunControl",
    "RunOutcome",
    "SessionController",
    "SqliteStore",
    "SystemClock",
    "TemporaryError",
    "WfrunError",
    "WorkflowDefinition",
    "__version__",
    "build_catalog",
    "define_controller",
    "find_project_root",
]
