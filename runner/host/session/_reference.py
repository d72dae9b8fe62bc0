"""The reference host: a JSONL session log plus a scripted model (for tests and demos).

`JsonlHost` keeps a session log shaped like pi's (a header, then entries with
ids), runs one turn at a time on the caller's thread, and calls the listener
exactly like a real runtime would: tool calls during the turn, `on_turn_settled`
when nothing remains (aborted when the model's reply is `Abort`: the user's
Escape). A message appended with `trigger_turn` while idle requests the next
turn, which `run_until_idle` runs. The model is any function of the conversation
so far that returns text or tool calls.
"""

from __future__ import annotations

import itertools
import json
import os
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from runner import _jsonin as jsonin

from ._protocol import DeliverAs, HostListener, SessionEntry, ToolReply

MAX_STEPS_PER_TURN = 16


@dataclass(frozen=True)
class ToolCall:
    name: str
    args: dict[str, Any]


@dataclass(frozen=True)
class ModelView:
    entries: list[SessionEntry]
    last_user_text: str
    last_role: str | None
    last_tool_reply: ToolReply | None = None


@dataclass(frozen=True)
class Abort:
    """The user pressed Escape: the turn ends here and settles as aborted."""


ModelReply = str | ToolCall | list[ToolCall] | Abort
Model = Callable[[ModelView], ModelReply]


@dataclass
class JsonlHost:
    path: Path
    model: Model
    sid: str = "session-1"
    listener: HostListener | None = None
    quiet: Callable[[], None] = lambda: None  # waits until background work is settled
    turns: int = 0
    _entries: list[SessionEntry] = field(default_factory=list)
    _lock: threading.RLock = field(default_factory=threading.RLock)
    _in_turn: bool = False
    _turn_requested: bool = False
    _ids: Iterable[int] = field(default_factory=lambda: itertools.count(1))
    notices: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.path.exists():
            self._load()
        else:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._write({"type": "session", "version": 1, "id": self.sid})

    # -- the log -----------------------------------------------------------------
    def _load(self) -> None:
        count = 0
        for line in self.path.read_text().splitlines():
            try:
                raw = jsonin.loads(line)
            except ValueError:
                continue  # a torn last line after a crash
            if raw.get("type") == "session":
                self.sid = raw.get("id", self.sid)
                continue
            count += 1
            self._entries.append(SessionEntry(
                id=raw["id"], type=raw["type"], role=raw.get("role"),
                custom_type=raw.get("custom_type"), content=raw.get("content"),
                details=raw.get("details"), parent_id=raw.get("parent_id")))
        self._ids = itertools.count(count + 1)

    def _write(self, raw: dict[str, Any]) -> None:
        with open(self.path, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(raw, sort_keys=True) + "\n")
            fh.flush()
            os.fsync(fh.fileno())

    def _append(self, type_: str, *, role: str | None = None, custom_type: str | None = None,
                content: Any = None, details: dict[str, Any] | None = None) -> str:
        with self._lock:
            entry_id = f"e{next(self._ids)}"  # type: ignore[call-overload]
            parent = self._entries[-1].id if self._entries else None
            entry = SessionEntry(entry_id, type_, role, custom_type, content, details, parent)
            self._entries.append(entry)
            self._write({"id": entry_id, "parent_id": parent, "type": type_, "role": role,
                         "custom_type": custom_type, "content": content, "details": details})
            return entry_id

    # -- Host ----------------------------------------------------------------------
    def session_id(self) -> str:
        return self.sid

    def is_idle(self) -> bool:
        with self._lock:
            return not self._in_turn

    def append_message(self, custom_type: str, content: str, details: dict[str, Any], *,
                       deliver_as: DeliverAs = "follow_up", trigger_turn: bool = False) -> str:
        entry_id = self._append("custom_message", custom_type=custom_type, content=content,
                                details=details)
        if trigger_turn:
            with self._lock:
                self._turn_requested = True
        return entry_id

    def read_session_entries(self) -> list[SessionEntry]:
        with self._lock:
            return list(self._entries)

    def abort_turn(self) -> None:
        self.notices.append("abort requested")

    def notify(self, text: str, level: str = "info") -> None:
        self.notices.append(f"{level}: {text}")

    # -- driving -------------------------------------------------------------------
    def start(self, reason: str = "startup") -> None:
        assert self.listener is not None
        self.listener.on_session_start(reason)

    def prompt(self, text: str) -> None:
        """A user message, then the turn it starts, then any follow-up turns."""
        self._append("message", role="user", content=text)
        self._turn()
        self.run_until_idle()

    def run_until_idle(self, max_turns: int = 50) -> None:
        for _ in range(max_turns):
            self.quiet()
            with self._lock:
                requested = self._turn_requested
            if not requested:
                return
            self._turn()
        raise RuntimeError(f"more than {max_turns} follow-up turns; the session never settled")

    def _turn(self) -> None:
        assert self.listener is not None
        with self._lock:
            self._in_turn = True
            self._turn_requested = False
        self.turns += 1
        self.listener.on_turn_started()
        last_reply: ToolReply | None = None
        aborted = False
        try:
            for _ in range(MAX_STEPS_PER_TURN):
                reply = self.model(self._view(last_reply))
                if isinstance(reply, Abort):
                    aborted = True
                    break
                calls = [reply] if isinstance(reply, ToolCall) else reply
                if isinstance(calls, str):
                    self._append("message", role="assistant", content=calls)
                    break
                for call in calls:
                    self._append("message", role="assistant",
                                 content={"tool_call": call.name, "args": call.args})
                    last_reply = self.listener.on_tool_call(f"call-{self.turns}", call.name,
                                                            call.args)
                    self._append("message", role="toolResult", content=last_reply.content,
                                 details={"is_error": last_reply.is_error,
                                          **last_reply.details})
        finally:
            with self._lock:
                self._in_turn = False
        self.listener.on_turn_settled(aborted)

    def _view(self, last_reply: ToolReply | None) -> ModelView:
        entries = self.read_session_entries()
        last_text, last_role = "", None
        for entry in reversed(entries):
            if entry.type == "custom_message" or (entry.type == "message"
                                                  and entry.role == "user"):
                last_text = str(entry.content)
                break
        if entries:
            last_role = entries[-1].role or entries[-1].type
        return ModelView(entries, last_text, last_role, last_reply)
