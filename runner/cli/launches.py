"""`wfrun start`, `status`, `cancel`, `why`, `store check|reset`: durable launches."""

from __future__ import annotations

import json
import shlex
import sys
from typing import Any

import click

from runner.errors import InputError

from .app import cli
from .context import Context
from .runs import (
    EXIT,
    INPUT_HELP,
    PAIR_HELP,
    _input_schema,
    agent_option,
    opened_store,
    parking_on_interrupt,
    workspace,
)


@cli.command("start")
@click.argument("ref", metavar="NAME|PATH")
@click.option("--input", "input_json", metavar="JSON|@FILE|-", help=INPUT_HELP)
@click.option("-i", "pairs", multiple=True, metavar="KEY=VALUE", help=PAIR_HELP)
@click.option("--wait", is_flag=True, help="Activate and run the launch in this process.")
@agent_option
@click.option("--json", "as_json", is_flag=True)
@click.option("--quiet", "-q", is_flag=True, help="Only data and errors.")
@click.pass_obj
def start_cmd(ctx: Context, ref: str, input_json: str | None, pairs: tuple[str, ...],
              wait: bool, agent: str | None, as_json: bool, quiet: bool) -> None:
    """Queue a detached launch (a host activates it; --wait runs it here)."""
    from runner.engine import RunControl
    from runner.host.runtime._audit import Done, audited, cli_actor
    from runner.host.runtime._foreground import queue_detached, queue_here, start_and_wait
    from runner.host.runtime._launches import detached_coordinator
    from runner.host.runtime._local import parse_input

    from .progress import Progress

    source = click.get_current_context().get_parameter_source("agent")
    if agent and not wait and source == click.core.ParameterSource.COMMANDLINE:
        # The host that activates the launch uses its own --agent; this one would be lost.
        raise InputError("--agent applies only with --wait (the run happens here); without "
                         "it, start the host with the agent: wfrun host --agent "
                         f"{shlex.quote(agent)}")
    ws = workspace(ctx)
    value = parse_input(input_json, pairs, _input_schema(ws, ref) if pairs else None)
    store = opened_store(ws)
    coordinator = detached_coordinator(ws, store, executor=ctx.executor(agent, ws.clock))
    detail = {"input": input_json is not None or bool(pairs), "wait": wait}
    if wait:  # queued and claimed here in one commit: no host can take it first
        name, claimed = audited(store, cli_actor(), "start", run_id=None, workflow=ref,
                                detail=detail, do=lambda: queue_here(coordinator, ref, value),
                                done=lambda r: Done(r[1].run_id, r[0]))
        run_id = claimed.run_id
    else:
        name, run_id = audited(store, cli_actor(), "start", run_id=None, workflow=ref,
                               detail=detail, do=lambda: queue_detached(coordinator, ref, value),
                               done=lambda r: Done(r[1], r[0]))
    if as_json and not wait:
        click.echo(json.dumps({"action": "start", "workflow": name, "run_id": run_id,
                               "queued": True}))
    elif quiet:
        if not as_json:
            click.echo(run_id)  # the data: the run id alone
    else:
        click.echo(f"Workflow {name} queued (run {run_id}).", err=as_json)
    if not wait:
        return
    control = RunControl()
    with Progress(quiet) as progress, parking_on_interrupt(control):
        outcome = start_and_wait(coordinator, claimed, control, progress)
    if as_json:
        click.echo(json.dumps({"run_id": outcome.run_id, "status": outcome.status,
                               "final_output": outcome.final_output, "error": outcome.error}))
    if not (quiet and outcome.status == "completed" and not outcome.parked):
        click.echo(f"wfrun: run {outcome.run_id} {outcome.status}", err=True)
    sys.exit(130 if outcome.parked else EXIT.get(outcome.status, 1))


#: `wfrun status` lists this many active launches unless told otherwise (--limit).
STATUS_PAGE = 100


@cli.command("status")
@click.argument("run_id", required=False, metavar="[RUN]")
@click.option("--limit", type=click.IntRange(min=0), default=STATUS_PAGE, show_default=True,
              help="List at most N launches, oldest first (0: all of them).")
