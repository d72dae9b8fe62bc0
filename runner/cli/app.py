"""The click group, shared options and the error boundary.

Every user mistake surfaces as one line on stderr with the exit code its class
asks for (DESIGN §9); a traceback appears only with `--debug`.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from runner.errors import InputError, WfrunError

from .context import Context


@dataclass
class Options:
    project: str | None
    debug: bool


class WfrunGroup(click.Group):
    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except WfrunError as exc:
            if ctx.obj is not None and getattr(ctx.obj, "debug", False):
                raise
            click.echo(f"wfrun: error: {exc.message}", err=True)
            sys.exit(exc.exit_code)
        except KeyboardInterrupt:
            click.echo("wfrun: interrupted", err=True)
            sys.exit(130)


@click.group(cls=WfrunGroup, context_settings={"help_option_names": ["-h", "--help"],
                                                "auto_envvar_prefix": "WFRUN"})
@click.option("--project", "project", metavar="DIR", envvar="WFRUN_PROJECT",
              help="Project folder holding .wfrun/ (default: nearest ancestor of the cwd).")
@click.option("--debug", is_flag=True, help="Show tracebacks for errors.")
@click.version_option(package_name="wfrun", prog_name="wfrun")
@click.pass_context
def cli(ctx: click.Context, project: str | None, debug: bool) -> None:
    """wfrun: declarative, durable workflows for agent and automation work."""
    ctx.obj = Context(project_flag=project, debug=debug)


def main() -> None:
    from . import controllers, definitions, dev, host, launches, runs  # noqa: F401  (registers commands)

    try:
        cli.main(prog_name="wfrun")
    except InputError as exc:  # raised while building the context
        click.echo(f"wfrun: error: {exc.message}", err=True)
        sys.exit(exc.exit_code)


def register(command: click.Command) -> click.Command:
    cli.add_command(command)
    return command


def project_path(value: str | None) -> Path | None:
    return Path(value).expanduser() if value else None
