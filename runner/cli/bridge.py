"""`wfrun bridge`: serve the session host protocol on stdin/stdout (docs/hosts.md)."""

from __future__ import annotations

import os

import click

from runner.clock import CLOCK_FILE_ENV, clock_from_env
from runner.host.bridge import DEFAULT_SETTLE_TIMEOUT, serve_stdio
from runner.host.runtime._local import open_store

from .app import cli
from .context import Context
from .runs import workspace


@cli.command("bridge")
@click.option("--settle-timeout", type=click.FloatRange(min=0, min_open=True),
              default=DEFAULT_SETTLE_TIMEOUT, show_default=True, envvar="WFRUN_SETTLE_TIMEOUT",
              metavar="SECONDS",
              help="How long `turn/settled` waits for a run to go quiet when the client "
                   "names no timeout (a one-shot client such as `pi -p` then exits and "
                   "the run is handed over).")
@click.pass_obj
def bridge_cmd(ctx: Context, settle_timeout: float) -> None:
    """Serve one agent session over stdio: JSON-RPC 2.0, one message per line.

    An adapter in any language starts this process, sends `initialize`, then the
    session's lifecycle events and `workflow` tool calls, and answers wfrun's host
    calls (append a message, read the session entries). See docs/hosts.md.
    """
    ctx.require_project()
    ws = workspace(ctx)
    open_store(ws).close()  # a broken or busy store is a one-line error before any protocol
    # Tests share a FileClock with the bridge process so leases can expire on cue.
    store_clock = clock_from_env() if os.environ.get(CLOCK_FILE_ENV) else None
    serve_stdio(ws, store_clock=store_clock, settle_timeout=settle_timeout)
