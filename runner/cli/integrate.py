"""`wfrun integrate CLIENT`: install wfrun's adapter for an agent client in a project.

One subcommand per client; each copies the files the client loads (shipped in the
wheel under runner/integrations/), then starts what they configure once, as the
client will, and says in one line if it does not answer (a missing dependency, a
stale path), rather than leaving the client to show a failed server.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import click

from runner.errors import OperationFailed
from runner.integrations import pi
from runner.integrations._command import check_starts

from .app import cli
from .context import Context


@cli.group("integrate")
def integrate() -> None:
    """Install wfrun's adapter for an agent client (pi, ...) in this project."""
    # Every client's subcommand is defined in this module: commands load lazily
    # (app.COMMANDS), so a subcommand registered from another module would be missing.


@integrate.command("pi")
@click.option("--path", "print_path", is_flag=True,
              help="Only print the shipped extension's path (for `pi -e PATH`).")
@click.pass_obj
def integrate_pi(ctx: Context, print_path: bool) -> None:
    """Install the Pi extension (Pi >= 1.6) into .pi/extensions/wfrun/."""
    if print_path:
        click.echo(str(pi.EXTENSION))
        return
    root = ctx.require_project()
    done = pi.install(root)
    where = done.folder.relative_to(root)
    if done.changed:
        click.echo(f"installed the wfrun Pi extension in {where}/")
    else:
        click.echo(f"the wfrun Pi extension in {where}/ is up to date")
    _check([*pi.wfrun_command(), "bridge"], root, {"method": "ping"})
    click.echo("Pi loads project extensions once you trust the project; or load it "
               f"anywhere with: pi -e {pi.EXTENSION}")


@integrate.command("claude-code")
@click.pass_obj
def integrate_claude_code(ctx: Context) -> None:
    """Write .mcp.json, and the hooks and the tool's permission in .claude/settings.json
    (merged, idempotent)."""
    from runner.host.mcp._integrate import TOOL
    from runner.host.mcp._integrate import integrate as write_files
    from runner.integrations._command import on_path

    root = ctx.require_project()
    done = write_files(root)
    for path in (done.mcp_json, done.settings):
        state = "updated" if path in done.changed else "up to date"
        click.echo(f"{path.relative_to(root)}: {state}")
    if not on_path(done.command):
        click.echo(f"note: wfrun is not on PATH, so Claude Code starts it as "
                   f"`{' '.join(done.command)}`; run `wfrun integrate claude-code` again if "
                   "that environment moves", err=True)
    # An `initialize` without `initialized`: the server answers and never opens the
    # session. Its hooks' socket is named after this process, not a running Claude.
    _check(done.server, root, {"method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "wfrun-integrate", "version": "1"}}},
        {"WFRUN_CLAUDE_PID": str(os.getpid())})
    click.echo(f"Claude Code now sees the tool as {TOOL} (allowed in .claude/settings.json); "
               f"start `claude` in {root}. Claude Code applies a project's permissions once "
               "you trust the project: accept its trust dialog once (before `claude -p`).")


def _check(argv: list[str], root: Path, request: dict[str, Any],
           env: dict[str, str] | None = None) -> None:
    base = {k: v for k, v in os.environ.items() if not k.startswith("CLAUDE")}
    why = check_starts(argv, root, request, {**base, **(env or {})})
    if why is not None:
        raise OperationFailed(f"the files are written, but `{' '.join(argv)}` does not start: "
                              f"{why}")
    click.echo(f"checked: `{' '.join(argv)}` starts and answers")
