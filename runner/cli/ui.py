"""`wfrun ui`: serve the web console of this project on 127.0.0.1; `wfrun audit`: what
was done through it."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import click

from runner.errors import InputError, OperationFailed
from runner.host.runtime._launches import environment_secrets

from .app import cli
from .context import Context
from .runs import workspace


@cli.command("ui")
@click.option("--port", "port_text", default="0", metavar="N",
              help="Port to listen on (default: a free one).")
@click.option("--host", "host", metavar="ADDRESS",
              help="Listen on this address instead of 127.0.0.1 (reads need the token too).")
@click.option("--token", envvar="WFRUN_UI_TOKEN", metavar="TOKEN",
              help="Use this token, and require it for reads too (default: the one kept "
                   "in .wfrun/state/ui-token, made on first use).")
@click.option("--open", "open_browser", is_flag=True, help="Open the page in a browser.")
@click.pass_obj
def ui_cmd(ctx: Context, port_text: str, host: str | None, token: str | None,
           open_browser: bool) -> None:
    """Serve the web console: runs, live run graphs, the queue, workflows, controller
    resources, and actions (start, cancel, pause, rerun, answer) with the printed
    token. Ctrl-C stops it."""
    if not port_text.isdigit() or int(port_text) > 65535:
        raise InputError(f"--port must be a port number from 0 to 65535 (0: a free one), "
                         f"got {port_text!r}")
    port = int(port_text)
    try:
        from runner.ui._data import Site
        from runner.ui._server import check_bind, serve
    except ImportError as exc:  # a dependency of every install, removed or broken since
        raise OperationFailed(f"wfrun ui needs {exc.name or 'starlette and uvicorn'}, which "
                              "is not installed: pip install --upgrade --force-reinstall "
                              "wfrun") from None
    from runner.host.runtime._local import store_path

    ws = workspace(ctx)
    config = check_bind(host, token, store_path(ws).parent)
    site = Site(ws, user_dir=ctx.user_dir, secrets=environment_secrets())

    def ready(url: str) -> None:
        click.echo(f"wfrun ui: {url}")
        click.echo("actions need the token in this URL; Ctrl-C stops it", err=True)
        if open_browser:
            import webbrowser

            webbrowser.open(url)

    serve(site, config, port, on_ready=ready)


@cli.command("audit")
@click.option("--run", "run_id", metavar="RUN", help="Only the actions on this run.")
@click.option("--limit", "-n", "limit", type=click.IntRange(min=1), default=50,
              show_default=True, metavar="N", help="At most N actions, the newest.")
@click.option("--json", "as_json", is_flag=True)
@click.pass_obj
def audit_cmd(ctx: Context, run_id: str | None, limit: int, as_json: bool) -> None:
    """Show the actions taken through the console, its HTTP API and the CLI, newest first."""
    from runner.host.runtime._local import open_store, store_exists

    ws = workspace(ctx)
    rows = []
    if store_exists(ws):  # a view: no store yet means nothing was done
        store = open_store(ws, read_only=True)
        try:
            rows = [e.to_json() for e in store.audit.newest(run_id=run_id, limit=limit)]
        finally:
            store.close()
    if as_json:
        click.echo(json.dumps({"actions": rows}, indent=2))
        return
    if not rows:
        click.echo("no actions recorded", err=True)
    for row in rows:
        when = datetime.fromtimestamp(row["recorded_at"] / 1000, UTC).strftime(
            "%Y-%m-%d %H:%M:%S")
        error = row["detail"].get("error")
        trigger = row["detail"].get("trigger")
        target = row["run_id"] or (f"trigger {trigger}" if trigger else "-")
        click.echo(f"{when}  {row['action']:<7}  {row['outcome']:<6}  "
                   f"{target}  {row['actor']}  from {row['origin'] or '-'}"
                   + (f"  ({error})" if error else ""))
