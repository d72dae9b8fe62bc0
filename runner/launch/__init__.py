"""Durable deferred launch, turn intents and notifications (DESIGN §6, seed 000)."""

from __future__ import annotations

from ._coordinator import LaunchCoordinator
from ._engines import EngineOptions
from ._errors import PreflightError
from ._intents import fallback_text, message_id, workflow_name
from ._queue import Resolver

__all__ = [
    "EngineOptions",
    "LaunchCoordinator",
    "PreflightError",
    "Resolver",
    "fallback_text",
    "message_id",
    "workflow_name",
]
