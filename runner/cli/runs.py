"""`wfrun run`, `resume`, `answer`, `runs`, `show`: running workflows in the foreground."""

from __future__ import annotations

import json
import signal
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any

import click

from runner.errors import WfrunError

from .app import cli
from .context import Context

if TYPE_CHECKING:  # the runtime loads inside each command (`status` imports this module)
    from runner.engine import RunControl, RunOutcome
    from runner.host.runtime._local import ProjectStore, Workspace

EXIT = {"completed": 0, "failed": 1, "timed_out": 1, "cancelled": 1, "waiting": 4}
PARKED_EXIT = 130


def opened_store(ws: Workspace, *, read_only: bool = False) -> ProjectStore:
    """The project's store for this command, closed when the command ends (in a test's
    CliRunner too: an unclosed Postgres connection would outlive the command)."""
    from runner.host.runtime._local import open_store

    store = open_store(ws, read_only=read_only)
    click.get_current_context().call_on_close(store.close)
    return store


def workspace(ctx: Context) -> Workspace:
    from runner.clock import clock_from_env
    from runner.host.runtime._local import Workspace

    state_dir = ctx.user_dir
    if state_dir is None:
        import platformdirs  # only without a user folder (~7 ms of a cold start)

        state_dir = Path(platformdirs.user_state_dir("wfrun"))
    # The system clock, or a test's clock file (WFRUN_CLOCK_FILE) for times like --since.
    return Workspace(ctx.catalog("workflows"), ctx.project_root, state_dir,
                     clock=clock_from_env(), store_flag=ctx.store)


@contextmanager
def parking_on_interrupt(control: RunControl) -> Iterator[None]:
    """First Ctrl-C (or SIGTERM) parks the run at a safe point; a second one aborts."""
    previous: dict[signal.Signals, Any] = {}

    def handler(signum: int, frame: FrameType | None) -> None:
        if control.stopping:
            raise KeyboardInterrupt
        click.echo("\nwfrun: parking the run (Ctrl-C again to abort)...", err=True)
        control.park("interrupted")

    for sig in (signal.SIGINT, signal.SIGTERM):
        previous[sig] = signal.signal(sig, handler)
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


class RunStateChoice(click.Choice):  # type: ignore[type-arg]
    """The run states (`run_state`'s vocabulary), loaded when a `runs` option is parsed or
    its help shown: importing this module for another command's `--help` loads no
    runtime module (cold start)."""

    def __init__(self) -> None:
        self.case_sensitive = True

    @property
    def choices(self) -> tuple[str, ...]:  # type: ignore[override]
        from runner.host.runtime._runstate import RUN_STATES

        return RUN_STATES


def _input_schema(ws: Workspace, ref: str) -> Any:
    """The workflow's input schema, to read `-i` values as the types it declares."""
    try:
        definition, _ = ws.compile(ref)
    except WfrunError:
        return None  # the run itself reports the problem
    return definition.input_schema


def agent_option(f: Callable[..., Any]) -> Callable[..., Any]:
    return click.option("--agent", "agent", metavar="SPEC", envvar="WFRUN_AGENT",
                        help="Agent for agent steps: scripted:FILE, command:'CMD' or openai.")(f)


def secret_option(f: Callable[..., Any]) -> Callable[..., Any]:
    return click.option("--secret", "secret_pairs", multiple=True, metavar="NAME=VALUE|@FILE",
                        help="A secret for this run (default: the environment variable "
                        "NAME); never stored, masked as *** everywhere.")(f)


def no_cache_option(f: Callable[..., Any]) -> Callable[..., Any]:
    return click.option("--no-cache", "no_cache", is_flag=True,
                        help="Reuse no cached node result (`cache:`); fresh ones are kept.")(f)


def _shown_already(output: Any, shown: frozenset[str]) -> bool:
    """Whether `output` is a notification the progress view printed, on a terminal that
    shows stdout too: printing it again as JSON would say the same thing twice. Off a
    terminal stdout is data and always gets it."""
    return isinstance(output, dict) and str(output.get("notification_id")) in shown \
        and sys.stdout.isatty()


