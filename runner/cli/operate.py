"""`wfrun rerun`, `pause`, `unpause`, `cache list|clear`: operating runs (issue 39)."""

from __future__ import annotations

import json
import sys
from typing import Any

import click

from runner.errors import InputError

from .app import cli
from .context import Context
from .runs import (
    INPUT_HELP,
    PAIR_HELP,
    _finish,
    agent_option,
    no_cache_option,
    opened_store,
    parking_on_interrupt,
    secret_option,
    workspace,
)


def _parse_sets(pairs: tuple[str, ...]) -> dict[str, Any]:
    """`--set NODE=JSON` (repeatable; `NODE=@FILE` reads the JSON from a file)."""
    from runner import _jsonin as jsonin
    from runner.host.runtime._local import _read_text

    out: dict[str, Any] = {}
    for pair in pairs:
        node, sep, raw = pair.partition("=")
        if not sep or not node:
            raise InputError(f"--set takes NODE=JSON, got '{pair}'")
        if node in out:
            raise InputError(f"--set {node} is given twice; give each node once")
        if raw.startswith("@"):
            raw = _read_text(raw[1:], f"--set {node}")
        try:
            out[node] = jsonin.loads(raw)
        except json.JSONDecodeError as exc:
            raise InputError(f"--set {node}: the value is not valid JSON ({exc.msg} at column "
                             f"{exc.colno}); quote it for the shell, e.g. "
                             "--set review='{\"ok\": true}'") from None
    return out


@cli.command("rerun")
@click.argument("run_id", metavar="RUN")
@click.option("--from", "from_node", metavar="NODE",
              help="Execute from this node (default: the node that failed).")
@click.option("--input", "input_json", metavar="JSON|@FILE|-",
              help=INPUT_HELP + " Default: the input of RUN.")
@click.option("-i", "pairs", multiple=True, metavar="KEY=VALUE", help=PAIR_HELP)
@click.option("--set", "sets", multiple=True, metavar="NODE=JSON",
              help="Replace a reused node's output (checked against its output schema).")
@click.option("--force", is_flag=True,
              help="Rerun although the workflow changed since RUN (recorded in the new run).")
@click.option("--detach", is_flag=True, help="Queue the rerun for a host instead of running "
                                              "it here.")
@agent_option
@secret_option
@no_cache_option
@click.option("--json", "as_json", is_flag=True)
@click.option("--quiet", "-q", is_flag=True)
@click.pass_obj
def rerun_cmd(ctx: Context, run_id: str, from_node: str | None, input_json: str | None,
              pairs: tuple[str, ...], sets: tuple[str, ...], force: bool, detach: bool,
              agent: str | None, secret_pairs: tuple[str, ...], no_cache: bool, as_json: bool,
              quiet: bool) -> None:
    """Run an ended run again as a new linked run, reusing what ran before a node."""
    from runner.engine import RunControl
    from runner.host.runtime._audit import audited, cli_actor
    from runner.host.runtime._local import parse_input
    from runner.host.runtime._operations import (
        RerunRequest,
        queue_rerun_detached,
        rerun_detail,
        rerun_done,
        rerun_here,
    )
    from runner.host.runtime._secrets import parse_secrets

    from .progress import Progress

    ws = workspace(ctx)
    value = parse_input(input_json, pairs) if input_json is not None or pairs else None
    request = RerunRequest(run_id=run_id, from_node=from_node, input=value,
                           set=_parse_sets(sets), force=force)
    store = opened_store(ws)
    if detach:
        queued = audited(store, cli_actor(), "rerun", run_id=run_id, workflow=None,
                         detail=rerun_detail(request),
                         do=lambda: queue_rerun_detached(ws, store, request),
                         done=rerun_done)
        if as_json:
            click.echo(json.dumps(queued.to_json(), indent=2))
        elif quiet:
            click.echo(queued.run_id)
        else:
            click.echo(f"Rerun of {run_id} from node {queued.plan.from_node} queued (run "
                       f"{queued.run_id}).")
        return
    secrets = parse_secrets(secret_pairs)
    control = RunControl()
    with Progress(quiet) as progress, parking_on_interrupt(control):
        queued, outcome = rerun_here(ws, store, request, control,
                                     executor=ctx.executor(agent, ws.clock),
                                     observer=progress, secrets=secrets,
                                     use_cache=not no_cache, actor=cli_actor())
    if not quiet:
        reused = ", ".join([*queued.plan.reused, *(
            f"{len(done)} ended item{'s' if len(done) != 1 else ''} of {node}"
            for node, done in queued.plan.items.items())]) or "nothing"
        click.echo(f"wfrun: rerun of {run_id} from node {queued.plan.from_node} (reused: "
                   f"{reused}{'; forced' if queued.plan.forced else ''})", err=True)
    _finish(outcome, as_json, ws, frozenset(progress.shown))


