"""The bridge's wire format: JSON-RPC 2.0 messages, one per line, both directions.

Any language can speak it with a JSON parser and a line reader (docs/hosts.md,
"wfrun bridge"). Version 1 is additive only: new methods and new optional fields
may appear; nothing is renamed or removed while `PROTOCOL_VERSION` stays 1.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping
from typing import IO, Any

from runner import _jsonin as jsonin
from runner.host.session._protocol import SessionEntry, ToolReply

PROTOCOL_VERSION = 1

# Client -> bridge (wfrun's HostListener, plus the handshake and helpers).
INITIALIZE = "initialize"
TOOLS_LIST = "tools/list"
SESSION_START = "session/start"
TOOL_CALL = "tool/call"
TURN_STARTED = "turn/started"
TURN_SETTLED = "turn/settled"
SESSION_SHUTDOWN = "session/shutdown"
PING = "ping"
SESSION_LAUNCHES = "session/launches"  # a read-only view for the client's UI (added in v1)
CLIENT_METHODS = (INITIALIZE, TOOLS_LIST, SESSION_START, TOOL_CALL, TURN_STARTED,
                  TURN_SETTLED, SESSION_SHUTDOWN, PING, SESSION_LAUNCHES)

# Bridge -> client (the Host). Requests wait for a result; notifications do not.
APPEND_MESSAGE = "host/appendMessage"
READ_ENTRIES = "host/readEntries"
ABORT_TURN = "host/abortTurn"  # notification
NOTIFY = "host/notify"  # notification

# JSON-RPC error codes.
PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603
NOT_INITIALIZED = -32002

MAX_LINE = jsonin.MAX_LINE  # one message; a longer line is refused, not buffered forever


class WireError(Exception):
    """A message the peer must fix: a JSON-RPC error code and a one-line reason."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class LineWriter:
    """Writes whole messages atomically (several threads share the stream)."""

    def __init__(self, stream: IO[bytes]) -> None:
        self.stream = stream
        self._lock = threading.Lock()

    def send(self, message: Mapping[str, Any]) -> None:
        data = json.dumps({"jsonrpc": "2.0", **message}, ensure_ascii=False,
                          separators=(",", ":"), default=str).encode("utf-8") + b"\n"
        with self._lock:
            self.stream.write(data)
            self.stream.flush()


def decode(line: bytes) -> dict[str, Any]:
    """One line as a JSON-RPC message object, or WireError saying what is wrong."""
    if len(line) > MAX_LINE:
        raise WireError(INVALID_REQUEST, f"message longer than {MAX_LINE} bytes")
    try:
        # Bounded: nesting deeper than jsonin.MAX_DEPTH and non-finite numbers (an id
        # of 1e400) are parse errors, not a RecursionError or an `Infinity` echoed back.
        doc = jsonin.loads(line)
    except (ValueError, UnicodeDecodeError) as exc:
        raise WireError(PARSE_ERROR, f"not a JSON line ({exc}); send one JSON object per "
                                     "line") from None
    if not isinstance(doc, dict):
        raise WireError(INVALID_REQUEST, "a message must be a JSON object")
    if "method" in doc and not isinstance(doc["method"], str):
        raise WireError(INVALID_REQUEST, "'method' must be a string")
    if "method" not in doc and "id" not in doc:
        raise WireError(INVALID_REQUEST, "a message needs 'method' (a request or "
                                         "notification) or 'id' (a response)")
    params = doc.get("params")
    if params is None:  # absent or null: JSON-RPC allows a call without params
        doc["params"] = {}
    elif not isinstance(params, dict):
        raise WireError(INVALID_PARAMS, "'params' must be a JSON object")
    return doc


def error_doc(code: int, message: str) -> dict[str, Any]:
    return {"code": code, "message": " ".join(message.split())}


# -- field helpers ------------------------------------------------------------------
def field_str(params: Mapping[str, Any], key: str, default: str | None = None) -> str:
    value = params.get(key, default)
    if not isinstance(value, str) or not value:
        raise WireError(INVALID_PARAMS, f"'{key}' must be a non-empty string")
    return value


def field_bool(params: Mapping[str, Any], key: str, default: bool) -> bool:
    value = params.get(key, default)
    if not isinstance(value, bool):
        raise WireError(INVALID_PARAMS, f"'{key}' must be true or false")
    return value


def field_number(params: Mapping[str, Any], key: str, default: float) -> float:
    value = params.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        raise WireError(INVALID_PARAMS, f"'{key}' must be a non-negative number")
    return float(value)


def tool_reply_doc(reply: ToolReply) -> dict[str, Any]:
    return {"content": reply.content, "details": reply.details, "isError": reply.is_error}


def entry_from_doc(doc: Any) -> SessionEntry:
    """A session entry the client sent (camelCase), normalized."""
    if not isinstance(doc, dict) or not isinstance(doc.get("id"), str):
        raise WireError(INVALID_PARAMS, "each entry must be an object with a string 'id'")
    details = doc.get("details")
    return SessionEntry(
        id=doc["id"], type=str(doc.get("type") or "custom_message"), role=doc.get("role"),
        custom_type=doc.get("customType"), content=doc.get("content"),
        details=details if isinstance(details, dict) else None,
        parent_id=doc.get("parentId"))