def _finish(outcome: RunOutcome, as_json: bool, ws: Workspace,
            shown: frozenset[str] = frozenset()) -> None:
    if as_json:
        click.echo(json.dumps({"run_id": outcome.run_id, "status": outcome.status,
                               "parked": outcome.parked, "final_output": outcome.final_output,
                               "error": outcome.error}, indent=2, ensure_ascii=False))
    if outcome.parked and outcome.state.paused:  # `wfrun pause` from elsewhere
        click.echo(f"wfrun: run {outcome.run_id} paused; continue it with: wfrun unpause "
                   f"{outcome.run_id} (a host resumes it) or wfrun resume {outcome.run_id}",
                   err=True)
        sys.exit(PARKED_EXIT)
    if outcome.parked:
        click.echo(f"wfrun: run {outcome.run_id} parked; continue it with: wfrun resume "
                   f"{outcome.run_id}", err=True)
        sys.exit(PARKED_EXIT)
    if not as_json and outcome.final_output is not None and \
            not _shown_already(outcome.final_output, shown):
        click.echo(json.dumps(outcome.final_output, indent=2, ensure_ascii=False))
    status = outcome.status
    msg = f"wfrun: run {outcome.run_id} {status}"
    if outcome.error:
        msg += f": {outcome.error.get('message', '')}"
    if status == "waiting":
        msg += f"; answer it with: wfrun answer {outcome.run_id} '<json or text>'"
    # -q: a run that completed says nothing beyond its data; anything else still tells.
    if not (status == "completed" and click.get_current_context().params.get("quiet")):
        click.echo(msg, err=True)
    sys.exit(EXIT.get(status, 1))


INPUT_HELP = "Run input as JSON; @FILE reads it from a file, - from stdin."
PAIR_HELP = ("One input field, a string unless the input schema types it; KEY=@FILE takes "
             "a file's text.")


@cli.command("run")
@click.argument("ref", metavar="NAME|PATH")
@click.option("--input", "input_json", metavar="JSON|@FILE|-", help=INPUT_HELP)
@click.option("-i", "pairs", multiple=True, metavar="KEY=VALUE", help=PAIR_HELP)
@agent_option
@secret_option
@click.option("--durability", type=click.Choice(["full", "normal"]), default="full",
              show_default=True, help="full fsyncs the trace after every node.")
@no_cache_option
@click.option("--json", "as_json", is_flag=True, help="Print the outcome as JSON.")
@click.option("--quiet", "-q", is_flag=True, help="No progress output.")
@click.pass_obj
def run_cmd(ctx: Context, ref: str, input_json: str | None, pairs: tuple[str, ...],
            agent: str | None, secret_pairs: tuple[str, ...], durability: str, no_cache: bool,
            as_json: bool, quiet: bool) -> None:
    """Run a workflow in the foreground (exit 0 completed, 1 failed, 4 waiting)."""
    from runner.engine import RunControl
    from runner.host.runtime._foreground import run_workflow
    from runner.host.runtime._local import parse_input
    from runner.host.runtime._secrets import parse_secrets

    from .progress import Progress

    ws = workspace(ctx)
    value = parse_input(input_json, pairs, _input_schema(ws, ref) if pairs else None)
    secrets = parse_secrets(secret_pairs)
    control = RunControl()
    store = opened_store(ws)
    with Progress(quiet) as progress, parking_on_interrupt(control):
        outcome = run_workflow(ws, store, ref, value, control,
                               executor=ctx.executor(agent, ws.clock), observer=progress,
                               durability=durability, secrets=secrets,
                               use_cache=not no_cache)
    _finish(outcome, as_json, ws, frozenset(progress.shown))


@cli.command("resume")
@click.argument("run_id", metavar="RUN")
@click.option("--force", is_flag=True, help="Resume even though the workflow changed.")
@agent_option
@secret_option
@no_cache_option
@click.option("--json", "as_json", is_flag=True)
@click.option("--quiet", "-q", is_flag=True)
@click.pass_obj
def resume_cmd(ctx: Context, run_id: str, force: bool, agent: str | None,
               secret_pairs: tuple[str, ...], no_cache: bool, as_json: bool,
               quiet: bool) -> None:
    """Resume a parked or interrupted run at the node it was in (secrets are resolved
    again: nothing secret was stored)."""
    from runner.engine import RunControl
    from runner.host.runtime._foreground import resume_run
    from runner.host.runtime._secrets import parse_secrets

    from .progress import Progress

    ws = workspace(ctx)
    secrets = parse_secrets(secret_pairs)
    control = RunControl()
    store = opened_store(ws)
    with Progress(quiet) as progress, parking_on_interrupt(control):
        outcome = resume_run(ws, store, run_id, control, force=force,
                             executor=ctx.executor(agent, ws.clock), observer=progress,
                             secrets=secrets, use_cache=not no_cache)
    _finish(outcome, as_json, ws, frozenset(progress.shown))


