"""Durable deferred launch, turn intents and notifications (DESIGN §6, seed 000)."""

from __future__ import annotations

from runner.safety import redact, safe_message

from .activation import Activation
from .coordinator import LaunchCoordinator
from .engines import EngineOptions
from .intents import fallback_text, intent_id, launch_failed_text, message_id, new_intent
from .preflight import PreflightError, Resolver, workflow_name

__all__ = [
    "Activation",
    "EngineOptions",
    "LaunchCoordinator",
    "PreflightError",
    "Resolver",
    "fallback_text",
    "intent_id",
    "launch_failed_text",
    "message_id",
    "new_intent",
    "redact",
    "safe_message",
    "workflow_name",
]
