"""A resource's spec check, apply and deletion request, without a manager.

The manager's `apply` and `delete` are these, and `wfrun controller apply|delete`
calls them directly: a command that writes one row needs the controller's schema
and initial status, not its reconcile hook, the workers or the engine (issue 34
item 11, cold start). Imports no other module of this package.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from runner.compiler._diagnostics import did_you_mean
from runner.errors import InputError, NotFoundError

if TYPE_CHECKING:
    from runner.store._controller_interface import ControllerStore, Resource


def unknown_controller(name: str, known: Iterable[str]) -> NotFoundError:
    """The error for a controller name that is not loaded, with a did-you-mean."""
    hint = did_you_mean(name, known)
    return NotFoundError(f"no controller named '{name}'; {hint + ' ' if hint else ''}"
                         "`wfrun controllers` lists them")


def check_spec(controller: str, schema: Mapping[str, Any] | None, spec: Any) -> dict[str, Any]:
    """`spec` when it is a mapping that matches `schema`; else InputError (exit 2)."""
    if not isinstance(spec, dict):
        raise InputError(f"a {controller} spec must be a mapping")
    if schema is not None:
        from runner.compiler._jsonschemas import validation_errors

        errors = validation_errors(dict(schema), spec)
        if errors:
            raise InputError(f"spec does not match controller '{controller}': "
                             + "; ".join(errors))
    return spec


def apply_resource(store: ControllerStore, controller: str, key: str, spec: Any, *,
                   schema: Mapping[str, Any] | None,
                   initial_status: Mapping[str, Any]) -> Resource:
    """Create or update the spec of `controller`/`key` (checked against `schema`)."""
    checked = check_spec(controller, schema, spec)
    # `initial_status` is the controller's own part of status until the first pass;
    # observed_generation 0 says "never reconciled".
    initial = {"observed_generation": 0, "conditions": [],
               "controller_status": dict(initial_status), "workflow_run": None}
    try:
        resource = store.resources.apply(controller, key, checked, initial)
    except ValueError as exc:
        raise InputError(str(exc)) from None
    store.controller_events.append(controller, key, "resource_applied",
                                   {"generation": resource.generation})
    return resource


def request_deletion(store: ControllerStore, controller: str, key: str) -> Resource:
    """Mark `controller`/`key` for deletion (NotFoundError when there is no such row)."""
    resource = store.resources.request_deletion(controller, key)
    if resource is None:
        raise NotFoundError(f"no {controller} resource '{key}'")
    store.controller_events.append(controller, key, "deletion_requested", {})
    return resource
