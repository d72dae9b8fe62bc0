"""`wfrun integrate CLIENT`: install wfrun's adapter for an agent client in a project.

One subcommand per client; each copies the files the client loads (shipped in the
wheel under runner/integrations/) and says how to use them.
"""

from __future__ import annotations

import click

from runner.integrations import pi

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
    click.echo("Pi loads project extensions once you trust the project; or load it "
               f"anywhere with: pi -e {pi.EXTENSION}")


@integrate.command("claude-code")
@click.pass_obj
def integrate_claude_code(ctx: Context) -> None:
    """Write .mcp.json and the hooks in .claude/settings.json (merged, idempotent)."""
    from runner.host.mcp.integrate import integrate as write_files

    root = ctx.require_project()
    done = write_files(root)
    for path in (done.mcp_json, done.settings):
        state = "updated" if path in done.changed else "up to date"
        click.echo(f"{path.relative_to(root)}: {state}")
    click.echo("Claude Code now sees the tool as mcp__wfrun__workflow; start `claude` in "
               f"{root}.")
