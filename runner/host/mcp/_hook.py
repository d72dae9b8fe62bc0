"""`wfrun hook claude-code`: one Claude Code hook event in, at most one decision out.

Claude Code runs this as a new process for every event (settings.json `hooks`),
with the event's JSON on stdin. It tells the `wfrun mcp` server of the same Claude
process (channel.py) what happened, then hands the model whatever wfrun's session
log holds for it:

- `SessionStart` (startup, resume, clear, compact) -> the controller's session start
  (recovery at an idle boundary). Prints nothing: a session start opens no turn.
- `UserPromptSubmit` -> turn started; pending messages ride along as
  `additionalContext` of the user's turn.
- `Stop` -> turn settled; the server activates queued launches and answers once the
  run is quiet (or after a few seconds: a hook never holds the client long);
  pending messages that ask for a turn become the Stop event's
  `additionalContext`, which gives the model exactly one more turn.

Order against crashes: write the decision, then mark the messages delivered in the
log, then exit 0. Claude Code reads a hook's stdout only when it exits 0, so a
kill before the mark means "not delivered" on both sides and the next event hands
the message over again. With no server (it crashed, or this Claude process runs
without it), pending messages are still delivered from the log.

Standard library only, and `runner/__init__` is light: this runs on every prompt
and every stop and must answer in well under 100 ms when there is nothing to do
(bench/bench_hook.py).
"""

from __future__ import annotations

import json
import os
import sys

from runner import _jsonin as jsonin

from . import _channel as channel
from ._sessionlog import LogMessage, SessionLog, SessionLogError

TYPE_CHECKING = False  # no typing or pathlib at run time (hook latency)
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import IO, Any

SESSION_PREFIX = "claude-code:"
#: Claude Code has its own built-in `Workflow` tool; the model must call ours.
TOOL_NOTE = ("(wfrun: call the mcp__wfrun__workflow tool for this, not the built-in "
             "Workflow tool.)")
MAX_STDIN = 64 << 20  # a Stop event carries the last assistant message, which can be long


class HookError(Exception):
    """A hook input wfrun cannot act on; one line on stderr, exit 1 (non-blocking)."""


def wfrun_session(claude_session_id: str) -> str:
    return SESSION_PREFIX + claude_session_id


def find_wfrun_dir(start: str) -> str | None:
    """`.wfrun/` of the nearest ancestor of `start` (like the compiler's discovery)."""
    folder = os.path.realpath(start)
    while True:
        candidate = os.path.join(folder, ".wfrun")
        if os.path.isdir(candidate):
            return candidate
        parent = os.path.dirname(folder)
        if parent == folder:
            return None
        folder = parent


def render(messages: list[LogMessage], *, note: str | None = TOOL_NOTE) -> str:
    """What the model reads: the messages' own texts, oldest first, then the tool note
    (Claude Code only: another client names the tool its own way)."""
    texts = [m.content.strip() for m in messages if m.content.strip()]
    return "\n\n".join([*texts, note] if note else texts)


def _read_event(stdin: IO[str]) -> dict[str, Any]:
    raw = stdin.read(MAX_STDIN + 1)
    if len(raw) > MAX_STDIN:
        raise HookError("the hook input is larger than 64 MiB; is this a Claude Code hook?")
    try:
        event = jsonin.loads(raw)
    except ValueError:
        raise HookError("the hook input on stdin is not JSON; Claude Code sends one JSON "
                        "object per hook call") from None
    if not isinstance(event, dict) or not isinstance(event.get("hook_event_name"), str):
        raise HookError("the hook input has no 'hook_event_name'; run this only as a Claude "
                        "Code hook (see `wfrun integrate claude-code`)")
    if not isinstance(event.get("session_id"), str) or not event["session_id"]:
        raise HookError("the hook input has no 'session_id'")
    return event


class Hook:
    def __init__(self, event: dict[str, Any], env: Mapping[str, str], stdout: IO[str]) -> None:
        self.event = event
        self.name = str(event["hook_event_name"])
        self.session = wfrun_session(str(event["session_id"]))
        self.stdout = stdout
        project = env.get("WFRUN_PROJECT") or env.get("CLAUDE_PROJECT_DIR") \
            or str(event.get("cwd") or "") or os.getcwd()
        wfrun_dir = find_wfrun_dir(project)
        if wfrun_dir is None:
            raise HookError(f"no .wfrun/ folder in {project} or any parent; run "
                            "`wfrun integrate claude-code` in the project")
        try:
            self.log = SessionLog.for_session(wfrun_dir, self.session)
        except SessionLogError as exc:
            raise HookError(str(exc)) from None
        pid = env.get("CLAUDE_PID", "")
        self.claude_pid = int(pid) if pid.isdigit() else None
        self.warnings: list[str] = []

    def tell(self, request: dict[str, Any]) -> dict[str, Any] | None:
        """The server's reply, or None when no server runs for this Claude process."""
        if self.claude_pid is None or self.warnings:
            return None  # no server, or it failed once already in this event
        try:
            reply = channel.call(self.claude_pid, {"session_id": self.session, **request})
        except channel.ChannelError as exc:
            # Still hand over what the log holds; say why nothing else happened.
            self.warnings.append(str(exc))
            return None
        if reply is not None and reply.get("ok") is not True:
            self.warnings.append(f"the wfrun mcp server: {reply.get('error') or 'failed'}")
        return reply

    def run(self) -> None:
        if self.name == "SessionStart":
            self.tell({"event": "session_start", "reason": str(self.event.get("source")
                                                               or "startup")})
            # What the session start delivered (an outcome a host reported while the
            # session was away) rides on this event's context, before the first prompt.
            self._hand_over("session-start-hook", trigger_only=False)
        elif self.name == "UserPromptSubmit":
            self.tell({"event": "turn_started"})
            self._hand_over("user-prompt-hook", trigger_only=False)
        elif self.name == "Stop":
            self.tell({"event": "turn_settled", "aborted": False})
            if self._hand_over("stop-hook", trigger_only=True):
                self.tell({"event": "turn_started"})  # the block is the model's next turn

    def _hand_over(self, via: str, *, trigger_only: bool) -> bool:
        pending = self.log.pending()
        if not pending or (trigger_only and not any(m.trigger_turn for m in pending)):
            return False
        # `additionalContext` for both events: on Stop it is Claude Code's non-error
        # feedback (the model reads "Stop hook additional context: ..." and gets one
        # more turn); a `decision: block` reads as "Stop hook blocking error" to the
        # model and as a "stop hook problem" to the user.
        doc = {"hookSpecificOutput": {"hookEventName": self.name,
                                      "additionalContext": render(pending)}}
        self.stdout.write(json.dumps(doc) + "\n")
        self.stdout.flush()
        self.log.mark_delivered([m.id for m in pending], via)  # a kill before this: resent
        return True


def main(stdin: IO[str] | None = None, stdout: IO[str] | None = None,
         stderr: IO[str] | None = None, env: Mapping[str, str] | None = None) -> int:
    stdin, stdout = stdin or sys.stdin, stdout or sys.stdout
    stderr = stderr or sys.stderr
    try:
        hook = Hook(_read_event(stdin), os.environ if env is None else env, stdout)
        hook.run()
        for warning in hook.warnings:
            stderr.write(f"wfrun: warning: {' '.join(warning.split())}\n")
    except (HookError, SessionLogError, channel.ChannelError) as exc:
        stderr.write(f"wfrun: error: {' '.join(str(exc).split())}\n")
        return 1
    return 0
