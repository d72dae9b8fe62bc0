"""`wfrun mcp`'s body without click: the command (mcp.py) and the console script's
fast path (`wfrun mcp --client claude-code`, exactly what `wfrun integrate
claude-code` writes; cli/__init__.py) both call `serve`.

The fast path exists for Claude Code's ~2 s wait for `initialize` (issue 33):
click and the command modules are ~50 ms of CPU a loaded machine multiplies.
"""

from __future__ import annotations

import os
import sys

from runner.errors import InputError, WfrunError

TYPE_CHECKING = False  # no typing at run time (start-up time)
if TYPE_CHECKING:
    from collections.abc import Callable

    from runner.clock import Clock
    from runner.host.runtime._local import Workspace

    from .context import Context


def serve(context: Callable[[], Context], client: str, session_id: str | None,
          claude_pid: int | None) -> None:
    """Serve until the client leaves. The project was checked by the caller; `context`
    is called after the handshake, on the session's thread, with the runtime."""
    from runner import __version__
    from runner.host.mcp._hook import wfrun_session
    from runner.host.mcp._serve import serve_stdio
    from runner.host.mcp._sessionlog import valid_session_id

    if session_id is None:
        claude = os.environ.get("CLAUDE_CODE_SESSION_ID")
        if claude and client == "claude-code":
            session_id = wfrun_session(claude)
        else:
            import uuid

            session_id = f"mcp:{uuid.uuid4().hex[:16]}"
    if not valid_session_id(session_id):
        raise InputError(f"--session {session_id!r}: use letters, digits, '_', '.', ':' "
                         "and '-' (at most 128)")

    def runtime() -> tuple[Workspace, Clock | None]:
        # After the handshake (runner/host/mcp/_serve.py); a store that cannot open is
        # then the error of every tool call, and one line on stderr.
        from runner.clock import CLOCK_FILE_ENV, clock_from_env

        from .runs import workspace

        store_clock = clock_from_env() if os.environ.get(CLOCK_FILE_ENV) else None
        return workspace(context()), store_clock

    serve_stdio(runtime, session_id, client="claude-code" if client == "claude-code" else "none",
                version=__version__, claude_pid=claude_pid)


def fast_main() -> None:
    """`wfrun mcp --client claude-code` with the options' environment variables, as
    click would read them; errors are the CLI's one line."""
    pid = os.environ.get("WFRUN_CLAUDE_PID", "")
    try:
        if pid and not (pid.isdigit() and int(pid) >= 2):
            raise InputError(f"WFRUN_CLAUDE_PID={pid!r} is not a process id")
        root = _project_root()

        def context() -> Context:
            from .context import Context

            return Context(project_flag=root)

        serve(context, "claude-code", None, int(pid) if pid else None)
    except WfrunError as exc:
        sys.stderr.write(f"wfrun: error: {' '.join(exc.message.split())}\n")
        sys.exit(exc.exit_code)


def _project_root() -> str:
    """The project, as Context finds it. In the usual case (no WFRUN_PROJECT, a .wfrun/
    above the cwd) without Context's imports (dataclasses, the compiler's discovery:
    ~30 ms of CPU); otherwise Context itself checks and says what is wrong."""
    flag = os.environ.get("WFRUN_PROJECT") or None
    if flag is None:
        from runner.host.mcp._hook import find_wfrun_dir

        found = find_wfrun_dir(os.getcwd())
        if found is not None:
            return os.path.dirname(found)
    from .context import Context

    return str(Context(project_flag=flag).require_project())
