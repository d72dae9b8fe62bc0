"""Controllers in a project: discovery, validation, a manager wired to the store.

The CLI and the standalone host call these; they hold no state of their own.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from runner.compiler import build_catalog, render_text
from runner.compiler._controllers import ControllerCompileResult, compile_controller
from runner.controllers import (
    ChildWorkflows,
    Controller,
    ControllerManager,
    ManagerConfig,
    load_controller,
)
from runner.controllers._definitions import unknown_controller
from runner.engine import AgentStepExecutor
from runner.engine._processes import reap_dead_registries
from runner.errors import ConflictError, DefinitionInvalid, InputError, NotFoundError
from runner.launch import LaunchCoordinator
from runner.store import Store
from runner.store._controller_interface import ControllerStore

from ._children import DEFAULT_CHILD_WORKERS, LocalChildLauncher
from ._coordinators import build_coordinator
from ._local import Workspace


@dataclass(frozen=True)
class ControllerEntry:
    name: str
    origin: str
    path: str
    shadowed_by: str | None
    result: ControllerCompileResult

    def to_json(self) -> dict[str, Any]:
        d = self.result.definition
        return {"name": self.name, "source": self.origin, "path": self.path,
                "shadowed_by": self.shadowed_by, "valid": self.result.valid,
                "digest": d.digest if d and self.result.valid else None,
                "diagnostics": [x.to_json() for x in self.result.diagnostics]}


def discover(ws: Workspace, user_dir: Path | None = None) -> list[ControllerEntry]:
    catalog = build_catalog("controllers", ws.project_root, user_dir)
    out = []
    for entry in catalog.entries:
        result = compile_controller(entry.path, display=entry.display,
                                    builtin=entry.origin == "builtin")
        out.append(ControllerEntry(entry.name, entry.origin, entry.display, entry.shadowed_by,
                                   result))
    return out


#: Told (name, one-line reason) of each controller a host leaves out.
Skipped = Callable[[str, str], None]


def load_all(entries: list[ControllerEntry], *, strict: bool = False,
             on_skip: Skipped | None = None) -> list[Controller]:
    """Load every active, valid controller; with `strict`, an invalid one is an error.
    Otherwise one bad file (invalid, or a hook that fails to import) is left out and
    told to `on_skip`, and the others load: it must not stop a host."""
    out = []
    for entry in entries:
        if entry.shadowed_by is not None:
            continue
        if not entry.result.valid or entry.result.definition is None:
            first = entry.result.diagnostics[0] if entry.result.diagnostics else None
            where = render_text([first]).splitlines()[0] if first else "invalid"
            if strict:
                raise DefinitionInvalid(f"controller '{entry.name}' is invalid: {where}")
            if on_skip is not None:
                on_skip(entry.name, where)
            continue
        try:
            out.append(load_controller(entry.result.definition))
        except Exception as exc:  # the hook's own code ran at import: anything can fail
            if strict:
                raise
            if on_skip is not None:
                on_skip(entry.name, " ".join(str(exc).split()) or type(exc).__name__)
    return out


def make_manager(ws: Workspace, store: ControllerStore, entries: list[ControllerEntry], *,
                 only: str | None = None, executor: AgentStepExecutor | None = None,
                 config: ManagerConfig | None = None,
                 on_skip: Skipped | None = None) -> ControllerManager:
    controllers = load_all([e for e in entries if only is None or e.name == only],
                           strict=only is not None, on_skip=on_skip)
    if only is not None and not controllers:
        raise unknown_controller(only, [e.name for e in entries if e.shadowed_by is None])
    manager: ControllerManager
    children = ChildWorkflows(store, ws, ws.runs_dir, clock=ws.clock,
                              launcher=child_launcher(ws, store, executor),
                              rows=ws.bundle_rows(store))
    manager = ControllerManager(store, controllers, clock=ws.clock, config=config,
                                children=children)
    return manager


def child_coordinator(ws: Workspace, store: ControllerStore,
                      executor: AgentStepExecutor | None = None) -> LaunchCoordinator:
    """The launch coordinator of controller children (the store's launch side)."""
    launches: Store = cast(Store, store)  # one SQLite file holds both sides
    return build_coordinator(ws, launches, "child", executor=executor)


def child_launcher(ws: Workspace, store: ControllerStore,
                   executor: AgentStepExecutor | None = None,
                   max_workers: int = DEFAULT_CHILD_WORKERS) -> LocalChildLauncher:
    """Child runs as launch rows in the same store, executed in this process."""
    return LocalChildLauncher(child_coordinator(ws, store, executor),
                              max_workers=max_workers,
                              reap=lambda: reap_dead_registries(ws.children_dir))


@dataclass(frozen=True)
class ChildCancel:
    """What `cancel_children` did to one running child request."""

    request_key: str
    workflow: str
    run_id: str | None
    outcome: str  # cancelled | cancel_requested | ended | not_queued
    message: str

    def to_json(self) -> dict[str, Any]:
        return {"request_key": self.request_key, "workflow": self.workflow,
                "run_id": self.run_id, "outcome": self.outcome, "message": self.message}


def cancel_children(ws: Workspace, store: ControllerStore, controller: str,
                    key: str) -> list[ChildCancel]:
    """Cancel the running child workflows of one resource (`wfrun controller cancel`).

    Each running request's launch row is cancelled: a queued or parked one at once
    (the store settles its request `failed` and wakes the parent in that
    transaction); a running one is asked to stop (its runner, in this or another
    process, cancels it at the next safe point and the same settlement follows);
    one whose runner died is taken over and cancelled. Nothing else is touched: no
    other resource's children, no queue row, no other launch."""
    resource = store.resources.get(controller, key)
    if resource is None:
        raise NotFoundError(f"no {controller} resource '{key}'")
    coordinator = child_coordinator(ws, store)
    done: list[ChildCancel] = []
    for req in store.workflow_requests.list(resource.uid, states=["running"]):
        run_id = req.run_id
        if run_id is None:
            continue
        try:
            record = coordinator.cancel(run_id)
        except NotFoundError:
            outcome, message = "not_queued", (
                "its run was never queued (the process that asked for it died); the "
                "next pass records the attempt interrupted")
        except (ConflictError, InputError) as exc:
            outcome, message = "ended", exc.message
        else:
            if record.status == "cancelled":
                outcome, message = "cancelled", "cancelled"
            else:
                outcome, message = "cancel_requested", (
                    "its runner stops it at the next safe point")
        done.append(ChildCancel(req.request_key, req.workflow, run_id, outcome, message))
    return done


def resource_view(store: ControllerStore, controller: str, key: str) -> dict[str, Any]:
    resource = store.resources.get(controller, key)
    if resource is None:
        raise NotFoundError(f"no {controller} resource '{key}'")
    return {
        "metadata": {"uid": resource.uid, "controller": resource.controller,
                     "key": resource.key, "resource_version": resource.resource_version,
                     "generation": resource.generation,
                     "deletion_timestamp": resource.deletion_timestamp,
                     "finalizers": list(resource.finalizers)},
        "spec": resource.spec,
        "status": resource.status,
        "effects": [{"key": e.effect_key, "kind": e.kind, "state": e.state,
                     "generation": e.generation, "external_ref": e.external_ref,
                     "error": e.error} for e in store.effects.list(resource.uid)],
        "workflows": [{"request_key": r.request_key, "workflow": r.workflow,
                       "run_id": r.run_id, "state": r.state, "attempt": r.attempt,
                       "error": r.error}
                      for r in store.workflow_requests.list(resource.uid)],
    }
