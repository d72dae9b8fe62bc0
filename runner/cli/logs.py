"""`wfrun logs RUN [NODE]`: what shell actions and command agents printed.

The logs themselves go to stdout (so `wfrun logs RUN test --stdout > out.txt` is the
step's output and nothing else); the header naming each node and stream goes to
stderr. Secrets were masked before the logs were recorded. With `--follow`, a running
step's output is printed as the step prints it (from its live log), and its recorded
log then adds only the rest; with `--json`, live chunks are JSON lines with "live": true.
A fan-out item (`NODE[3]`) is followed until it ends, not until the run does.
"""

from __future__ import annotations

import json
import sys

import click

from runner.errors import InputError
from runner.host.runtime._launches import book
from runner.host.runtime._local import open_store, store_exists
from runner.host.runtime._logs import (
    LiveText,
    StepLog,
    await_start,
    follow_logs,
    run_logs,
    running_output,
    store_item_state,
)

from .app import cli
from .context import Context
from .runs import EXIT, workspace


def _print(entry: StepLog, streams: tuple[str, ...], headers: bool,
           streamed: set[tuple[str | None, str]] | None = None) -> None:
    if entry.cached_from is not None:
        if headers:
            click.echo(f"--- {entry.node} (attempt {entry.attempt}): a cached result of run "
                       f"{entry.cached_from}; nothing ran (`wfrun logs {entry.cached_from} "
                       f"{entry.node}`) ---", err=True)
        return
    for stream in streams:
        text = entry.stdout if stream == "stdout" else entry.stderr
        cut = entry.stdout_truncated if stream == "stdout" else entry.stderr_truncated
        if streamed is not None and (entry.attempt, stream) in streamed:
            streamed.discard((entry.attempt, stream))
            if text:  # the rest of a stream shown live: no second header
                sys.stdout.write(text if text.endswith("\n") else text + "\n")
                sys.stdout.flush()
            continue
        if headers:
            code = f", exit {entry.exit_code}" if entry.exit_code is not None else ""
            note = ", cut at the output cap" if cut else ""
            click.echo(f"--- {entry.node} {stream} (attempt {entry.attempt}{code}{note}) ---",
                       err=True)
        if text:
            sys.stdout.write(text if text.endswith("\n") else text + "\n")
            sys.stdout.flush()


@cli.command("logs")
@click.argument("run_id", metavar="RUN")
@click.argument("node", required=False, metavar="[NODE]")
@click.option("--follow", "-f", is_flag=True, help="Print a running step's output as it is "
              "printed, and each log as it is recorded, until the run ends.")
@click.option("--stdout", "only_stdout", is_flag=True, help="Only standard output.")
@click.option("--stderr", "only_stderr", is_flag=True, help="Only standard error.")
@click.option("--json", "as_json", is_flag=True, help="The logs as JSON (JSON Lines with "
              "--follow).")
@click.pass_obj
def logs_cmd(ctx: Context, run_id: str, node: str | None, follow: bool, only_stdout: bool,
             only_stderr: bool, as_json: bool) -> None:
    """Show the stdout and stderr of a run's shell actions and command agents."""
    if only_stdout and only_stderr:
        raise InputError("--stdout and --stderr exclude each other; give neither for both "
                         "streams")
    streams = ("stdout",) if only_stdout else ("stderr",) if only_stderr else \
        ("stdout", "stderr")
    ws = workspace(ctx)

    def emit(entry: StepLog) -> None:
        if as_json:
            data = entry.to_json()
            for stream in ("stdout", "stderr"):
                if stream not in streams:
                    data.pop(stream)
                    data.pop(f"{stream}_truncated")
            click.echo(json.dumps(data, ensure_ascii=False))
        else:
            _print(entry, streams, headers=True)

    if follow:
        streamed: set[tuple[str | None, str]] = set()

        def live(chunk: LiveText) -> None:
            if chunk.stream not in streams:
                return
            if as_json:
                click.echo(json.dumps(chunk.to_json(), ensure_ascii=False))
                return
            if (chunk.attempt, chunk.stream) not in streamed:
                streamed.add((chunk.attempt, chunk.stream))
                click.echo(f"--- {chunk.node} {chunk.stream} (attempt {chunk.attempt}, "
                           "running) ---", err=True)
            sys.stdout.write(chunk.text)
            sys.stdout.flush()

        def recorded(entry: StepLog) -> None:
            if as_json:
                emit(entry)
            else:
                _print(entry, streams, headers=True, streamed=streamed)

        # A queued launch is waited for; a fan-out item (NODE[3]) is followed until its
        # row in the store ends.
        store = open_store(ws, read_only=True) if store_exists(ws) else None
        try:
            ended = await_start(ws.reader(), book(store) if store is not None else None, run_id,
                                clock=ws.clock, on_wait=lambda s: (
                click.echo(f"--- run {run_id} is {s}; waiting for it to start ---", err=True)))
            if ended is not None:
                click.echo(f"wfrun: run {run_id} ended {ended} before it started; it has no "
                           "logs", err=True)
                sys.exit(1)
            status = follow_logs(ws.reader(), run_id, node, recorded, clock=ws.clock,
                                 on_live=live, item_state=store_item_state(store, run_id)
                                 if store is not None and node and node.endswith("]")
                                 else None)
        finally:
            if store is not None:
                store.close()
        sys.exit(EXIT.get(status, 0))
    entries = run_logs(ws.reader(), run_id, node)
    # A step that is running has no recorded log yet: what it printed so far is live.
    running = [c for c in running_output(ws.reader(), run_id, node) if c.stream in streams]
    if as_json:
        click.echo(json.dumps({"run_id": run_id, "logs": [
            {k: v for k, v in e.to_json().items()
             if k.split("_")[0] in streams or k.split("_")[0] not in ("stdout", "stderr")}
            for e in entries], "running": [c.to_json() for c in running]},
            indent=2, ensure_ascii=False))
        return
    for entry in entries:
        emit(entry)
    for chunk in running:
        click.echo(f"--- {chunk.node} {chunk.stream} (attempt {chunk.attempt}, running; "
                   f"`wfrun logs {run_id} {chunk.node} --follow` goes on) ---", err=True)
        sys.stdout.write(chunk.text if chunk.text.endswith("\n") else chunk.text + "\n")
        sys.stdout.flush()
    if not entries and not running:
        where = f"node '{node}' of run {run_id}" if node else f"run {run_id}"
        click.echo(f"wfrun: {where} has no logs (only shell actions and command agents "
                   "record them)", err=True)
