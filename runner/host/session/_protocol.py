"""The session host protocol: the seam between wfrun and an agent runtime (DESIGN §6).

wfrun calls a `Host`; an adapter (the JSONL reference host, an MCP server, a pi
RPC bridge) implements it and calls back into a `HostListener`, which wfrun
implements. "Settled" means the runtime will not continue on its own: no retry,
compaction or queued follow-up remains.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

DeliverAs = Literal["steer", "follow_up", "next_turn"]


@dataclass(frozen=True)
class SessionEntry:
    """One normalized entry of a session log."""

    id: str
    type: str  # message | custom_message | custom | session
    role: str | None = None
    custom_type: str | None = None
    content: Any = None
    details: dict[str, Any] | None = None
    parent_id: str | None = None


@dataclass(frozen=True)
class ToolReply:
    """What a `workflow` tool call returns to the model."""

    content: str
    details: dict[str, Any] = field(default_factory=dict)
    is_error: bool = False


class Host(Protocol):
    def session_id(self) -> str: ...
    def is_idle(self) -> bool: ...
    def append_message(self, custom_type: str, content: str, details: dict[str, Any], *,
                       deliver_as: DeliverAs = "follow_up", trigger_turn: bool = False) -> str:
        """Append a model-visible message; with `trigger_turn`, start a turn when idle."""
        ...
    def read_session_entries(self) -> Iterable[SessionEntry]: ...
    def abort_turn(self) -> None: ...
    def notify(self, text: str, level: str = "info") -> None: ...


class HostListener(Protocol):
    def on_session_start(self, reason: str) -> None: ...
    def on_tool_call(self, call_id: str, name: str, args: dict[str, Any]) -> ToolReply: ...
    def on_turn_started(self) -> None: ...
    def on_turn_settled(self, aborted: bool) -> None: ...
    def on_session_shutdown(self, reason: str) -> None: ...
