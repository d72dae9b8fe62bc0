"""Agent step executors (DESIGN §4): each drives one turn of an `AgentStep`.

Names load lazily so that using one executor does not import the others'
dependencies (the openai executor pulls in httpx, ~75 ms). To add one: a
line in `_HOMES`, `__all__` and the TYPE_CHECKING block.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from runner.engine.executors._command import CommandExecutor
    from runner.engine.executors._openai import OpenAIExecutor
    from runner.engine.executors._scripted import ScriptedExecutor

_HOMES = {
    "CommandExecutor": "_command",
    "OpenAIExecutor": "_openai",
    "ScriptedExecutor": "_scripted",
}

__all__ = [
    "CommandExecutor",
    "OpenAIExecutor",
    "ScriptedExecutor",
]


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{home}"), name)
