"""What a reconciler receives: the resource, effects, child workflows and results."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from runner.store._controller_interface import Resource

from ._conditions import Condition, Result, StatusPatch
from ._effects import Effects
from ._workflows import ChildView, ChildWorkflows


class Workflows:
    """`ctx.workflows`: child workflow requests of this resource."""

    def __init__(self, children: ChildWorkflows | None, resource: Resource) -> None:
        self._children = children
        self._resource = resource

    def ensure(self, request_key: str, workflow: str, input: Any = None) -> ChildView:
        if self._children is None:
            raise RuntimeError("this manager has no child workflow runner configured")
        return self._children.ensure(self._resource, request_key, workflow,
                                     {} if input is None else input)


@dataclass
class ReconcileContext:
    resource: Resource
    effects: Effects
    workflows: Workflows
    reconcile_id: str
    cancelled: threading.Event

    @staticmethod
    def patch(controller_status: Mapping[str, Any] | None = None,
              conditions: tuple[Condition, ...] | list[Condition] = (),
              workflow_run: Any = StatusPatch.workflow_run,
              finalizers: list[str] | tuple[str, ...] | None = None) -> StatusPatch:
        return StatusPatch(controller_status=controller_status, conditions=tuple(conditions),
                           workflow_run=workflow_run,
                           finalizers=tuple(finalizers) if finalizers is not None else None)

    def settled(self, controller_status: Mapping[str, Any] | None = None,
                conditions: tuple[Condition, ...] | list[Condition] = (),
                **kw: Any) -> Result:
        return Result("settled", self.patch(controller_status, conditions, **kw))

    def requeue(self, controller_status: Mapping[str, Any] | None = None,
                conditions: tuple[Condition, ...] | list[Condition] = (),
                **kw: Any) -> Result:
        return Result("requeue", self.patch(controller_status, conditions, **kw))

    def requeue_after(self, seconds: float, controller_status: Mapping[str, Any] | None = None,
                      conditions: tuple[Condition, ...] | list[Condition] = (),
                      **kw: Any) -> Result:
        if not seconds > 0:
            raise ValueError("requeue_after needs a positive number of seconds")
        return Result("requeue_after", self.patch(controller_status, conditions, **kw),
                      delay=float(seconds))
