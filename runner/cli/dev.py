"""`wfrun dev`: watch definitions and re-validate (and optionally re-run) on save."""

from __future__ import annotations

import signal
import threading
from typing import TYPE_CHECKING, Any

import click

from runner.compiler import build_catalog
from runner.host.runtime._channelnames import with_channels
from runner.host.runtime._devmode import DevMode
from runner.host.runtime._local import parse_input

if TYPE_CHECKING:
    pass

from .app import cli
from .context import Context
from .runs import workspace

_STYLE = {"ok": "green", "error": "red", "removed": "yellow", "run": "cyan", "note": "dim"}


@cli.command("dev")
@click.argument("names", nargs=-1, metavar="[NAME]...")
@click.option("--run", "run_name", metavar="NAME",
              help="Re-run this workflow with the scripted agent after each valid save.")
@click.option("--agent", "agent", metavar="SPEC", default=None,
              help="Agent for --run (default: none; agent steps then fail).")
@click.option("--input", "input_json", metavar="JSON", help="Input for --run.")
@click.pass_obj
def dev_cmd(ctx: Context, names: tuple[str, ...], run_name: str | None, agent: str | None,
            input_json: str | None) -> None:
    """Watch workflow sources; print diagnostics or `ok NAME DIGEST` on every save."""
    from rich.console import Console
    from rich.markup import escape

    ws = workspace(ctx)
    out, err = Console(highlight=False), Console(stderr=True, highlight=False)

    def emit(kind: str, text: str) -> None:
        style = _STYLE.get(kind, "white")
        console = err if kind in ("error", "note") else out
        console.print(f"[{style}]{escape(text)}[/]", soft_wrap=True)

    def queued() -> list[Any]:
        """Every queued launch (detached or a session's): their sources and digests."""
        from runner.host.runtime._launches import book
        from runner.host.runtime._local import open_store, store_exists

        if not store_exists(ws):
            return []
        store = open_store(ws)
        try:
            rows: list[Any] = book(store).query(statuses=["queued"])
            return rows
        finally:
            store.close()

    def launch(name: str, value: Any) -> Any:
        from runner.host.runtime._foreground import run_in_store

        return run_in_store(ws, name, value, executor=ctx.executor(agent, ws.clock))

    project, user = ctx.project_root, ctx.user_dir
    dev = DevMode(lambda: with_channels(build_catalog("workflows", project, user)), emit,
                  names=names,
                  run=run_name, launch=launch, project_root=project, queued=queued,
                  run_input=parse_input(input_json, ()) if input_json else None,
                  clock=ws.clock)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    dev.start()
    try:
        stop.wait()
    finally:
        dev.stop()
        lat = dev.state.latencies
        if lat:
            err.print(f"[dim]{len(lat)} change batch(es); median event->output "
                      f"{sorted(lat)[len(lat) // 2] * 1000:.0f} ms[/]")

