"""Controller runtime: durable resources, keyed queue, effects, child workflows (DESIGN §7).

Reaches the engine only through `runner.controllers._workflows`.
"""

from __future__ import annotations

from runner._backoff import backoff_delay

from ._conditions import Condition, Result, StatusPatch, condition, is_true, merge_conditions
from ._context import ReconcileContext
from ._definitions import Controller, define_controller, load_controller
from ._effects import Applied, EffectError, EffectOutcome, Observation
from ._manager import ControllerManager, ManagerConfig
from ._workflows import ChildView, ChildWorkflows

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
