"""The click group, shared options and the error boundary.

Every user mistake surfaces as one line on stderr with the exit code its class
asks for (DESIGN §9); a traceback appears only with `--debug`. Store errors are
WfrunErrors too (one tree); `runner.host.runtime._errors.translate` classifies them by
its table, so no command can leak a traceback for a busy or broken store.

Commands load on first use (issue 15, cold start): `COMMANDS` names each command's
module and its one-line help, so `wfrun --help` lists every command without importing
any, and `wfrun status` imports only the module that defines `status`.
"""

from __future__ import annotations

import gc
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import click

from runner import __version__

if TYPE_CHECKING:
    from runner.errors import WfrunError

#: name -> (module under runner.cli, the command's first help sentence). The one
#: source of truth for the command list; tests/unit/cli/test_lazy_commands.py checks
#: that every command is here with the short help its own docstring gives.
COMMANDS: dict[str, tuple[str, str]] = {
    "answer": ("runs", "Continue a waiting run as a new linked run, with the answer at its "
                       "checkpoint."),
    "audit": ("ui", "Show the actions taken through the console, its HTTP API and the CLI, "
                    "newest first."),
    "bridge": ("bridge", "Serve one agent session over stdio: JSON-RPC 2.0, one message per "
                         "line."),
    "cache": ("operate", "List or clear kept node results (`cache:` in a workflow)."),
    "cancel": ("launches", "Cancel a queued or parked launch (a starting or running one "
                           "is asked to stop)."),
    "controller": ("controllers", "Manage controller resources, or run the controller "
                                  "manager in the foreground."),
    "controllers": ("controllers", "List controllers from the project, the user folder and "
                                   "the built-ins."),
    "dev": ("dev", "Watch workflow sources; print diagnostics or `ok NAME DIGEST` on every "
                   "save."),
    "graph": ("definitions", "Print a workflow's compiled graph."),
    "hook": ("mcp", "Agent-client hooks (run by the client, not by hand)."),
    "host": ("host", "Run detached launches, resume parked runs and run controllers (one per "
                     "project)."),
    "init": ("housekeeping", "Make DIR (default: here) a wfrun project: .wfrun/workflows/ "
                             "with an example workflow, and .gitignore lines for run bundles "
                             "and the store."),
    "integrate": ("integrate", "Install wfrun's adapter for an agent client (pi, ...) in "
                               "this project."),
    "list": ("definitions", "List workflows from the project, the user folder and the "
                            "built-ins."),
    "logs": ("logs", "Show the stdout and stderr of a run's shell actions and command "
                     "agents."),
    "mcp": ("mcp", "Serve the `workflow` tool over MCP on stdin/stdout (one session per "
                   "process)."),
    "pause": ("operate", "Pause a run at its next node boundary, on any host; it holds no "
                         "slot until unpaused."),
    "prune": ("housekeeping", "Delete ended runs older than AGE, their store rows, and store "
                              "history older than AGE; never a run that has not ended or "
                              "that a launch still points at."),
    "rerun": ("operate", "Run an ended run again as a new linked run, reusing what ran "
                         "before a node."),
    "resume": ("runs", "Resume a parked or interrupted run at the node it was in (secrets "
                       "are resolved again: nothing secret was stored)."),
    "run": ("runs", "Run a workflow in the foreground (exit 0 completed, 1 failed, 4 "
                    "waiting)."),
    "runs": ("runs", "List runs, newest first (a page from the store: only its runs' "
                     "bundles are read)."),
    "schema": ("definitions", "Print the JSON Schema of the workflow YAML format (for "
                              "editors)."),
    "show": ("runs", "Show a run: status, node timeline, outputs and errors."),
    "start": ("launches", "Queue a detached launch (a host activates it; --wait runs it "
                          "here)."),
    "status": ("launches", "Launch and run state; works before a run bundle exists."),
    "store": ("launches", "Inspect or reset the project's durable store."),
    "triggers": ("triggers", "List the project's triggers: schedule, policy, last and next "
                             "firing, skipped slots."),
    "ui": ("ui", "Serve the web console: runs, live run graphs, the queue, workflows, "
                 "controller resources, and actions (start, cancel, pause, rerun, answer) with "
                 "the printed token."),
    "unpause": ("operate", "Let a paused run go on: a host resumes it (or `wfrun resume RUN` "
                           "here)."),
    "validate": ("definitions", "Validate workflows (all of them when no name is given)."),
    "why": ("launches", "Explain why a run is not running (state, owner, lease, reservation, "
                        "source)."),
}


