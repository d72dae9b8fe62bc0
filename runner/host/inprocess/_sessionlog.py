"""A wfrun-owned session log for in-process hosts: JSONL, fsynced, private.

Agent frameworks keep their conversation in memory and drop the `details` of
wfrun's messages, so the in-process host keeps its own log of what wfrun
appended; the delivery scan for a turn-intent id reads it after a crash. One
entry per line; a torn last line (a crash mid-write) is skipped on load.
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import Any

from runner import _jsonin as jsonin
from runner._private import private_dirs
from runner.host.session._protocol import SessionEntry

TURN_TYPE = "turn"  # a marker: a turn began here (its input was everything before it)


class SessionLog:
    def __init__(self, path: Path, session_id: str) -> None:
        self.path = path
        self.session_id = session_id
        self._entries: list[SessionEntry] = []
        self._triggers: set[str] = set()  # ids of messages that asked for a turn
        self._lock = threading.Lock()
        if path.exists():
            self._load()
        else:
            private_dirs(path.parent)
            self._write({"type": "session", "version": 1, "id": session_id})

    def _load(self) -> None:
        for line in self.path.read_text(encoding="utf-8").splitlines():
            try:
                raw = jsonin.loads(line)
            except ValueError:
                continue  # a torn last line after a crash
            if not isinstance(raw, dict) or raw.get("type") == "session" or "id" not in raw:
                continue
            details = raw.get("details")
            if raw.get("trigger_turn"):
                self._triggers.add(str(raw["id"]))
            self._entries.append(SessionEntry(
                id=str(raw["id"]), type=str(raw.get("type")), role=raw.get("role"),
                custom_type=raw.get("custom_type"), content=raw.get("content"),
                details=details if isinstance(details, dict) else None,
                parent_id=raw.get("parent_id")))

    def _write(self, raw: dict[str, Any]) -> None:
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        with os.fdopen(fd, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(raw, sort_keys=True, default=str) + "\n")
            fh.flush()
            os.fsync(fh.fileno())

    def append(self, type_: str, *, role: str | None = None, custom_type: str | None = None,
               content: Any = None, details: dict[str, Any] | None = None,
               trigger_turn: bool = False) -> SessionEntry:
        with self._lock:
            entry = SessionEntry(f"e{len(self._entries) + 1}", type_, role, custom_type,
                                 content, details,
                                 self._entries[-1].id if self._entries else None)
            # Durable before it is visible: a crash never leaves an entry the scan
            # trusted but the file lacks.
            self._write({"id": entry.id, "parent_id": entry.parent_id, "type": type_,
                         "role": role, "custom_type": custom_type, "content": content,
                         "details": details, "trigger_turn": trigger_turn})
            self._entries.append(entry)
            if trigger_turn:
                self._triggers.add(entry.id)
            return entry

    def unread(self) -> list[tuple[str, bool]]:
        """wfrun's messages after the last turn began: (text, asks for a turn). After a
        crash these are what the model has not seen yet; the reopened session hands
        them to the next turn instead of losing them."""
        with self._lock:
            out: list[tuple[str, bool]] = []
            for entry in self._entries:
                if entry.type == TURN_TYPE:
                    out = []
                elif entry.type == "custom_message":
                    out.append((str(entry.content), entry.id in self._triggers))
            return out

    def entries(self) -> list[SessionEntry]:
        with self._lock:
            return list(self._entries)
