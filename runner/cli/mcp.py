"""`wfrun mcp` (the `workflow` tool as a stdio MCP server) and `wfrun hook claude-code`
(docs/hosts.md, "Claude Code"; `wfrun integrate claude-code` is in integrate.py)."""

from __future__ import annotations

import os
import sys
import uuid

import click

from runner.clock import CLOCK_FILE_ENV, clock_from_env
from runner.errors import InputError
from runner.host.mcp import hook as claude_hook
from runner.host.mcp.sessionlog import valid_session_id

from .app import cli
from .context import Context
from .runs import workspace


@cli.command("mcp")
@click.option("--client", type=click.Choice(["claude-code", "none"]), default="none",
              show_default=True,
              help="claude-code: turns come from `wfrun hook claude-code`; none: any MCP "
                   "client without hooks (pending messages ride on the next tool reply).")
@click.option("--session", "session_id", metavar="ID",
              help="The session's id (default: with --client claude-code, Claude Code's "
                   "CLAUDE_CODE_SESSION_ID; else a new one per process). Reuse an id to "
                   "continue a session, its follow-ups and parked runs, after a restart.")
@click.option("--claude-pid", type=click.IntRange(2), envvar="WFRUN_CLAUDE_PID", hidden=True,
              help="The Claude process whose hooks this server answers (default: the "
                   "nearest ancestor named claude, else the parent; benchmarks set it).")
@click.pass_obj
def mcp_cmd(ctx: Context, client: str, session_id: str | None, claude_pid: int | None) -> None:
    """Serve the `workflow` tool over MCP on stdin/stdout (one session per process)."""
    from runner.host.mcp.hook import wfrun_session
    from runner.host.mcp.server import serve_stdio
    from runner.host.runtime.local import open_store

    ctx.require_project()
    if session_id is None:
        claude = os.environ.get("CLAUDE_CODE_SESSION_ID")
        session_id = (wfrun_session(claude) if claude and client == "claude-code"
                      else f"mcp:{uuid.uuid4().hex[:16]}")
    if not valid_session_id(session_id):
        raise InputError(f"--session {session_id!r}: use letters, digits, '_', '.', ':' "
                         "and '-' (at most 128)")
    ws = workspace(ctx)
    open_store(ws).close()  # a broken or busy store is a one-line error before the protocol
    store_clock = clock_from_env() if os.environ.get(CLOCK_FILE_ENV) else None
    serve_stdio(ws, session_id, client="claude-code" if client == "claude-code" else "none",
                store_clock=store_clock, claude_pid=claude_pid)


@cli.group("hook")
def hook_group() -> None:
    """Agent-client hooks (run by the client, not by hand)."""


@hook_group.command("claude-code")
def hook_claude_code() -> None:
    """One Claude Code hook event: JSON on stdin, a decision on stdout."""
    sys.exit(claude_hook.main())
