"""`wfrun host`: the standalone host for detached launches, parked runs and controllers."""

from __future__ import annotations

import os
import signal
import sys
from contextlib import nullcontext
from types import FrameType
from typing import TYPE_CHECKING

import click

from runner.engine import RunOutcome
from runner.errors import MachineFault, WfrunError
from runner.host._daemon import (
    LEASE_SECONDS,
    HostReport,
    StandaloneHost,
    WorkerSettings,
    fork_workers,
    host_lock,
)
from runner.host._metrics import for_host, parse_address
from runner.host.runtime._launches import book
from runner.host.runtime._local import open_store

from .app import cli
from .context import Context, not_loaded
from .runs import agent_option, workspace

if TYPE_CHECKING:
    from runner.host.runtime._local import ProjectStore


@cli.command("host")
@agent_option
@click.option("--once", is_flag=True, help="Process what is ready, then exit.")
@click.option("--max-runs", type=click.IntRange(1, 256), default=4, show_default=True,
              help="Runs executing at the same time.")
@click.option("--processes", type=click.IntRange(1, 64), default=1, show_default=True,
              help="Processes sharing those runs, each claiming from the store: more than "
                   "one uses more CPU cores (the first process also runs the controllers).")
@click.option("--no-controllers", is_flag=True, help="Do not run the controller manager.")
@click.option("--quiet", "-q", is_flag=True)
@click.option("--metrics", "metrics_at", metavar="ADDR:PORT",
              help="Serve Prometheus metrics on http://ADDR:PORT/metrics (loopback only "
                   "unless --metrics-public; port 0: a free one, printed).")
@click.option("--metrics-public", is_flag=True,
              help="Allow a --metrics address other than loopback (/metrics has no "
                   "authentication).")
@click.option("--lease", "lease", type=click.FloatRange(0.5, 3600), default=LEASE_SECONDS,
              envvar="WFRUN_LEASE_SECONDS", hidden=True,
              help="Claim lease in seconds (tests shorten it; renewed every lease/3).")
@click.option("--poll", "poll", type=click.FloatRange(0.05, 3600), default=0.5,
              envvar="WFRUN_HOST_POLL", hidden=True,
              help="Idle poll interval in seconds (a Postgres store also wakes the host "
                   "by notice; tests lengthen it to prove that).")
@click.option("--listen", metavar="ADDR:PORT",
              help="Serve the project's webhook triggers here (loopback unless every one "
                   "has a secret; port 0 picks a free port).")