@click.option("--json", "as_json", is_flag=True)
@click.pass_obj
def status_cmd(ctx: Context, run_id: str | None, limit: int, as_json: bool) -> None:
    """Launch and run state; works before a run bundle exists."""
    from runner.host.runtime._launches import ACTIVE, book, launch_status

    ws = workspace(ctx)
    store = opened_store(ws, read_only=True)  # a view: it reads a read-only project too
    if run_id is None:
        # A page, not the whole queue: 100,000 queued launches took 12.5 s and 434 MB
        # as rows, each re-read and re-hashed. The total is counted in SQL.
        counts = book(store).counts()
        total = sum(counts.get(s, 0) for s in ACTIVE)
        records = book(store).query(statuses=ACTIVE, limit=limit or None)
        rows = [launch_status(ws, store, r.run_id, record=r) for r in records]
        if as_json:
            click.echo(json.dumps({"launches": rows, "total": total}, indent=2))
            return
        if not rows:
            click.echo("no queued, starting, running or parked launches", err=True)
        for row in rows:
            click.echo(f"{row['run_id']}  {row['status']}{_drift_note(row)}")
        if total > len(rows):
            click.echo(f"{total - len(rows)} more launch(es) not shown (of {total}); "
                       "`wfrun status --limit 0` lists them all", err=True)
        return
    view = launch_status(ws, store, run_id)
    if as_json:
        click.echo(json.dumps(view, indent=2))
        return
    line = f"{run_id}  {view['status']}"
    if view.get("error"):
        line += f"  {view['error'].get('code')}: {view['error'].get('message')}"
    click.echo(line + _drift_note(view))


def _drift_note(view: dict[str, Any]) -> str:
    """`  (source changed: FILE DETAIL)` for a queued launch whose source drifted, and
    `  (interrupted: ...)` for a claimed one whose runner is gone."""
    if view.get("interrupted"):
        return f"  (interrupted: its runner is gone; `wfrun why {view['run_id']}`)"
    source = view.get("source")
    if not isinstance(source, dict) or not source.get("changed"):
        return ""
    return f"  (source changed: {source.get('file')} {source.get('detail')})"


@cli.command("cancel")
@click.argument("run_id", metavar="RUN")
@click.option("--json", "as_json", is_flag=True)
@click.pass_obj
def cancel_cmd(ctx: Context, run_id: str, as_json: bool) -> None:
    """Cancel a queued or parked launch (a starting or running one is asked to stop)."""
    from runner.host.runtime._audit import Done, audited, cli_actor
    from runner.host.runtime._launches import detached_coordinator

    ws = workspace(ctx)
    store = opened_store(ws)
    coordinator = detached_coordinator(ws, store)
    record = audited(store, cli_actor(), "cancel", run_id=run_id, workflow=None, detail={},
                     do=lambda: coordinator.cancel(run_id),
                     done=lambda r: Done(workflow=r.workflow_ref))
    if as_json:
        click.echo(json.dumps({"run_id": run_id, "status": record.status,
                               "requested": record.status != "cancelled"}))
    elif record.status != "cancelled":
        click.echo(f"Cancellation of run {run_id} requested; its runner stops it.")
    else:
        click.echo(f"Workflow run {run_id} cancelled.")


@cli.command("why")
@click.argument("run_id", metavar="RUN")
@click.option("--json", "as_json", is_flag=True)
@click.pass_obj
def why_cmd(ctx: Context, run_id: str, as_json: bool) -> None:
    """Explain why a run is not running (state, owner, lease, reservation, source)."""
    from runner.host.runtime._launches import explain

    ws = workspace(ctx)
    facts = explain(ws, opened_store(ws, read_only=True), run_id)
    if as_json:
        click.echo(json.dumps(facts, indent=2))
        return
    for line in facts["reasons"]:
        click.echo(line)


@cli.group("store")
def store_group() -> None:
    """Inspect or reset the project's durable store."""


@store_group.command("check")
@click.option("--json", "as_json", is_flag=True)
@click.pass_obj
def store_check(ctx: Context, as_json: bool) -> None:
    """Open the store read-only and verify its layout and every page (quick_check)."""
    from runner.host.runtime._local import check_store

    info = check_store(workspace(ctx))
    path = info["path"]
    if as_json:
        click.echo(json.dumps(info, indent=2))
    else:
        click.echo(f"ok {info['schema']} {path}")


@store_group.command("reset")
@click.option("--yes", is_flag=True, help="Really delete the store (run bundles are kept).")
@click.pass_obj
def store_reset(ctx: Context, yes: bool) -> None:
    """Delete and recreate the store file; never touches run bundles."""
    from runner.host.runtime._local import reset_store

    if not yes:
        raise InputError("store reset deletes every queued launch and intent; keep the run "
                         "bundles you need (.wfrun/runs/), then run `wfrun store reset --yes`")
    path = reset_store(workspace(ctx))
    click.echo(f"store reset: {path} (run bundles untouched)")
