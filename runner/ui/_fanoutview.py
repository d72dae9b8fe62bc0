"""A run's fan-out nodes as the graph shows them: each `map`'s and `parallel`'s items
by state (done, running, failed of N) and each branch's state.

A node that ended is read from its end event in the trace (it records every item's
outcome); a node that is running is read from the store's item rows, which change
as items start and end while the trace records nothing until the node ends. A
parallel node's rows are in branch order, which its `node_started` event records
(the definition snapshot sorts the branches by name).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from runner.store import Store, StoreError
from runner.store.domain._fanout import ItemKey

FANOUT = ("map", "parallel")
_ENDS = ("node_finished", "node_failed")


@dataclass
class LiveItems:
    """What the store says of a run's running fan-out nodes (latest visit each)."""

    counts: dict[str, dict[str, int]] = field(default_factory=dict)  # node -> state -> n
    states: dict[str, list[str]] = field(default_factory=dict)  # parallel: by index

    def key(self) -> tuple[Any, ...]:
        """Equal while nothing changed (the live stream repaints on a change)."""
        return (sorted((n, sorted(c.items())) for n, c in self.counts.items()),
                sorted(self.states.items()))


def counted(states: Iterable[str]) -> dict[str, int]:
    counts = dict(Counter(states))
    counts["total"] = sum(counts.values())
    return counts


def running_fanout(events: list[dict[str, Any]]) -> dict[str, str]:
    """The fan-out nodes started and not ended yet: node -> kind."""
    open_: dict[str, str] = {}
    for event in events:
        node, kind = event.get("node"), event.get("type")
        p = event.get("payload") or {}
        if not isinstance(node, str):
            continue
        if kind == "node_started" and p.get("kind") in FANOUT:
            open_[node] = str(p["kind"])
        elif kind in _ENDS:
            open_.pop(node, None)
    return open_


def live_items(store: Store | None, run_id: str, running: dict[str, str]) -> LiveItems:
    """The store's rows of the running fan-out nodes (nothing without a store or rows)."""
    live = LiveItems()
    if store is None or not running:
        return live
    try:
        progress = store.fanout.progress(run_id)
        latest: dict[str, int] = {}
        for node, visit in progress:
            if node in running and visit >= latest.get(node, 0):
                latest[node] = visit
        for node, visit in latest.items():
            counts = dict(progress[(node, visit)])
            counts["total"] = sum(counts.values())
            live.counts[node] = counts
            if running[node] == "parallel":  # few rows: each branch's own state
                live.states[node] = [i.state for i in
                                     store.fanout.items(ItemKey(run_id, node, visit))]
    except StoreError:
        return LiveItems()  # a store made before fan-out items: the trace's view stands
    return live


def fanout_view(events: list[dict[str, Any]], snapshot: dict[str, Any],
                live: LiveItems | None = None) -> tuple[dict[str, dict[str, int]],
                                                        dict[str, dict[str, str]]]:
    """(items: node -> counts by state with `total`, branches: node -> name -> state)."""
    nodes = snapshot.get("nodes") or {}
    items: dict[str, dict[str, int]] = {}
    branches: dict[str, dict[str, str]] = {}
    order: dict[str, list[str]] = {}
    for event in events:
        node, kind = event.get("node"), event.get("type")
        p = event.get("payload") or {}
        if not isinstance(node, str) or (nodes.get(node) or {}).get("kind") not in FANOUT:
            continue
        if kind == "node_started":
            if isinstance(p.get("branches"), list):
                order[node] = [str(b) for b in p["branches"]]
            if not p.get("resumed"):  # a new visit: the last one's counts are history
                items.pop(node, None)
                branches.pop(node, None)
        elif kind in _ENDS:
            found = p.get("items")
            if isinstance(found, list):
                items[node] = counted(str((s or {}).get("outcome")) for s in found)
            elif isinstance(p.get("branches"), dict):
                states = {str(k): str((s or {}).get("outcome"))
                          for k, s in p["branches"].items()}
                branches[node] = states
                items[node] = counted(states.values())
    for node, counts in (live.counts.items() if live is not None else ()):
        items[node] = counts
        order_states = live.states.get(node) if live is not None else None
        if order_states is not None:
            names = order.get(node) or sorted(
                ((nodes.get(node) or {}).get("spec") or {}).get("branches") or {})
            branches[node] = dict(zip(names, order_states, strict=False))
    return items, branches
