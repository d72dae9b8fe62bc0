"""The in-process host for Python agent frameworks (`runner.AgentSession`)."""

from __future__ import annotations

from ._agent_session import AgentSession

__all__ = ["AgentSession"]
