"""A small `wfrun bridge` client for tests and the benchmark: a real subprocess, real pipes.

It plays the agent runtime's side of the protocol (docs/hosts.md, "wfrun bridge"):
it keeps its own session log (a JSONL file, so a restarted client sees what was
appended before a kill), answers the bridge's host calls on its reader thread at
any time, including while one of its own requests waits, and sends listener calls.
`request_many` sends several requests before reading any reply, the way a client
that runs one message's tool calls in parallel does.
"""

from __future__ import annotations

import contextlib
import io
import itertools
import json
import os
import subprocess
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from waiting import DEADLINE, LineReader


class BridgeError(Exception):
    def __init__(self, error: dict[str, Any]) -> None:
        super().__init__(error.get("message"))
        self.code = error.get("code")
        self.message = str(error.get("message"))


@dataclass
class _Slot:
    done: threading.Event = field(default_factory=threading.Event)
    doc: dict[str, Any] | None = None


class SessionLog:
    """The client's session log: one JSON entry per line, fsynced, torn tail skipped."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.entries: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        if path.exists():
            for line in path.read_text().splitlines():
                try:
                    self.entries.append(json.loads(line))
                except ValueError:
                    continue
        else:
            path.parent.mkdir(parents=True, exist_ok=True)

    def append(self, **entry: Any) -> str:
        with self._lock:
            entry_id = f"e{len(self.entries) + 1}"
            doc = {"id": entry_id, "parentId": self.entries[-1]["id"] if self.entries else None,
                   **entry}
            self.entries.append(doc)
            with open(self.path, "a", encoding="utf-8") as fh:
                fh.write(json.dumps(doc) + "\n")
                fh.flush()
                os.fsync(fh.fileno())
            return entry_id

    def snapshot(self) -> list[dict[str, Any]]:
        with self._lock:
            return list(self.entries)

    def custom(self, custom_type: str | None = None) -> list[dict[str, Any]]:
        return [e for e in self.snapshot() if e.get("type") == "custom_message"
                and (custom_type is None or e.get("customType") == custom_type)]


class BridgeClient:
    def __init__(self, root: Path, log: SessionLog, *, env: dict[str, str] | None = None,
                 argv: list[str] | None = None) -> None:
        self.root = root
        self.log = log
        self.argv = argv or [sys.executable, "-m", "runner", "--project", str(root), "bridge"]
        self.env = {**os.environ, **(env or {})}
        self.proc: subprocess.Popen[bytes] | None = None
        self.stderr: LineReader | None = None
        self.host_calls: list[dict[str, Any]] = []  # every request the bridge made
        self.notices: list[dict[str, Any]] = []  # its notifications
        self.turn_requested = threading.Event()
        self.protocol_errors: list[dict[str, Any]] = []
        self.stderr_lines: list[str] = []  # everything it wrote to stderr, once it exited
        self._ids = itertools.count(1)
        self._pending: dict[int, _Slot] = {}
        self._lock = threading.Lock()
        self._write_lock = threading.Lock()
        self._reader: threading.Thread | None = None
        self.view_from = 0  # host/readEntries returns the log from this entry on
        self._err: io.TextIOWrapper | None = None

    # -- process -----------------------------------------------------------------
    def start(self) -> BridgeClient:
        self.proc = subprocess.Popen(self.argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, cwd=self.root, env=self.env)
        assert self.proc.stderr is not None


        self._err = io.TextIOWrapper(self.proc.stderr, encoding="utf-8", errors="replace")
        self.stderr = LineReader(self._err)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        return self

    def close(self, timeout: float = DEADLINE) -> int:
        """Close stdin (the bridge shuts the session down) and wait for the exit code."""
        assert self.proc is not None
        if self.proc.stdin and not self.proc.stdin.closed:
            with contextlib.suppress(BrokenPipeError):
                self.proc.stdin.close()
        code = self.proc.wait(timeout)
        self._release()
        return code

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(DEADLINE)
        self._release()

    def _release(self) -> None:
        """Join the readers (they end at EOF) and close every pipe."""
        assert self.proc is not None
        if self._reader is not None:
            self._reader.join(DEADLINE)
        if self.stderr is not None and not self.stderr_lines:
            self.stderr_lines = [*self.stderr.lines, *self.stderr.rest()]  # to EOF
        for stream in (self.proc.stdin, self.proc.stdout, self._err):
            if stream is not None and not stream.closed:
                with contextlib.suppress(OSError):
                    stream.close()

    # -- the wire ------------------------------------------------------------------
    def send(self, doc: dict[str, Any]) -> None:
        assert self.proc is not None
        assert self.proc.stdin is not None
        data = (json.dumps({"jsonrpc": "2.0", **doc}) + "\n").encode()
        with self._write_lock:
            self.proc.stdin.write(data)
            self.proc.stdin.flush()

    def send_raw(self, data: bytes) -> None:
        assert self.proc is not None
        assert self.proc.stdin is not None
        with self._write_lock:
            self.proc.stdin.write(data)
            self.proc.stdin.flush()

    def begin(self, method: str, params: dict[str, Any] | None = None) -> _Slot:
        slot = _Slot()
        with self._lock:
            call_id = next(self._ids)
            self._pending[call_id] = slot
        self.send({"id": call_id, "method": method, "params": params or {}})
        return slot

    def finish(self, slot: _Slot, timeout: float = DEADLINE) -> Any:
        if not slot.done.wait(timeout):
            raise AssertionError(f"the bridge did not answer within {timeout} s; stderr: "
                                 f"{self.stderr.lines if self.stderr else ''}")
        assert slot.doc is not None
        if "error" in slot.doc:
            raise BridgeError(slot.doc["error"])
        return slot.doc.get("result")

    def request(self, method: str, params: dict[str, Any] | None = None,
                timeout: float = DEADLINE) -> Any:
        return self.finish(self.begin(method, params), timeout)

    def request_many(self, calls: list[tuple[str, dict[str, Any]]]) -> list[Any]:
        slots = [self.begin(method, params) for method, params in calls]
        return [self.finish(slot) for slot in slots]

    def _read(self) -> None:
        assert self.proc is not None
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            try:
                doc = json.loads(raw)
            except ValueError:  # not protocol: the bridge let something else onto stdout
                self.protocol_errors.append({"raw": raw.decode("utf-8", "replace")})
                continue
            if "method" in doc:
                self._host_call(doc)
                continue
            slot = self._pending.pop(doc["id"], None) if isinstance(doc.get("id"), int) \
                else None
            if slot is None:
                self.protocol_errors.append(doc)
                continue
            slot.doc = doc
            slot.done.set()
        with self._lock:
            for slot in self._pending.values():
                slot.doc = {"error": {"code": -1, "message": "the bridge exited"}}
                slot.done.set()

    def _host_call(self, doc: dict[str, Any]) -> None:
        method, params = doc["method"], doc.get("params") or {}
        if "id" not in doc:
            self.notices.append(doc)
            return
        self.host_calls.append(doc)
        if method == "host/appendMessage":
            entry_id = self.log.append(type="custom_message", customType=params["customType"],
                                       content=params["content"], details=params["details"],
                                       deliverAs=params["deliverAs"])
            if params.get("triggerTurn"):
                self.turn_requested.set()
            self.send({"id": doc["id"], "result": {"entryId": entry_id}})
        elif method == "host/readEntries":
            # An adapter may return only the compacted view (`view_from`: the first
            # entry compaction kept); wfrun must not depend on the whole log.
            entries = self.log.snapshot()[self.view_from:]
            self.send({"id": doc["id"], "result": {"entries": entries}})
        else:
            self.send({"id": doc["id"], "error": {"code": -32601, "message": "unknown"}})

    # -- the session ----------------------------------------------------------------
    def initialize(self, session_id: str = "session-1") -> Any:
        return self.request("initialize", {"protocolVersion": 1, "sessionId": session_id,
                                           "client": {"name": "tests", "version": "0"}})

    def tool(self, args: dict[str, Any], call_id: str = "call-1") -> dict[str, Any]:
        self.log.append(type="message", role="assistant",
                        content={"tool_call": "workflow", "args": args})
        reply: dict[str, Any] = self.request("tool/call", {"callId": call_id,
                                                           "name": "workflow",
                                                           "arguments": args})
        self.log.append(type="message", role="toolResult", content=reply["content"],
                        details={"isError": reply["isError"], **reply["details"]})
        return reply
