"""What the model reads back from the `workflow` tool: bounded text, errors as JSON.

Errors raised below the session layer are written for a person at a terminal:
they point at CLI commands (`wfrun list`, `wfrun answer RUN ...`). A model in a
session has the tool, not the CLI, so those hints are rewritten here, in one
place, into the tool's own actions. Every error reply is one JSON object

    {"error": {"code": "workflow_not_found", "message": "...", "action": "start"}}

with the message cut to `MAX_ERROR_CHARS`, and any reply to `MAX_REPLY_CHARS`:
a tool call never hands a model an unbounded echo.
"""

from __future__ import annotations

import json
import re
from typing import Any

from runner.compiler._schemamessages import cut
from runner.errors import (
    ConflictError,
    InputError,
    NotFoundError,
    OperationFailed,
    TemporaryError,
    WfrunError,
)

from ._protocol import ToolReply

MAX_ERROR_CHARS = 1_000
MAX_REPLY_CHARS = 16_000

# CLI hints in messages from lower layers -> the tool action that does the same.
_TOOL_HINTS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"`wfrun list` shows what exists"), "the list action shows what exists"),
    (re.compile(r"run `wfrun validate [^`]*`"), "fix the file, then start it again"),
    (re.compile(r"`wfrun (?:runs|status)` lists (?:runs|launches)"),
     "the status action without runId shows this session's run"),
    (re.compile(r"`wfrun answer (\S+) \.\.\.`"), r"the answer action (runId '\1')"),
    (re.compile(r"`wfrun resume (\S+)`"), r"the resume action"),
    (re.compile(r"`wfrun cancel` it"), "cancel it (the cancel action)"),
)


def for_model(message: str) -> str:
    """`message` with its CLI hints named as tool actions."""
    for pattern, replacement in _TOOL_HINTS:
        message = pattern.sub(replacement, message)
    return message


def code_of(exc: WfrunError) -> str:
    """A stable code for an error without one, by what the caller should do."""
    if isinstance(exc, NotFoundError):
        return "not_found"
    if isinstance(exc, InputError):
        return "invalid_call"
    if isinstance(exc, TemporaryError):
        return "try_again"
    if isinstance(exc, ConflictError):
        return "conflict"
    if isinstance(exc, OperationFailed):
        return "failed"
    return "error"


def error_reply(message: str, action: Any, code: str,
                details: dict[str, Any] | None = None) -> ToolReply:
    """An error as the model reads it: one bounded JSON object."""
    text = cut(for_model(message), MAX_ERROR_CHARS)
    shown_action = action if isinstance(action, str) and len(action) <= 40 else None
    body: dict[str, Any] = {"code": code, "message": text}
    if shown_action is not None:
        body["action"] = shown_action
    return ToolReply(json.dumps({"error": body}, ensure_ascii=False),
                     {**(details or {}), "action": shown_action, "code": code}, is_error=True)


def bounded(reply: ToolReply) -> ToolReply:
    """Any reply: an error as JSON (if it is not already), content cut to the limit."""
    if reply.is_error and not reply.content.startswith('{"error"'):
        return error_reply(reply.content, reply.details.get("action"),
                           str(reply.details.get("code") or "refused"), reply.details)
    if len(reply.content) > MAX_REPLY_CHARS:
        return ToolReply(cut(reply.content, MAX_REPLY_CHARS), reply.details, reply.is_error)
    return reply
