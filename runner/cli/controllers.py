"""`wfrun controllers` and the `wfrun controller` group: resources and the reconcile loop."""

from __future__ import annotations

import json
import signal
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from runner.compiler import render_text
from runner.compiler._yamlio import YamlProblem, load
from runner.errors import InputError
from runner.host.runtime._controllers import (
    apply_spec,
    cancel_children,
    discover,
    find_controller,
    make_manager,
    request_deletion,
    resource_view,
)

from .app import cli
from .context import Context, not_loaded
from .runs import agent_option, opened_store, workspace

if TYPE_CHECKING:
    from runner.compiler._controllers import ControllerDefinition
    from runner.host.runtime._controllers import ControllerEntry
    from runner.host.runtime._local import ProjectStore, Workspace

VERBS = ("list", "get", "apply", "reconcile", "delete", "events", "cancel")
USAGE = ("usage: wfrun controller run [--once] | list NAME | get NAME KEY | "
         "apply NAME KEY FILE | reconcile NAME KEY | delete NAME KEY | events NAME KEY | "
         "cancel NAME KEY (see `wfrun controller VERB --help`)")


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


class ControllerGroup(click.Group):
    """`wfrun controller VERB ...` with per-verb help; usage mistakes are one line.

    The older order `wfrun controller NAME VERB ...` still works: when the first
    word is not a verb and the second is, the two swap. (A controller named like a
    verb, say `list`, needs the new order: `wfrun controller get list KEY`.)
    """

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if (len(args) >= 2 and args[0] not in self.commands and not args[0].startswith("-")
                and args[1] in VERBS):
            args = [args[1], args[0], *args[2:]]
        try:
            return super().parse_args(ctx, args)
        except click.UsageError as exc:
            raise _usage_error(exc) from None

    def resolve_command(self, ctx: click.Context, args: list[str]
                        ) -> tuple[str | None, click.Command | None, list[str]]:
        if (args and args[0] not in self.commands and not args[0].startswith("-")
                and not ctx.resilient_parsing):  # shell completion: let click decide
            # parse_args already tried the older order, so neither word is a verb.
            words = (f"neither '{args[0]}' nor '{args[1]}' is a verb" if len(args) > 1
                     else f"unknown verb '{args[0]}'")
            from runner.compiler._diagnostics import did_you_mean

            hint = did_you_mean(args[0], self.commands)
            raise InputError(f"{words}; {hint + ' ' if hint else ''}{USAGE}")
        return super().resolve_command(ctx, args)

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except click.UsageError as exc:  # no verb, or a verb's arguments or options
            raise _usage_error(exc) from None


def _usage_error(exc: click.UsageError) -> InputError:
    """Click's usage error as one line (exit 2) that names the form to use."""
    message = exc.format_message().strip().rstrip(".")
    message = message[:1].lower() + message[1:]
    sub = exc.ctx
    if sub is not None and sub.command is not None and not isinstance(sub.command,
                                                                      click.Group):
        pieces = " ".join(sub.command.collect_usage_pieces(sub))
        return InputError(f"{message}; usage: {sub.command_path} {pieces} "
                          f"(see `{sub.command_path} --help`)")
    return InputError(f"{message}; {USAGE}")


@cli.group("controller", cls=ControllerGroup, no_args_is_help=False)
def controller_group() -> None:
    """Manage controller resources, or run the controller manager in the foreground.

    \b
    wfrun controller list NAME              resources of one controller
    wfrun controller get NAME KEY           one resource: spec, status, effects, children
    wfrun controller apply NAME KEY FILE    create or update a spec (JSON or YAML)
    wfrun controller reconcile NAME KEY     wake a key
    wfrun controller delete NAME KEY        request deletion
    wfrun controller events NAME KEY        the last 50 lifecycle events
    wfrun controller cancel NAME KEY        cancel a resource's running child workflows
    wfrun controller run [--once]           run the manager

    The older order `wfrun controller NAME VERB ...` is accepted too.
    """


def json_option(f: Callable[..., Any]) -> Callable[..., Any]:
    return click.option("--json", "as_json", is_flag=True,
                        help="Print JSON on stdout instead of text.")(f)


def _controller(ctx: Context, name: str) -> tuple[ProjectStore, ControllerDefinition]:
    """The store and the definition of the one controller NAME (NotFoundError, exit 3,
    when no controller has that name; DefinitionInvalid when it does not compile).

    Only NAME's file is compiled and no manager is built: each verb reads or writes
    rows (issue 34 item 11, cold start)."""
    ws = workspace(ctx)
    store = opened_store(ws)
    return store, find_controller(ws, ctx.user_dir, name)


@controller_group.command("list", short_help="List a controller's resources.")
@click.argument("name")
@json_option
@click.pass_obj
def list_cmd(ctx: Context, name: str, as_json: bool) -> None:
    """List the resources of controller NAME: key, generation, version, Ready, phase."""
    store, _ = _controller(ctx, name)
    rows = [{"key": r.key, "generation": r.generation,
             "resource_version": r.resource_version,
             "phase": (r.status.get("controller_status") or {}).get("phase"),
             "ready": next((c.get("status") for c in r.status.get("conditions") or []
                            if c.get("type") == "Ready"), "Unknown")}
            for r in store.resources.list(name)]
    if as_json:
        click.echo(json.dumps({"controller": name, "resources": rows}, indent=2))
        return
    for row in rows:
        click.echo(f"{row['key']:32} gen {row['generation']:<3} ready {row['ready']:8}"
                   f" {row['phase'] or ''}")


