"""`wfrun mcp`'s body without click: the command (mcp.py) and the console script's
fast path (`wfrun mcp --client claude-code`, exactly what `wfrun integrate
claude-code` writes; cli/__init__.py) both call `serve`.

The fast path exists for Claude Code's ~2 s wait for `initialize` (issue 33):
click and the command modules are ~50 ms of CPU a loaded machine multiplies.
"""

from __future__ import annotations

import os
import sys
import uuid
from typing import TYPE_CHECKING

from runner.errors import InputError, WfrunError

from .context import Context

if TYPE_CHECKING:
    from runner.host.runtime.local import Workspace

FAST_ARGV = ["mcp", "--client", "claude-code"]


def serve(ctx: Context, client: str, session_id: str | None, claude_pid: int | None) -> None:
    from runner import __version__
    from runner.clock import CLOCK_FILE_ENV, clock_from_env
    from runner.host.mcp.hook import wfrun_session
    from runner.host.mcp.serve import serve_stdio
    from runner.host.mcp.sessionlog import valid_session_id

    ctx.require_project()
    if session_id is None:
        claude = os.environ.get("CLAUDE_CODE_SESSION_ID")
        session_id = (wfrun_session(claude) if claude and client == "claude-code"
                      else f"mcp:{uuid.uuid4().hex[:16]}")
    if not valid_session_id(session_id):
        raise InputError(f"--session {session_id!r}: use letters, digits, '_', '.', ':' "
                         "and '-' (at most 128)")
    store_clock = clock_from_env() if os.environ.get(CLOCK_FILE_ENV) else None

    def workspace() -> Workspace:
        # After the handshake (runner/host/mcp/serve.py); a store that cannot
        # open is then the error of every tool call, and one line on stderr.
        from .runs import workspace

        return workspace(ctx)

    serve_stdio(workspace, session_id,
                client="claude-code" if client == "claude-code" else "none",
                version=__version__, store_clock=store_clock, claude_pid=claude_pid)


def fast_main() -> None:
    """`wfrun mcp --client claude-code` with the options' environment variables, as
    click would read them; errors are the CLI's one line."""
    pid = os.environ.get("WFRUN_CLAUDE_PID", "")
    ctx = Context(project_flag=os.environ.get("WFRUN_PROJECT") or None)
    try:
        if pid and not (pid.isdigit() and int(pid) >= 2):
            raise InputError(f"WFRUN_CLAUDE_PID={pid!r} is not a process id")
        serve(ctx, "claude-code", None, int(pid) if pid else None)
    except WfrunError as exc:
        sys.stderr.write(f"wfrun: error: {' '.join(exc.message.split())}\n")
        sys.exit(exc.exit_code)
