"""One agent session wired to a project: store, launch coordinator and controller.

Every real adapter (`wfrun bridge`, `runner.AgentSession`) needs the same parts
around its `Host`: the project's store, a coordinator whose agent steps go into
the session (the `session` executor) and whose `notify` nodes write the outbox,
and a `SessionController` with the catalog lister and the status view. Built here
once so the adapters differ only in how they talk to their agent runtime.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from runner.clock import Clock
from runner.compiler._schemamessages import cut
from runner.errors import WfrunError
from runner.host.runtime._coordinators import build_coordinator
from runner.host.runtime._launches import launch_status
from runner.host.runtime._local import Workspace, open_store, store_choice, store_path
from runner.launch import LaunchCoordinator
from runner.store import SqliteStore, Store

from ._controller import SessionController, SessionExecutor
from ._protocol import Host

LIST_PAGE = 20
MAX_DESCRIPTION = 300  # characters of a workflow's description in `list`
MAX_SCHEMA = 600  # characters of its input schema (compact JSON)


@dataclass
class SessionRuntime:
    """What an adapter holds for one session; `close()` releases the store."""

    ws: Workspace
    store: Store
    coordinator: LaunchCoordinator
    controller: SessionController

    def close(self) -> None:
        self.store.close()


def open_session(host: Host, ws: Workspace, *, store_clock: Clock | None = None) -> SessionRuntime:
    """Wire `host` to the project of `ws`. `store_clock` times leases (default the
    workspace clock; tests pass a `FileClock` shared with their process)."""
    if store_clock is None or store_choice(ws).url is not None:
        store = open_store(ws)  # Postgres times leases on the database clock
    else:
        store = SqliteStore(store_path(ws), clock=store_clock)
    coordinator = build_coordinator(ws, store, "session")
    options = coordinator.options
    controller = SessionController(host, coordinator, lister=lambda offset: list_text(ws, offset),
                                   status=lambda run_id: launch_status(ws, store, run_id))
    options.executor = lambda _record: SessionExecutor(controller)
    options.notifications = controller.notification_sink()
    return SessionRuntime(ws, store, coordinator, controller)


def list_text(ws: Workspace, offset: int = 0) -> str:
    """The `list` action's reply: per workflow the session can start, its name, origin
    and description, and the input it takes (its JSON Schema), each bounded."""
    entries = ws.definitions().active
    page = entries[offset:offset + LIST_PAGE]
    if not page:
        return "no workflows found" if not entries else f"no workflows after offset {offset}"
    lines = []
    for entry in page:
        lines.extend(_described(ws, entry.name, entry.origin))
    rest = len(entries) - offset - len(page)
    if rest > 0:
        lines.append(f"... {rest} more; call list with offset {offset + len(page)}")
    return "\n".join(lines)


def _described(ws: Workspace, name: str, origin: str) -> list[str]:
    try:
        definition, _ = ws.compile(name)
    except WfrunError:
        return [f"- {name} ({origin}): invalid; fix the file before starting it"]
    about = " ".join((definition.description or definition.title or "").split())
    head = f"- {name} ({origin})" + (f": {cut(about, MAX_DESCRIPTION)}" if about else "")
    schema = definition.input_schema
    if schema is None:
        return [head, "  input: any (the workflow declares no input schema)"]
    text = json.dumps(schema, ensure_ascii=False, separators=(",", ":"), sort_keys=True)
    if len(text) > MAX_SCHEMA:
        text = cut(text, MAX_SCHEMA) + " (cut; the workflow file has the whole schema)"
    return [head, f"  input: {text}"]


def status_of(runtime: SessionRuntime, run_id: str) -> dict[str, Any]:
    return launch_status(runtime.ws, runtime.store, run_id)
