"""Choosing the next node: plain edges, switches on output or result paths."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from runner.compiler import Edge
from runner.compiler._values import case_key


@dataclass(frozen=True)
class Route:
    """Where to go next: a node id, the end of the run, or a routing failure."""

    next: str | None
    error: str | None = None


class PathMissing(Exception):
    pass


def lookup(path: str, output: Any, result: dict[str, Any]) -> Any:
    """Resolve `$.a.b`, `$output.a`, `$result.outcome` against a node's output/result."""
    if path.startswith("$result"):
        value: Any = result
        rest = path[len("$result"):]
    elif path.startswith("$output"):
        value = output
        rest = path[len("$output"):]
    else:
        value = output
        rest = path[1:]
    for part in [p for p in rest.split(".") if p]:
        if isinstance(value, dict) and part in value:
            value = value[part]
        elif isinstance(value, list) and part.isdigit() and int(part) < len(value):
            value = value[int(part)]
        else:
            raise PathMissing(f"{path} is not present in the node's "
                              f"{'result' if path.startswith('$result') else 'output'}")
    return value


def route(edge: Edge | None, outcome: str, output: Any, result: dict[str, Any]) -> Route:
    """The next node after a node ended with `outcome` (ok | failed | timed_out)."""
    if edge is None:
        return Route(None)
    if edge.to is not None:
        return Route(edge.to) if outcome == "ok" else Route(None)
    assert edge.on is not None
    on_result = edge.on.startswith("$result")
    if outcome != "ok" and not on_result:
        return Route(None)  # only a $result switch catches a failure
    try:
        value = lookup(edge.on, output, result)
    except PathMissing as exc:
        return Route(None, f"routing failed: {exc}")
    if isinstance(value, (dict, list)):
        return Route(None, f"routing failed: {edge.on} is not a single value")
    key = case_key(value)
    target = edge.cases.get(key, edge.default)
    if target is None:
        shown = key if len(key) <= 80 else key[:77] + "..."
        return Route(None, f"routing failed: no case for {edge.on} = '{shown}' (cases: "
                     + ", ".join(edge.cases) + ")")
    return Route(target)