@cli.command("pause")
@click.argument("run_id", metavar="RUN")
@click.option("--json", "as_json", is_flag=True)
@click.pass_obj
def pause_cmd(ctx: Context, run_id: str, as_json: bool) -> None:
    """Pause a run at its next node boundary, on any host; it holds no slot until unpaused."""
    from runner.host.runtime._audit import audited, cli_actor
    from runner.host.runtime._operations import pause_run

    ws = workspace(ctx)
    store = opened_store(ws)
    result = audited(store, cli_actor(), "pause", run_id=run_id, workflow=None, detail={},
                     do=lambda: pause_run(ws, store, run_id))
    if as_json:
        click.echo(json.dumps(result.to_json()))
    elif result.state == "paused":
        click.echo(f"Workflow run {run_id} paused; continue it with: wfrun unpause {run_id}")
    else:
        click.echo(f"Pause of run {run_id} requested; it pauses at its next node boundary.")


@cli.command("unpause")
@click.argument("run_id", metavar="RUN")
@click.option("--json", "as_json", is_flag=True)
@click.pass_obj
def unpause_cmd(ctx: Context, run_id: str, as_json: bool) -> None:
    """Let a paused run go on: a host resumes it (or `wfrun resume RUN` here)."""
    from runner.host.runtime._audit import audited, cli_actor
    from runner.host.runtime._operations import unpause_run

    ws = workspace(ctx)
    store = opened_store(ws)
    result = audited(store, cli_actor(), "unpause", run_id=run_id, workflow=None, detail={},
                     do=lambda: unpause_run(ws, store, run_id))
    if as_json:
        click.echo(json.dumps(result.to_json()))
    elif result.launch == "parked":
        click.echo(f"Workflow run {run_id} unpaused; a host resumes it (or: wfrun resume "
                   f"{run_id}).")
    else:
        click.echo(f"Pending pause of run {run_id} withdrawn.")
    sys.exit(0)


@cli.group("cache")
def cache_group() -> None:
    """List or clear kept node results (`cache:` in a workflow)."""


@cache_group.command("list")
@click.option("--workflow", "-w", metavar="NAME", help="Only this workflow's entries.")
@click.option("--node", metavar="NODE", help="Only this node's entries (with --workflow).")
@click.option("--json", "as_json", is_flag=True)
@click.pass_obj
def cache_list(ctx: Context, workflow: str | None, node: str | None, as_json: bool) -> None:
    """List kept node results: workflow, node, the run that made each, when it expires."""
    from runner.host.runtime._operations import cache_entries

    ws = workspace(ctx)
    rows = cache_entries(opened_store(ws, read_only=True), workflow=workflow, node=node)
    if as_json:
        click.echo(json.dumps({"entries": rows}, indent=2))
        return
    if not rows:
        click.echo("no cached node results", err=True)
    for row in rows:
        state = "expired" if row["expired"] else "expires"
        click.echo(f"{row['workflow']}  {row['node']}  {row['run_id']}  {state} "
                   f"{row['expires_at']}  {row['key'][:19]}…")


@cache_group.command("clear")
@click.option("--workflow", "-w", metavar="NAME", help="Only this workflow's entries.")
@click.option("--node", metavar="NODE", help="Only this node's entries (with --workflow).")
@click.option("--key", "keys", multiple=True, metavar="KEY", help="Only this entry.")
@click.option("--expired", is_flag=True, help="Only entries whose ttl ran out.")
@click.option("--json", "as_json", is_flag=True)
@click.pass_obj
def cache_clear(ctx: Context, workflow: str | None, node: str | None, keys: tuple[str, ...],
                expired: bool, as_json: bool) -> None:
    """Forget kept node results (all of them unless narrowed); runs are not touched."""
    from runner.host.runtime._operations import clear_cache

    ws = workspace(ctx)
    removed = clear_cache(opened_store(ws), workflow=workflow, node=node, keys=keys,
                          expired=expired)
    if as_json:
        click.echo(json.dumps({"removed": removed}))
    else:
        click.echo(f"{removed} cached node result(s) removed.")
