"""Controllers in a project: discovery, validation, a manager wired to the store.

The CLI and the standalone host call these; they hold no state of their own.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from runner.compiler import build_catalog, render_text
from runner.controllers._resources import apply_resource, request_deletion, unknown_controller
from runner.errors import ConflictError, DefinitionInvalid, InputError, NotFoundError

from ._local import Workspace

if TYPE_CHECKING:
    # The manager, the engine and the launch side load when a manager or a child
    # launcher is built: `wfrun controller list|get|apply|...` builds neither (issue
    # 34 item 11, cold start).
    from runner.compiler._controllers import ControllerCompileResult, ControllerDefinition
    from runner.controllers import Controller, ControllerManager, ManagerConfig
    from runner.engine import AgentStepExecutor
    from runner.launch import LaunchCoordinator
    from runner.store import Store
    from runner.store._controller_interface import ControllerStore, Resource

    from ._children import LocalChildLauncher


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
    """Every controller of the catalog, each compiled (`wfrun controllers`, a host)."""
    from runner.compiler._controllers import compile_controller

    catalog = build_catalog("controllers", ws.project_root, user_dir)
    out = []
    for entry in catalog.entries:
        result = compile_controller(entry.path, display=entry.display,
                                    builtin=entry.origin == "builtin")
        out.append(ControllerEntry(entry.name, entry.origin, entry.display, entry.shadowed_by,
                                   result))
    return out


def find_controller(ws: Workspace, user_dir: Path | None, name: str) -> ControllerDefinition:
    """The valid definition of the active controller `name`, the only one compiled.

    NotFoundError (exit 3, with a did-you-mean) when the catalog has no such name;
    DefinitionInvalid when its file does not compile. Its hook is not imported: a
    command that reads or writes resource rows runs no user code."""
    from runner.compiler._controllers import compile_controller

    catalog = build_catalog("controllers", ws.project_root, user_dir)
    active = [e for e in catalog.entries if e.shadowed_by is None]
    entry = next((e for e in active if e.name == name), None)
    if entry is None:
        raise unknown_controller(name, [e.name for e in active])
    result = compile_controller(entry.path, display=entry.display,
                                builtin=entry.origin == "builtin")
    if not result.valid or result.definition is None:
        raise DefinitionInvalid(f"controller '{name}' is invalid: {_first_problem(result)}")
    return result.definition


def apply_spec(store: ControllerStore, definition: ControllerDefinition, key: str,
               spec: Any) -> Resource:
    """`wfrun controller apply`: what the manager's `apply` does, from the definition."""
    return apply_resource(store, definition.name, key, spec, schema=definition.spec_schema,
                          initial_status=definition.initial_status)


def _first_problem(result: ControllerCompileResult) -> str:
    first = result.diagnostics[0] if result.diagnostics else None
    return render_text([first]).splitlines()[0] if first else "invalid"


#: Told (name, one-line reason) of each controller a host leaves out.
Skipped = Callable[[str, str], None]


def load_all(entries: list[ControllerEntry], *, on_skip: Skipped | None = None
             ) -> list[Controller]:
    """Load every active, valid controller. One bad file (invalid, or a hook that fails
    to import) is left out and told to `on_skip`, and the others load: it must not
    stop a host."""
    from runner.controllers import load_controller

    out = []
    for entry in entries:
        if entry.shadowed_by is not None:
            continue
        if not entry.result.valid or entry.result.definition is None:
            if on_skip is not None:
                on_skip(entry.name, _first_problem(entry.result))
            continue
        try:
            out.append(load_controller(entry.result.definition))
        except Exception as exc:  # the hook's own code ran at import: anything can fail
            if on_skip is not None:
                on_skip(entry.name, " ".join(str(exc).split()) or type(exc).__name__)
    return out


def make_manager(ws: Workspace, store: ControllerStore, entries: list[ControllerEntry], *,
                 executor: AgentStepExecutor | None = None,
                 config: ManagerConfig | None = None,
                 on_skip: Skipped | None = None) -> ControllerManager:
    from runner.controllers import ChildWorkflows, ControllerManager

    children = ChildWorkflows(store, ws.workflows, ws.runs_dir, clock=ws.clock,
                              launcher=child_launcher(ws, store, executor),
                              rows=ws.bundle_rows(store))
    return ControllerManager(store, load_all(entries, on_skip=on_skip), clock=ws.clock,
                             config=config, children=children)


def child_coordinator(ws: Workspace, store: ControllerStore,
                      executor: AgentStepExecutor | None = None) -> LaunchCoordinator:
    """The launch coordinator of controller children (the store's launch side)."""
    from ._coordinators import build_coordinator

    launches = cast("Store", store)  # one SQLite file holds both sides
    return build_coordinator(ws, launches, "child", executor=executor)


def child_launcher(ws: Workspace, store: ControllerStore,
                   executor: AgentStepExecutor | None = None,
                   max_workers: int | None = None) -> LocalChildLauncher:
    """Child runs as launch rows in the same store, executed in this process."""
    from runner.engine._processes import reap_dead_registries

    from ._children import DEFAULT_CHILD_WORKERS, LocalChildLauncher

    return LocalChildLauncher(child_coordinator(ws, store, executor),
                              max_workers=(DEFAULT_CHILD_WORKERS if max_workers is None
                                           else max_workers),
                              reap=lambda: reap_dead_registries(ws.children_dir))


__all__ = ["ChildCancel", "ControllerEntry", "apply_spec", "cancel_children", "child_launcher",
           "discover", "find_controller", "load_all", "make_manager", "request_deletion",
           "resource_view"]


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
