"""What a fan-out node runs (DESIGN §10, ADR 0008): its plan, a body and a label per
item (a map's `over` rendered, a parallel node's branches), and the plans of shared
visits this process made lately, kept so that the parent, its resume and this host's
item worker run exactly the items the parent opened.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from runner.compiler import Node
from runner.compiler._fanout import ChildWorkflowBody, MapSpec, ParallelSpec
from runner.compiler._templates import TemplateError, TemplateStopped, render_native

from ._nodecontext import NodeResult


@dataclass(frozen=True)
class _Plan:
    """What a fan-out node runs: a body and a name per item, and its rules."""

    bodies: list[Node | ChildWorkflowBody]
    labels: list[str]  # item index or branch name, for NODE[label]
    values: list[Any]  # the map's items (None per branch)
    limit: int
    fail_fast: bool
    as_name: str | None


def _plan(node: Node, ctx: dict[str, Any]) -> _Plan | NodeResult:
    spec = node.spec
    if isinstance(spec, ParallelSpec):
        names = [name for name, _ in spec.branches]
        return _Plan([b for _, b in spec.branches], names, [None] * len(names),
                     spec.max_concurrency or max(len(names), 1), spec.fail_fast, None)
    assert isinstance(spec, MapSpec)
    where = f"nodes.{node.local_id or node.id}.map.over"
    try:
        values = render_native(spec.over, ctx)
    except TemplateStopped:
        raise
    except TemplateError as exc:
        return _failed("template_error", f"{where}: {exc}")
    if not isinstance(values, list):
        return _failed("bad_over", f"{where} must yield a list, not "
                       f"{type(values).__name__}")
    if len(values) > spec.max_items:
        return _failed("too_many_items", f"{where} yielded {len(values)} items, over the "
                       f"limit of {spec.max_items}; raise it with `max_items:` or split the "
                       "list")
    return _Plan([spec.body] * len(values), [str(i) for i in range(len(values))], values,
                 spec.max_concurrency, spec.fail_fast, spec.as_name)


class _KeptPlans:
    """The plans of shared visits this process made lately. A host runs the parent and
    its items in one process: its item worker and the parent's resume take the
    parent's plan instead of rendering `over` again (a 1,000-item map's ~3 ms, on the
    way to its first item and again at its end), and so run exactly the items the
    parent opened. Kept for the very node object only: a definition compiled anew is
    other objects, and renders again."""

    def __init__(self, size: int) -> None:
        self._size = size
        self._lock = threading.Lock()
        self._plans: OrderedDict[tuple[str, str, int], tuple[Node, _Plan]] = OrderedDict()

    def get(self, run_id: str, node: Node, visit: int) -> _Plan | None:
        with self._lock:
            kept = self._plans.get((run_id, node.id, visit))
        return kept[1] if kept is not None and kept[0] is node else None

    def put(self, run_id: str, node: Node, visit: int, plan: _Plan) -> None:
        with self._lock:
            self._plans[(run_id, node.id, visit)] = (node, plan)
            self._plans.move_to_end((run_id, node.id, visit))
            while len(self._plans) > self._size:
                self._plans.popitem(last=False)


SHARED_PLANS = _KeptPlans(8)


def _failed(code: str, message: str) -> NodeResult:
    return NodeResult("failed", error={"code": code, "message": message[:2000]})