def _translate(exc: BaseException) -> WfrunError | None:
    """The one line `exc` is at the boundary: a refused file as a MachineFault, a store
    error as its table says (`runner.host.runtime._errors`), any other WfrunError as it
    is; None for a bug."""
    from runner.errors import WfrunError, os_fault

    if isinstance(exc, OSError):  # a folder this user may not read, a full disk: not a bug
        return os_fault(exc)
    if not isinstance(exc, WfrunError):
        return None
    # No store error exists before the store's errors are loaded, and loading the table
    # (the whole store package) for click's own exits (`start --help`) costs ~30 ms.
    if "runner.store._errors" not in sys.modules:
        return exc
    from runner.host.runtime._errors import translate

    return translate(exc)


def fail(error: WfrunError) -> NoReturn:
    """One line on stderr (whitespace folded: a message never spans lines), then exit."""
    click.echo(f"wfrun: error: {' '.join(error.message.split())}", err=True)
    sys.exit(error.exit_code)


class WfrunGroup(click.Group):
    """The top-level group: lazy commands (`COMMANDS`) and the error boundary."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(set(COMMANDS) | set(self.commands))

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.commands and cmd_name in COMMANDS:
            # A command's modules make most of the process's dataclasses: from kept code
            # (runner/_dccache.py), not compiled again in each process.
            from runner import _dccache

            _dccache.install()
            # Importing the module registers its commands on `cli` (@cli.command).
            # __import__, not importlib.import_module: only the former is listed by
            # `python -X importtime`, the tool that checks what a command loads.
            __import__(f"{__package__}.{COMMANDS[cmd_name][0]}")
            if not gc.isenabled():  # turned off by `main` for the imports (cli/__init__.py)
                gc.freeze()
                gc.enable()
        return self.commands.get(cmd_name)

    def resolve_command(self, ctx: click.Context, args: list[str]
                        ) -> tuple[str | None, click.Command | None, list[str]]:
        """click's, plus a did-you-mean for a misspelled command (`wfrun rnu`)."""
        try:
            return super().resolve_command(ctx, args)
        except click.UsageError as exc:
            name = args[0] if args else ""
            if name.startswith("-") or self.get_command(ctx, name) is not None:
                raise
            from runner.compiler._diagnostics import did_you_mean  # only a mistake needs it

            hint = did_you_mean(name, self.list_commands(ctx))
            if hint is None:
                raise
            raise click.UsageError(f"No such command '{name}'. {hint[0].upper()}{hint[1:]}",
                                   ctx) from exc

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """The command list from `COMMANDS`, shortened exactly as click shortens a loaded
        command's help, without importing any command module."""
        commands: list[tuple[str, click.Command]] = []
        for name in self.list_commands(ctx):
            cmd = self.commands.get(name) or click.Command(name, help=COMMANDS[name][1])
            if not cmd.hidden:
                commands.append((name, cmd))
        if not commands:
            return
        limit = formatter.width - 6 - max(len(name) for name, _ in commands)
        with formatter.section("Commands"):
            formatter.write_dl([(name, cmd.get_short_help_str(limit)) for name, cmd in commands])

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except KeyboardInterrupt:
            click.echo("wfrun: interrupted", err=True)
            sys.exit(130)
        except Exception as exc:
            error = _translate(exc)
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
              help="--agent openai: the API key, if the endpoint wants one (prefer the "
                   "environment variable).")
# The version from the package, not its installed metadata: importlib.metadata costs
# ~10 % of `wfrun --version` (tests/unit/test_cold_imports.py keeps the two equal).
@click.version_option(version=__version__, prog_name="wfrun")
@click.pass_context
def cli(ctx: click.Context, project: str | None, debug: bool, store: str | None,
        openai_base_url: str | None, openai_model: str | None,
        openai_api_key: str | None) -> None:
    """wfrun: declarative, durable workflows for agent and automation work."""
    from .context import Context

    if debug:
        _show_hook_tracebacks()
    settings = {"WFRUN_OPENAI_BASE_URL": openai_base_url, "WFRUN_OPENAI_MODEL": openai_model,
                "WFRUN_OPENAI_API_KEY": openai_api_key}
    if ctx.get_parameter_source("store") is not click.core.ParameterSource.COMMANDLINE:
        store = None  # WFRUN_STORE is read (and named in errors) by the store choice itself
    ctx.obj = Context(project_flag=project, debug=debug, store=store,
                      openai={k: v for k, v in settings.items() if v})


def main() -> None:
    # Commands are not imported here: WfrunGroup.get_command loads the one invoked.
    try:
        cli.main(prog_name="wfrun")
    except Exception as exc:  # raised outside a command, e.g. while building the context
        error = _translate(exc)
        if error is None or _debug_requested():
            raise
        fail(error)


def _show_hook_tracebacks() -> None:
    """`--debug`: a raising hook's traceback on stderr (it is never recorded)."""
    import logging

    from runner.engine._hooks import TRACEBACKS

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
