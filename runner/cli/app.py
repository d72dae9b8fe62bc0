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
@click.option("--openai-base-url", envvar="WFRUN_OPENAI_BASE_URL", metavar="URL",
              help="--agent openai: an OpenAI-compatible endpoint (…/v1).")
@click.option("--openai-model", envvar="WFRUN_OPENAI_MODEL", metavar="MODEL",
              help="--agent openai: the model name.")
@click.option("--openai-api-key", envvar="WFRUN_OPENAI_API_KEY", metavar="KEY",
              help="--agent openai: the API key (prefer the environment variable).")
@click.version_option(package_name="wfrun", prog_name="wfrun")
@click.pass_context
def cli(ctx: click.Context, project: str | None, debug: bool, openai_base_url: str | None,
        openai_model: str | None, openai_api_key: str | None) -> None:
    """wfrun: declarative, durable workflows for agent and automation work."""
    settings = {"WFRUN_OPENAI_BASE_URL": openai_base_url, "WFRUN_OPENAI_MODEL": openai_model,
                "WFRUN_OPENAI_API_KEY": openai_api_key}
    ctx.obj = Context(project_flag=project, debug=debug,
                      openai={k: v for k, v in settings.items() if v})


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
