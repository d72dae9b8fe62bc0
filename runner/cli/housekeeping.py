"""`wfrun init` (a new project) and `wfrun prune` (old runs and store history)."""

from __future__ import annotations

import json
from pathlib import Path

import click

from runner.host.runtime._housekeeping import (
    PRUNABLE,
    execute_prune,
    init_project,
    parse_age,
    plan_prune,
    store_if_present,
)

from .app import cli
from .context import Context
from .runs import workspace


@cli.command("init")
@click.argument("folder", required=False, metavar="[DIR]")
@click.option("--json", "as_json", is_flag=True)
def init_cmd(folder: str | None, as_json: bool) -> None:
    """Make DIR (default: here) a wfrun project: .wfrun/workflows/ with an example
    workflow, and .gitignore lines for run bundles and the store."""
    report = init_project(Path(folder or "."))
    if as_json:
        click.echo(json.dumps(report.to_json(), indent=2))
        return
    for path in report.created:
        click.echo(f"created {path}")
    for path in report.kept:
        click.echo(f"kept    {path}")
    click.echo("next: wfrun run hello -i name=you", err=True)


@cli.command("prune")
@click.option("--older-than", "older_than", required=True, metavar="AGE",
              help="Runs started longer ago than AGE (30d, 12h).")
@click.option("--status", "statuses", multiple=True, type=click.Choice(PRUNABLE),
              help="Only runs in this ended state (repeatable).")
@click.option("--yes", is_flag=True, help="Really delete (without it: a dry run).")
@click.option("--json", "as_json", is_flag=True)
@click.pass_obj
def prune_cmd(ctx: Context, older_than: str, statuses: tuple[str, ...], yes: bool,
              as_json: bool) -> None:
    """Delete ended runs older than AGE, their store rows, and store history older
    than AGE; never a run that has not ended or that a launch still points at."""
    age = parse_age(older_than, "--older-than")
    ws = workspace(ctx)
    store = store_if_present(ws)
    try:
        plan = plan_prune(ws, store, age, ws.clock.now(), statuses)
        if yes:
            plan = execute_prune(ws, store, plan)
    finally:
        if store is not None:
            store.close()
    if as_json:
        click.echo(json.dumps({"dry_run": not yes, **plan.to_json(removed=yes)}, indent=2))
        return
    verb = "removed" if yes else "would remove"
    for row in plan.remove:
        click.echo(f"{verb} {row.run_id}  {row.status}  {row.started_at}")
    for run_id, why in sorted(plan.keep.items()):
        click.echo(f"kept {run_id}: {why}", err=True)
    summary = f"wfrun: {verb} {len(plan.remove)} run(s), kept {len(plan.keep)}"
    if not yes and plan.remove:
        summary += "; run again with --yes to delete them"
    click.echo(summary, err=True)
