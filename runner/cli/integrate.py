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
