"""The wfrun-owned session log of an MCP session (Claude Code or any MCP client).

Claude Code's transcript cannot hold wfrun's `details` (intent ids, run ids), and a
message wfrun wants the model to see travels through a hook's stdout, not through
the transcript API. So wfrun keeps its own append-only JSONL log per session:

    {"kind": "message", "id": "m3", "custom_type": ..., "content": ..., "details": {...},
     "deliver_as": "follow_up", "trigger_turn": true}
    {"kind": "delivered", "id": "m3", "via": "stop-hook"}

The MCP server appends `message` lines (the session controller scans them for an
intent id before any delivery retry); whoever hands a message to the model (the
Stop hook, or a tool reply when there are no hooks) appends `delivered` after
writing its output and before exiting, so a crash in between leaves the message
pending and it is handed over again — never lost, never sent twice — because
Claude Code reads a hook's stdout only when the hook exits 0.

Every append is one fsync'd line under an exclusive `flock` (two processes write
here); a torn last line from a crash is skipped on read and newline-terminated
before the next append. Standard library only: the hook imports this on every
prompt and stop. The file is 0600 in 0700 folders.
"""

from __future__ import annotations

import fcntl
import json
import os
import string

from runner import _jsonin as jsonin

# No typing, dataclasses or pathlib at run time: each costs the hook milliseconds.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

SESSION_ID_CHARS = frozenset(string.ascii_letters + string.digits + "_.:-")
LOG_DIR = os.path.join("state", "mcp-sessions")  # under <project>/.wfrun/


class SessionLogError(Exception):
    """The log cannot be used (a bad session id, an unreadable or unwritable file)."""


class LogMessage:
    """One `message` record and whether a `delivered` record follows it."""

    __slots__ = ("content", "custom_type", "deliver_as", "delivered", "details", "id",
                 "trigger_turn")

    def __init__(self, id: str, custom_type: str, content: str, details: dict[str, Any],
                 deliver_as: str, trigger_turn: bool, delivered: bool) -> None:
        self.id = id
        self.custom_type = custom_type
        self.content = content
        self.details = details
        self.deliver_as = deliver_as
        self.trigger_turn = trigger_turn
        self.delivered = delivered


def valid_session_id(session_id: str) -> bool:
    return (0 < len(session_id) <= 128 and session_id[0] not in "_.:-"
            and set(session_id) <= SESSION_ID_CHARS)


def private_dir(path: str) -> str:
    """Create `path` (and parents) 0700; refuse a symlink or a file in its place."""
    os.makedirs(path, mode=0o700, exist_ok=True)
    if os.path.islink(path) or not os.path.isdir(path):
        raise SessionLogError(f"{path} is not a private folder (a symlink or a file)")
    if os.stat(path).st_mode & 0o077:
        os.chmod(path, 0o700)
    return path


def log_path(wfrun_dir: str | os.PathLike[str], session_id: str) -> str:
    if not valid_session_id(session_id):
        raise SessionLogError(f"session id {session_id!r} is not usable as a log name "
                              "(letters, digits, '_', '.', ':' and '-', at most 128)")
    return os.path.join(os.fspath(wfrun_dir), LOG_DIR, f"{session_id.replace(':', '_')}.jsonl")


class SessionLog:
    """One session's log file; cheap to construct (nothing is read until asked)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = os.fspath(path)

    @classmethod
    def for_session(cls, wfrun_dir: str | os.PathLike[str], session_id: str) -> SessionLog:
        """The log of `session_id` in the project whose `.wfrun/` folder is `wfrun_dir`."""
        return cls(log_path(wfrun_dir, session_id))

    # -- writing ---------------------------------------------------------------------
    def _open_locked(self) -> int:
        private_dir(os.path.dirname(self.path))
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW, 0o600)
        except OSError as exc:
            raise SessionLogError(f"cannot open the session log {self.path}: "
                                  f"{exc.strerror}") from None
        fcntl.flock(fd, fcntl.LOCK_EX)  # released by close
        return fd

    def _write(self, fd: int, records: list[dict[str, Any]]) -> None:
        data = b"".join(json.dumps(r, sort_keys=True, separators=(",", ":")).encode() + b"\n"
                        for r in records)
        try:
            size = os.fstat(fd).st_size
            if size and os.pread(fd, 1, size - 1) != b"\n":
                data = b"\n" + data  # end a torn line left by a crash
            os.write(fd, data)
            os.fsync(fd)
        except OSError as exc:
            raise SessionLogError(f"cannot write the session log {self.path}: "
                                  f"{exc.strerror}") from None

    def append_message(self, custom_type: str, content: str, details: dict[str, Any], *,
                       deliver_as: str, trigger_turn: bool) -> str:
        """Append a model-visible message; its entry id (counted under the lock, so
        two writers never mint the same one)."""
        fd = self._open_locked()
        try:
            count = sum(1 for r in self._records() if r.get("kind") == "message")
            entry_id = f"m{count + 1}"
            self._write(fd, [{"kind": "message", "id": entry_id, "custom_type": custom_type,
                              "content": content, "details": details,
                              "deliver_as": deliver_as, "trigger_turn": trigger_turn}])
        finally:
            os.close(fd)
        return entry_id

    def mark_delivered(self, ids: list[str], via: str) -> None:
        if not ids:
            return
        fd = self._open_locked()
        try:
            self._write(fd, [{"kind": "delivered", "id": i, "via": via} for i in ids])
        finally:
            os.close(fd)

    # -- reading ---------------------------------------------------------------------
    def _records(self) -> list[dict[str, Any]]:
        try:
            with open(self.path, "rb") as fh:
                raw = fh.read()
        except FileNotFoundError:
            return []
        except OSError as exc:
            raise SessionLogError(f"cannot read the session log {self.path}: "
                                  f"{exc.strerror}") from None
        out: list[dict[str, Any]] = []
        for line in raw.splitlines():
            try:
                record = jsonin.loads(line)
            except ValueError:
                continue  # a torn line after a crash
            if isinstance(record, dict):
                out.append(record)
        return out

    def messages(self) -> list[LogMessage]:
        records = self._records()
        delivered = {r.get("id") for r in records if r.get("kind") == "delivered"}
        out = []
        for r in records:
            if r.get("kind") != "message" or not isinstance(r.get("id"), str):
                continue
            details = r.get("details")
            out.append(LogMessage(r["id"], str(r.get("custom_type") or ""),
                                  str(r.get("content") or ""),
                                  details if isinstance(details, dict) else {},
                                  str(r.get("deliver_as") or "follow_up"),
                                  bool(r.get("trigger_turn")), r["id"] in delivered))
        return out

    def pending(self) -> list[LogMessage]:
        """Messages not yet handed to the model, oldest first."""
        return [m for m in self.messages() if not m.delivered]
