"""The click group, shared options and the error boundary.

Every user mistake surfaces as one line on stderr with the exit code its class
asks for (DESIGN §9); a traceback appears only with `--debug`. Store errors have
their own tree (the store imports nothing from runner); `runner.host.runtime.errors.translate`
classifies them here, so no command can leak a traceback for a busy or broken store.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

import click

from runner.errors import WfrunError
from runner.host.runtime.errors import translate

from .context import Context


@dataclass
class Options:
    project: str | None
    debug: bool


def fail(error: WfrunError) -> NoReturn:
    """One line on stderr (whitespace folded: a message never spans lines), then exit."""
    click.echo(f"wfrun: error: {' '.join(error.message.split())}", err=True)
    sys.exit(error.exit_code)


class WfrunGroup(click.Group):
    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except KeyboardInterrupt:
            click.echo("wfrun: interrupted", err=True)
            sys.exit(130)
        except Exception as exc:
            error = translate(exc)
            if error is None:  # a bug: its traceback is the useful report
                raise
            if ctx.obj is not None and getattr(ctx.obj, "debug", False):
                raise
            fail(error)


@click.group(cls=WfrunGroup, context_settings={"help_option_names": ["-h", "--help"],
                                                "auto_envvar_prefix": "WFRUN"})
@click.option("--project", "project", metavar="DIR", envvar="WFRUN_PROJECT",
              help="Project folder holding .wfrun/ (default: nearest ancestor of the cwd).")
@click.option("--debug", is_flag=True, help="Show tracebacks for errors.")
@click.option("--store", "store", metavar="URL", envvar="WFRUN_STORE",
              help="The store: 'sqlite' (default) or postgresql://USER@HOST/DB "
                   "(also WFRUN_STORE, or `store:` in .wfrun/config.yaml).")
@click.option("--openai-base-url", envvar="WFRUN_OPENAI_BASE_URL", metavar="URL",
              help="--agent openai: an OpenAI-compatible endpoint (…/v1).")
@click.option("--openai-model", envvar="WFRUN_OPENAI_MODEL", metavar="MODEL",
              help="--agent openai: the model name.")
@click.option("--openai-api-key", envvar="WFRUN_OPENAI_API_KEY", metavar="KEY",
              help="--agent openai: the API key (prefer the environment variable).")
@click.version_option(package_name="wfrun", prog_name="wfrun")
@click.pass_context
def cli(ctx: click.Context, project: str | None, debug: bool, store: str | None,
        openai_base_url: str | None, openai_model: str | None,
        openai_api_key: str | None) -> None:
    """wfrun: declarative, durable workflows for agent and automation work."""
    if debug:
        _show_hook_tracebacks()
    settings = {"WFRUN_OPENAI_BASE_URL": openai_base_url, "WFRUN_OPENAI_MODEL": openai_model,
                "WFRUN_OPENAI_API_KEY": openai_api_key}
    if ctx.get_parameter_source("store") is not click.core.ParameterSource.COMMANDLINE:
        store = None  # WFRUN_STORE is read (and named in errors) by the store choice itself
    ctx.obj = Context(project_flag=project, debug=debug, store=store,
                      openai={k: v for k, v in settings.items() if v})


def main() -> None:
    from . import (  # noqa: F401  (registers commands)
        bridge,
        controllers,
        definitions,
        dev,
        host,
        housekeeping,
        integrate,
        launches,
        logs,
        mcp,
        runs,
        ui,
    )

    try:
        cli.main(prog_name="wfrun")
    except Exception as exc:  # raised outside a command, e.g. while building the context
        error = translate(exc)
        if error is None or _debug_requested():
            raise
        fail(error)


def _show_hook_tracebacks() -> None:
    """`--debug`: a raising hook's traceback on stderr (it is never recorded)."""
    import logging

    from runner.engine.hooks import TRACEBACKS

    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("wfrun: debug: %(message)s"))
    TRACEBACKS.addHandler(handler)
    TRACEBACKS.setLevel(logging.DEBUG)
    TRACEBACKS.propagate = False


def _debug_requested() -> bool:
    """`--debug` when no click context is left to ask (it has been popped by now)."""
    env = os.environ.get("WFRUN_DEBUG", "").strip().lower()
    return "--debug" in sys.argv[1:] or env in ("1", "true", "yes", "on")


def register(command: click.Command) -> click.Command:
    cli.add_command(command)
    return command


def project_path(value: str | None) -> Path | None:
    return Path(value).expanduser() if value else None