@click.pass_obj
def host_cmd(ctx: Context, agent: str | None, once: bool, max_runs: int, processes: int,
             no_controllers: bool, quiet: bool, metrics_at: str | None, metrics_public: bool,
             lease: float, poll: float, listen: str | None) -> None:
    """Run detached launches, resume parked runs and run controllers (one per project)."""
    if listen is not None and once:
        raise click.UsageError("--listen serves webhooks for as long as the host runs; "
                               "drop --once")
    if processes > max_runs:
        raise click.UsageError(f"--processes {processes} is more than --max-runs {max_runs}: "
                               "each process runs one run at least; lower --processes")
    address = None if metrics_at is None else parse_address(metrics_at, public=metrics_public)
    ws = workspace(ctx)
    ctx.require_project()
    lock = pool = None
    if processes > 1:
        # The store's errors first, exactly as a one-process host gives them; then the
        # lock (a second host is refused before any fork), then the workers, forked
        # before this process opens the store for good.
        open_store(ws).close()
        executor = ctx.executor(agent, ws.clock)  # before the fork: each worker a copy
        lock = host_lock(ws)
        lock.acquire()
        settings = WorkerSettings(open_store=lambda: open_store(ws), executor=executor,
                                  once=once, poll=poll, lease_seconds=lease,
                                  metrics=address is not None)
        pool, max_runs = fork_workers(ws, lock, processes=processes, max_runs=max_runs,
                                      settings=settings)
        store = open_store(ws)
    else:
        store = open_store(ws)
        executor = ctx.executor(agent, ws.clock)
    manager = None
    if not no_controllers:  # the controller side loads only for a host that runs it
        from runner.host.runtime._controllers import discover, load_all, make_manager

        entries = discover(ws, ctx.user_dir)
        if any(e.result.valid and e.shadowed_by is None for e in entries):
            manager = make_manager(ws, store, entries, executor=executor,
                                   on_skip=not_loaded)
        else:
            load_all(entries, on_skip=not_loaded)  # nothing to run: still name the bad ones
    metrics = None if address is None else for_host(store, manager)

    def ended(run_id: str, outcome: RunOutcome | None) -> None:
        if not quiet:
            click.echo(f"wfrun host: {_ended_line(store, run_id, outcome)}", err=True)

    # A live view only on a terminal: a quiet or piped host loads no rich at all.
    view = None
    if not quiet and sys.stderr.isatty():
        from .progress import Progress

        view = Progress()
    with view or nullcontext() as progress:
        host = StandaloneHost(ws, store, executor=executor, manager=manager,
                              max_runs=max_runs, observer=progress, lease_seconds=lease,
                              poll=poll, on_run_ended=ended, lock=lock, pool=pool,
                              listen=listen, metrics=metrics)

        def stop(signum: int, frame: FrameType | None) -> None:
            click.echo("\nwfrun host: parking in-flight runs and stopping...", err=True)
            host.stop()

        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, stop)
        def ready() -> None:  # only once the lock is held: a refused host prints no banner
            if metrics is not None and address is not None:  # bound once the lock is held
                served = metrics.serve(address)
                if not quiet or address.port == 0:  # a free port: the line says which
                    click.echo(f"wfrun host: metrics on {served.url()}", err=True)
            if not once and not quiet:
                more = f", {processes} processes" if processes > 1 else ""
                click.echo(f"wfrun host running for {ws.project_root} (pid {os.getpid()}"
                           f"{more}); Ctrl-C stops it", err=True)
            if host.webhooks is not None:  # even when quiet: a client needs the port
                click.echo(f"wfrun host: webhooks on http://{host.webhooks.address}", err=True)

        try:
            report = host.run(once=once, on_ready=ready)
        finally:
            if metrics is not None:
                metrics.close()
    store.close()
    fault = host.coordinator.faults.last
    if once and fault is not None:  # one line; each launch it touched waits (logged)
        raise MachineFault(f"{fault.problem}; the launches it refused stay queued or parked",
                           fault.todo)
    refused = host.coordinator.claim_error
    if once and refused is not None and not report.started:
        raise refused  # busy, full or read-only store: nothing was claimed (one line)
    if not quiet:
        click.echo(f"wfrun host: {summary(report)}", err=True)


def summary(report: HostReport) -> str:
    """`3 run(s) started: 1 completed, 1 failed, 1 parked` (failures counted as such)."""
    counts = report.counts()
    if report.failed_to_start:
        counts["failed to start"] = report.failed_to_start
    order = ("completed", "failed", "timed_out", "cancelled", "waiting",
             "waiting for items", "parked", "failed to start")
    parts = [f"{counts[k]} {k.replace('_', ' ')}" for k in order if counts.get(k)]
    text = f"{report.started} run(s) started" + (f": {', '.join(parts)}" if parts else "")
    if report.reaped:
        text += f"; reaped {len(report.reaped)} orphan group(s)"
    return text


def _ended_line(store: ProjectStore, run_id: str, outcome: RunOutcome | None) -> str:
    """One line per run the host finished with, parked or could not start."""
    if outcome is None:
        try:
            row = book(store).get(run_id)
        except WfrunError:  # the store's errors are WfrunErrors (one tree)
            # The store is away: say what is known; a report line never stops the host.
            return f"run {run_id} let go (the store did not answer)"
        if row is not None and row.status in ("queued", "starting", "running"):
            # Let go (the store was unreachable, or another host took it): not an end.
            return f"run {run_id} let go; it is carried on from the queue"
        why = f": {row.error_message} [{row.error_code}]" if row is not None and \
            row.error_code else ""
        return f"run {run_id} failed to start{why}"
    if outcome.waits_for_items:
        return f"run {run_id} waits for its items (hosts run them; it goes on when they end)"
    if outcome.parked and outcome.state.paused:
        return f"run {run_id} paused (`wfrun unpause {run_id}` lets it go on)"
    if outcome.parked:
        return f"run {run_id} parked (resumed by the next host)"
    line = f"run {run_id} {outcome.status}"
    message = (outcome.error or {}).get("message")
    if message:
        line += f": {' '.join(str(message).split())[:300]}"
    return line
