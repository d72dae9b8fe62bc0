"""Controller runtime: durable resources, keyed queue, effects, child workflows (DESIGN §7).

Reaches the engine only through `runner.controllers._workflows`.

The names below load on first use (PEP 562): `wfrun controller apply` writes one
row through `._resources` and must not pay for the manager, the engine and the
hooks' imports (issue 34 item 11, cold start).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from runner._backoff import backoff_delay
from runner._lazy import lazy_names

if TYPE_CHECKING:
    from ._conditions import (
        Condition,
        Result,
        StatusPatch,
        condition,
        is_true,
        merge_conditions,
    )
    from ._context import ReconcileContext
    from ._definitions import Controller, define_controller, load_controller
    from ._effects import Applied, EffectError, EffectOutcome, Observation
    from ._manager import ControllerManager, ManagerConfig
    from ._workflows import ChildView, ChildWorkflows

#: public name -> the submodule that defines it
_LAZY: dict[str, str] = {
    **dict.fromkeys(("Condition", "Result", "StatusPatch", "condition", "is_true",
                     "merge_conditions"), "_conditions"),
    "ReconcileContext": "_context",
    **dict.fromkeys(("Controller", "define_controller", "load_controller"), "_definitions"),
    **dict.fromkeys(("Applied", "EffectError", "EffectOutcome", "Observation"), "_effects"),
    **dict.fromkeys(("ControllerManager", "ManagerConfig"), "_manager"),
    **dict.fromkeys(("ChildView", "ChildWorkflows"), "_workflows"),
}


__getattr__, __dir__ = lazy_names(__name__, _LAZY)


__all__ = [
    "Applied",
    "ChildView",
    "ChildWorkflows",
    "Condition",
    "Controller",
    "ControllerManager",
    "EffectError",
    "EffectOutcome",
    "ManagerConfig",
    "Observation",
    "ReconcileContext",
    "Result",
    "StatusPatch",
    "backoff_delay",
    "condition",
    "define_controller",
    "is_true",
    "load_controller",
    "merge_conditions",
]
