"""`wfrun controllers` and `wfrun controller ...`: resources and the reconcile loop."""

from __future__ import annotations

import json
import signal
import threading
import time
from pathlib import Path
from typing import Any

import click

from runner.compiler import render_text
from runner.compiler.yamlio import YamlProblem, load
from runner.errors import InputError
from runner.host.controllers import discover, make_manager, resource_view
from runner.host.local import open_store

from .app import cli
from .context import Context
from .runs import agent_option, workspace

VERBS = ("list", "get", "apply", "reconcile", "delete", "events")
USAGE = ("usage: wfrun controller NAME list | get KEY | apply KEY FILE | reconcile KEY | "
         "delete KEY | events KEY;  or: wfrun controller run [--once]")


@cli.command("controllers")
@click.option("--json", "as_json", is_flag=True)
@click.pass_obj
def controllers_cmd(ctx: Context, as_json: bool) -> None:
    """List controllers from the project, the user folder and the built-ins."""
    entries = discover(workspace(ctx), ctx.user_dir)
    if as_json:
        click.echo(json.dumps({"controllers": [e.to_json() for e in entries]}, indent=2))
        return
    for e in entries:
        mark = "ok " if e.result.valid else "bad"
        shadow = f"  (shadowed by {e.shadowed_by})" if e.shadowed_by else ""
        click.echo(f"{mark} {e.name:24} {e.origin:8} {e.path}{shadow}")
        if not e.result.valid:
            click.echo(render_text(e.result.diagnostics, {e.path: e.result.text or ""}),
                       err=True)


def _read_spec(path: str) -> Any:
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise InputError(f"cannot read spec file '{path}': {exc.strerror}") from None
    try:
        return load(text, path)
    except YamlProblem as problem:
        d = problem.diagnostic
        raise InputError(f"{path}:{d.line}:{d.column}: {d.message}") from None


@cli.command("controller", context_settings={"ignore_unknown_options": False})
@click.argument("args", nargs=-1, metavar="NAME VERB [KEY] [FILE] | run")
@click.option("--json", "as_json", is_flag=True)
@click.option("--once", is_flag=True, help="run: process what is ready, then exit.")
@agent_option
@click.pass_obj
def controller_cmd(ctx: Context, args: tuple[str, ...], as_json: bool, once: bool,
                   agent: str | None) -> None:
    """Manage controller resources, or run the controller manager in the foreground."""
    if not args:
        raise InputError(USAGE)
    ws = workspace(ctx)
    store = open_store(ws)
    entries = discover(ws, ctx.user_dir)
    if args[0] == "run":
        if len(args) != 1:
            raise InputError(USAGE)
        _run(ctx, ws, store, entries, once, agent)
        return
    if len(args) < 2 or args[1] not in VERBS:
        raise InputError(USAGE)
    name, verb, rest = args[0], args[1], args[2:]
    need = {"list": 0, "get": 1, "reconcile": 1, "delete": 1, "events": 1, "apply": 2}[verb]
    if len(rest) != need:
        raise InputError(USAGE)
    manager = make_manager(ws, store, entries, only=name)
    if verb == "list":
        rows = [{"key": r.key, "generation": r.generation,
                 "resource_version": r.resource_version,
                 "phase": (r.status.get("controller_status") or {}).get("phase"),
                 "ready": next((c.get("status") for c in r.status.get("conditions") or []
                                if c.get("type") == "Ready"), "Unknown")}
                for r in store.resources.list(name)]
        if as_json:
            click.echo(json.dumps({"controller": name, "resources": rows}, indent=2))
        else:
            for row in rows:
                click.echo(f"{row['key']:32} gen {row['generation']:<3} ready {row['ready']:8}"
                           f" {row['phase'] or ''}")
        return
    key = rest[0]
    if verb == "apply":
        resource = manager.apply(name, key, _read_spec(rest[1]))
        out = {"key": key, "generation": resource.generation,
               "resource_version": resource.resource_version}
        click.echo(json.dumps(out) if as_json else
                   f"applied {name}/{key} (generation {resource.generation})")
    elif verb == "get":
        view = resource_view(store, name, key)
        click.echo(json.dumps(view, indent=2) if as_json else _describe(view))
    elif verb == "reconcile":
        manager.enqueue(name, key)
        click.echo(f"queued {name}/{key} for reconciliation")
    elif verb == "delete":
        manager.delete(name, key)
        click.echo(f"deletion of {name}/{key} requested")
    else:
        events = [{"seq": e.seq, "type": e.type, "reconcile_id": e.reconcile_id,
                   "payload": e.payload, "recorded_at": e.recorded_at}
                  for e in store.controller_events.read(controller=name, key=key)][-50:]
        if as_json:
            click.echo(json.dumps({"events": events}, indent=2))
        else:
            for e in events:
                click.echo(f"{e['seq']:>6} {e['type']:22} {json.dumps(e['payload'])[:120]}")


def _describe(view: dict[str, Any]) -> str:
    meta, status = view["metadata"], view["status"]
    lines = [f"{meta['controller']}/{meta['key']}  uid {meta['uid']}  generation "
             f"{meta['generation']}  version {meta['resource_version']}"]
    for c in status.get("conditions") or []:
        lines.append(f"  {c['type']}={c['status']} {c['reason']} {c.get('message', '')} "
                     f"(gen {c.get('observed_generation')})")
    if status.get("controller_status"):
        lines.append(f"  status: {json.dumps(status['controller_status'])}")
    for e in view["effects"]:
        lines.append(f"  effect {e['key']} {e['kind']} {e['state']}")
    for w in view["workflows"]:
        lines.append(f"  workflow {w['request_key']} {w['workflow']} {w['state']} "
                     f"run {w['run_id']}")
    return "\n".join(lines)


def _run(ctx: Context, ws: Any, store: Any, entries: Any, once: bool,
         agent: str | None) -> None:
    manager = make_manager(ws, store, entries, executor=ctx.executor(agent, ws.clock))
    if once:
        # Child runs started here finish here (and their parents get the follow-up
        # pass): exiting under them would leave interrupted runs to redo.
        done = manager.run_until_idle()
        while manager.children is not None and manager.children.busy:
            time.sleep(0.05)
            done += manager.run_until_idle()
        click.echo(f"processed {done} reconcile pass{'es' if done != 1 else ''}", err=True)
        return
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    manager.start()
    click.echo(f"controller manager running ({len(manager.controllers)} controllers); "
               "Ctrl-C stops it", err=True)
    stop.wait()
    manager.stop()
    click.echo("controller manager stopped", err=True)