@controller_group.command("get", short_help="Show one resource.")
@click.argument("name")
@click.argument("key")
@json_option
@click.pass_obj
def get_cmd(ctx: Context, name: str, key: str, as_json: bool) -> None:
    """Show resource KEY of controller NAME: metadata, spec, status, effects and child
    workflow requests (exit 3 when it does not exist)."""
    store, _ = _controller(ctx, name)
    view = resource_view(store, name, key)
    click.echo(json.dumps(view, indent=2) if as_json else _describe(view))


@controller_group.command("apply", short_help="Create or update a resource's spec.")
@click.argument("name")
@click.argument("key")
@click.argument("file", metavar="FILE")
@json_option
@click.pass_obj
def apply_cmd(ctx: Context, name: str, key: str, file: str, as_json: bool) -> None:
    """Create or update the spec of resource KEY from FILE (JSON or YAML).

    The spec is checked against the controller's schema first: a mismatch is one
    line and exit 2. Only a changed spec bumps the generation and wakes the key.
    """
    store, definition = _controller(ctx, name)
    resource = apply_spec(store, definition, key, _read_spec(file))
    out = {"key": key, "generation": resource.generation,
           "resource_version": resource.resource_version}
    click.echo(json.dumps(out) if as_json else
               f"applied {name}/{key} (generation {resource.generation})")


@controller_group.command("reconcile", short_help="Wake a resource now.")
@click.argument("name")
@click.argument("key")
@json_option
@click.pass_obj
def reconcile_cmd(ctx: Context, name: str, key: str, as_json: bool) -> None:
    """Wake resource KEY so a manager reconciles it now (also after a PermanentError)."""
    store, _ = _controller(ctx, name)
    store.reconcile_queue.enqueue(name, key)  # what the manager's `enqueue` does
    click.echo(json.dumps({"controller": name, "key": key, "queued": True}) if as_json
               else f"queued {name}/{key} for reconciliation")


@controller_group.command("delete", short_help="Request deletion of a resource.")
@click.argument("name")
@click.argument("key")
@json_option
@click.pass_obj
def delete_cmd(ctx: Context, name: str, key: str, as_json: bool) -> None:
    """Request deletion of resource KEY; it goes once its finalizers are cleared."""
    store, _ = _controller(ctx, name)
    resource = request_deletion(store, name, key)
    click.echo(json.dumps({"controller": name, "key": key,
                           "deletion_timestamp": resource.deletion_timestamp}) if as_json
               else f"deletion of {name}/{key} requested")


@controller_group.command("events", short_help="Show a resource's lifecycle events.")
@click.argument("name")
@click.argument("key")
@json_option
@click.pass_obj
def events_cmd(ctx: Context, name: str, key: str, as_json: bool) -> None:
    """Show the last 50 lifecycle events of resource KEY (passes, failures, effects)."""
    store, _ = _controller(ctx, name)
    events = [{"seq": e.seq, "type": e.type, "reconcile_id": e.reconcile_id,
               "payload": e.payload, "recorded_at": e.recorded_at}
              for e in store.controller_events.read(controller=name, key=key)][-50:]
    if as_json:
        click.echo(json.dumps({"events": events}, indent=2))
        return
    for e in events:
        click.echo(f"{e['seq']:>6} {e['type']:22} {json.dumps(e['payload'])[:120]}")


@controller_group.command("cancel", short_help="Cancel a resource's running children.")
@click.argument("name")
@click.argument("key")
@json_option
@click.pass_obj
def cancel_cmd(ctx: Context, name: str, key: str, as_json: bool) -> None:
    """Cancel the running child workflows of resource KEY of controller NAME.

    A queued or parked child is cancelled at once; a running one is asked to stop
    and its runner (this machine's `wfrun controller run` or `wfrun host`) cancels
    it at the next safe point. Each request becomes `failed` and the resource is
    woken, so its next pass sees that. Nothing else is touched: other resources,
    the resource's queue row and other runs stay as they are.
    """
    store, _ = _controller(ctx, name)
    cancelled = cancel_children(workspace(ctx), store, name, key)
    if as_json:
        click.echo(json.dumps({"controller": name, "key": key,
                               "children": [c.to_json() for c in cancelled]}, indent=2))
        return
    if not cancelled:
        click.echo(f"{name}/{key} has no running child workflows")
    for c in cancelled:
        click.echo(f"{c.outcome:16} {c.request_key} {c.workflow} run {c.run_id}: {c.message}")


@controller_group.command("run", short_help="Run the controller manager.")
@click.option("--once", is_flag=True,
              help="Process what is ready (and the child runs it starts), then exit.")
@agent_option
@click.pass_obj
def run_cmd(ctx: Context, once: bool, agent: str | None) -> None:
    """Run the controller manager in the foreground for every valid controller.

    Without --once it runs until Ctrl-C or SIGTERM, which stops it gracefully.
    """
    ws = workspace(ctx)
    store = opened_store(ws)
    _run(ctx, ws, store, discover(ws, ctx.user_dir), once, agent)


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


def _run(ctx: Context, ws: Workspace, store: ProjectStore, entries: list[ControllerEntry],
         once: bool,
         agent: str | None) -> None:
    manager = make_manager(ws, store, entries, executor=ctx.executor(agent, ws.clock),
                           on_skip=not_loaded)
    if once:
        # Child runs started here finish here (and their parents get the follow-up
        # pass): exiting under them would leave interrupted runs to redo.
        # A child that ends wakes its parent before it stops counting as busy, so a
        # pass after "not busy" sees every wake-up; stop only when such a pass found
        # nothing to do and started nothing.
        done = 0
        while True:
            was_busy = manager.children is not None and manager.children.busy
            ran = manager.run_until_idle()
            done += ran
            if not was_busy and not ran:
                break
            if not ran:
                ws.clock.sleep(0.05)
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
