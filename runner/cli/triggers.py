"""`wfrun triggers`: the project's triggers, pause/resume, backfill (DESIGN §10)."""

from __future__ import annotations

import json
from typing import Any

import click

from .app import cli
from .context import Context
from .runs import opened_store, workspace


@cli.group("triggers", invoke_without_command=True)
@click.option("--json", "as_json", is_flag=True, help="One JSON document.")
@click.pass_context
def triggers_group(click_ctx: click.Context, as_json: bool) -> None:
    """List the project's triggers: schedule, policy, last and next firing, skipped slots."""
    if click_ctx.invoked_subcommand is not None:
        return
    from runner.host.runtime._triggers import trigger_rows

    ws = workspace(click_ctx.obj)
    store = opened_store(ws)
    try:
        rows = trigger_rows(ws, store)
    finally:
        store.close()
    if as_json:
        click.echo(json.dumps({"triggers": rows}, indent=2))
        return
    if not rows:
        click.echo("no triggers (add `triggers:` to a workflow in .wfrun/workflows/)")
        return
    for row in rows:
        click.echo(_line(row))
        for firing in row["skipped"]:
            click.echo(f"    {firing['outcome']} {firing['slot']}: {firing['reason'] or ''}")


def _line(row: dict[str, Any]) -> str:
    last = row["last"]
    counts = row["counts"]
    policy = (f"missed={row['missed']} overlap={row['overlap']}" if row["missed"]
              else f"overlap={row['overlap']}")
    state = "paused" if row["paused"] else f"next {row['next'] or '-'}"
    done = (f"last {last['slot']} run {last['run_id']}" if last else "never fired")
    extra = ", ".join(f"{counts[k]} {k}" for k in ("skipped", "missed", "failed", "pending")
                      if counts.get(k))
    return (f"{row['name']}  {row['schedule']}  {policy}  {state}  {done}"
            + (f"  ({extra})" if extra else ""))


@triggers_group.command("pause")
@click.argument("name", metavar="[WORKFLOW/]TRIGGER")
@click.pass_obj
def pause_cmd(ctx: Context, name: str) -> None:
    """Stop a trigger firing (on every host) until `wfrun triggers resume`."""
    _pause(ctx, name, True)


@triggers_group.command("resume")
@click.argument("name", metavar="[WORKFLOW/]TRIGGER")
@click.pass_obj
def resume_cmd(ctx: Context, name: str) -> None:
    """Fire a paused trigger again from its next slot (the paused ones are not caught up)."""
    _pause(ctx, name, False)


def _pause(ctx: Context, name: str, paused: bool) -> None:
    from runner.host.runtime._audit import cli_actor
    from runner.host.runtime._triggers import pause_trigger

    ws = workspace(ctx)
    store = opened_store(ws)
    try:
        done = pause_trigger(ws, store, cli_actor(), name, paused)
    finally:
        store.close()
    word = "paused" if paused else "resumed"
    full = done["trigger"]
    click.echo(f"trigger {full} {word}" if done["changed"]
               else f"trigger {full} was {word} already")


@triggers_group.command("backfill")
@click.argument("name", metavar="[WORKFLOW/]TRIGGER")
@click.option("--from", "start", required=True, metavar="TIME",
              help="ISO 8601; the trigger's time zone when it names none.")
@click.option("--to", "end", required=True, metavar="TIME", help="ISO 8601, inclusive.")
@click.option("--max", "limit", default=1000, show_default=True,
              help="Refuse more slots than this.")
@click.option("--json", "as_json", is_flag=True)
@click.pass_obj
def backfill_cmd(ctx: Context, name: str, start: str, end: str, limit: int,
                 as_json: bool) -> None:
    """Queue a run for every slot between two times that has none (a host runs them)."""
    from runner.host.runtime._audit import cli_actor
    from runner.host.runtime._launches import detached_coordinator
    from runner.host.runtime._triggers import backfill

    ws = workspace(ctx)
    store = opened_store(ws)
    try:
        done = backfill(ws, store, detached_coordinator(ws, store), name, start, end, limit,
                        actor=cli_actor())
    finally:
        store.close()
    if as_json:
        click.echo(json.dumps({"slots": [{"slot": k, "run_id": r, "outcome": o}
                                         for k, r, o in done]}, indent=2))
        return
    for key, run_id, outcome in done:
        click.echo(f"{key}  {f'queued run {run_id}' if outcome == 'launched' else outcome}")
    queued = sum(1 for _, _, o in done if o == "launched")
    click.echo(f"{queued} of {len(done)} slot(s) queued; `wfrun host` runs them")
