"""`wfrun mcp` (the `workflow` tool as a stdio MCP server) and `wfrun hook claude-code`
(docs/hosts.md, "Claude Code"; `wfrun integrate claude-code` is in integrate.py)."""

from __future__ import annotations

import sys

import click

from runner.host.mcp import _hook as claude_hook

from .app import cli
from .context import Context
from .mcpserve import serve


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
    ctx.require_project()
    serve(lambda: ctx, client, session_id, claude_pid)


@cli.group("hook")
def hook_group() -> None:
    """Agent-client hooks (run by the client, not by hand)."""


@hook_group.command("claude-code")
def hook_claude_code() -> None:
    """One Claude Code hook event: JSON on stdin, a decision on stdout."""
    sys.exit(claude_hook.main())