@cli.command("answer")
@click.argument("run_id", metavar="RUN")
@click.argument("answer", required=False, metavar="[JSON|TEXT]")
@agent_option
@secret_option
@click.option("--json", "as_json", is_flag=True)
@click.option("--quiet", "-q", is_flag=True)
@click.pass_obj
def answer_cmd(ctx: Context, run_id: str, answer: str | None, agent: str | None,
               secret_pairs: tuple[str, ...], as_json: bool, quiet: bool) -> None:
    """Continue a waiting run as a new linked run, with the answer at its checkpoint."""
    from runner.engine import RunControl
    from runner.host.runtime._audit import cli_actor
    from runner.host.runtime._foreground import answer_run
    from runner.host.runtime._local import parse_answer
    from runner.host.runtime._secrets import parse_secrets

    from .progress import Progress

    ws = workspace(ctx)
    secrets = parse_secrets(secret_pairs)
    control = RunControl()
    store = opened_store(ws)
    with Progress(quiet) as progress, parking_on_interrupt(control):
        outcome = answer_run(ws, store, run_id, parse_answer(answer), control,
                             executor=ctx.executor(agent, ws.clock), observer=progress,
                             secrets=secrets, actor=cli_actor())
    _finish(outcome, as_json, ws, frozenset(progress.shown))


@cli.command("runs")
@click.option("--status", "status", metavar="STATUS",
              type=RunStateChoice(),
              help="Only runs in this state (continued: answered checkpoints).")
@click.option("--workflow", "-w", "workflow", metavar="NAME", help="Only runs of this workflow.")
@click.option("--since", "since", metavar="AGE|DATE",
              help="Only runs started within AGE (2h, 7d) or since DATE (2026-01-31).")
@click.option("--limit", "-n", "limit", type=click.IntRange(min=1), metavar="N",
              help="At most N runs, the newest (default 50; it says when more match).")
@click.option("--json", "as_json", is_flag=True)
@click.pass_obj
def runs_cmd(ctx: Context, status: str | None, workflow: str | None, since: str | None,
             limit: int | None, as_json: bool) -> None:
    """List runs, newest first (a page from the store: only its runs' bundles are read)."""
    from runner.host.runtime._housekeeping import parse_since
    from runner.host.runtime._runlist import list_runs_paged
    from runner.host.runtime._views import RunFilter

    ws = workspace(ctx)
    where = RunFilter(status=status, workflow=workflow, limit=limit,
                      since=parse_since(since, ws.clock.now()) if since else None)
    page = list_runs_paged(ws, where)
    if page.note:
        click.echo(f"wfrun: {page.note}", err=True)
    if as_json:
        click.echo(json.dumps({"runs": [r.to_json() for r in page.rows]}, indent=2))
    else:
        from .tables import runs_table

        runs_table(page.rows, filtered=where.narrows)
    if page.more:
        # No silent limit: the page is full and more runs match.
        click.echo(f"wfrun: the newest {page.limit} runs shown, more match; "
                   "--limit N shows more", err=True)


@cli.command("show")
@click.argument("run_id", metavar="RUN")
@click.option("--json", "as_json", is_flag=True)
@click.option("--follow", "-f", is_flag=True, help="Keep redrawing until the run ends.")
@click.pass_obj
def show_cmd(ctx: Context, run_id: str, as_json: bool, follow: bool) -> None:
    """Show a run: status, node timeline, outputs and errors."""
    from runner.host.runtime._views import show_view

    ws = workspace(ctx)
    if follow:
        from .follow import follow_run

        view = follow_run(ws.reader(), run_id, as_json=as_json)
        sys.exit(EXIT.get(view["status"], 0) if view["status"] != "running" else 0)
    view = show_view(ws, run_id)
    if as_json:
        click.echo(json.dumps(view, indent=2, ensure_ascii=False))
        return
    from .tables import run_view

    run_view(view)
