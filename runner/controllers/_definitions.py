"""Controllers: a name, a reconcile function, a timeout and a spec schema.

`define_controller` is the Python API; `load_controller` turns a validated YAML
definition (runner.compiler._controllers) into the same object by importing its
reconcile hook.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from runner.compiler._controllers import (
    DEFAULT_RECONCILE_TIMEOUT,
    ControllerDefinition,
)
from runner.compiler._triggers import TriggerSpec

from ._resources import check_spec
from ._workflows import load_hook

if TYPE_CHECKING:
    from runner.store._controller_interface import Resource

    from ._conditions import Result
    from ._context import ReconcileContext

Reconcile = Callable[["ReconcileContext", "Resource"], "Result"]


@dataclass(frozen=True)
class Controller:
    name: str
    reconcile: Reconcile
    timeout: float | None = DEFAULT_RECONCILE_TIMEOUT
    spec_schema: Mapping[str, Any] | None = None
    initial_status: Mapping[str, Any] = field(default_factory=dict)
    resync: float | None = None
    triggers: tuple[TriggerSpec, ...] = ()  # enqueue keys (a host fires them)

    def check_spec(self, spec: Any) -> dict[str, Any]:
        return check_spec(self.name, self.spec_schema, spec)


def define_controller(name: str, reconcile: Reconcile, *,
                      timeout: float | None = DEFAULT_RECONCILE_TIMEOUT,
                      spec_schema: Mapping[str, Any] | None = None,
                      initial_status: Mapping[str, Any] | None = None,
                      resync: float | None = None) -> Controller:
    if not name:
        raise ValueError("a controller needs a name")
    return Controller(name, reconcile, timeout, spec_schema, dict(initial_status or {}), resync)


def load_controller(definition: ControllerDefinition) -> Controller:
    fn = load_hook(definition.reconcile)
    return Controller(definition.name, fn, definition.timeout, definition.spec_schema,
                      definition.initial_status, definition.resync, definition.triggers)
