"""Rerun from a node (issue 39): what a new run reuses of an ended one.

A rerun is a new run that begins where the old one was just before NODE first
started: the old trace is folded up to that event, and the outputs, results, step
count and include inputs of that fold are carried into the new run's `run_started`
(as a continuation carries its parent's). Nothing before NODE runs again, so a
side effect of a reused step happens once; NODE and what follows it run anew.

The default NODE is the node that failed (the last one whose failure was final, a
`fail` node's aside: it fails on purpose), else the node the run's error names,
else the node a cancel interrupted. `--set NODE=JSON` replaces one reused node's
output, checked against that node's output schema. A definition whose digest
changed since the old run is refused, naming the nodes that differ, unless forced;
the new run records either way.

A fan-out node (`map`, `parallel`) rerun from reuses the items that ended ok in the
old run (pgflow#658; its failed or cancelled end lists them): their outputs are
carried (`reused_items` in `run_started`) and their rows are written ended when the
node opens them, so only the others run. A run killed mid-node and then cancelled
without a resume has no end of the node in its trace; its item rows in the store
(`ItemRows`: the first visit's, state and output) still say which ended ok, and are
read instead. That holds only while the items would see what they saw: the node's
definition unchanged, the same input and no `--set` (a map's list and every body
template read only those).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from runner._canonical import canonical_json
from runner.compiler import Node, WorkflowDefinition
from runner.compiler._fanout import FANOUT_KINDS, ParallelSpec
from runner.compiler._jsonschemas import validation_errors
from runner.errors import InputError

from ._items import ItemRecord
from ._reader import RunReader
from ._state import TERMINAL, RunState

#: What a rerun's `run_started` records under `rerun` (and `wfrun show` shows).
RERUN_FIELDS = ("of", "from", "reused", "set", "forced", "changed_nodes", "reused_items")
_FANOUT = frozenset(k.name for k in FANOUT_KINDS)


class ItemRows(Protocol):
    """The store's item rows of one visit of a run's fan-out node, in index order
    (empty when it has none): what a rerun reads when the trace never ended the node."""

    def __call__(self, run_id: str, node: str, visit: int) -> Sequence[ItemRecord]: ...


@dataclass(frozen=True)
class RerunPlan:
    rerun_of: str
    from_node: str
    reused: tuple[str, ...]  # the nodes whose results are carried, in the order they ended
    carried: dict[str, Any]  # outputs, results, steps, scope_inputs (as for a continuation)
    input: Any  # the old run's input as recorded
    changed_nodes: tuple[str, ...] = ()
    forced: bool = False
    replaced: tuple[str, ...] = ()  # nodes whose output `--set` replaced
    workflow_ref: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    # A fan-out from node: the outputs of its items that ended ok, by label (a map's
    # index as text, a branch's name).
    items: dict[str, dict[str, Any]] = field(default_factory=dict)

    def record(self) -> dict[str, Any]:
        """The `rerun` entry of the new run's `run_started`."""
        return {"of": self.rerun_of, "from": self.from_node, "reused": list(self.reused),
                "set": list(self.replaced), "forced": self.forced,
                "changed_nodes": list(self.changed_nodes),
                "reused_items": {n: list(v) for n, v in self.items.items()}}

    def for_input(self, value: Any) -> RerunPlan:
        """The plan for a rerun given `value` as input: a new input, or a replaced
        output, may change what the fan-out items see, so none is reused then."""
        if not self.items:
            return self
        try:
            same = canonical_json(value) == canonical_json(self.input)
        except ValueError:
            same = False
        return self if same and not self.replaced else replace(self, items={})


def changed_nodes(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    """The nodes whose definition or outgoing edge differs between two snapshots
    (added and removed ones too), sorted; `(workflow)` when only top-level settings
    differ (input schema, max_steps, ...)."""
    old_nodes, new_nodes = old.get("nodes") or {}, new.get("nodes") or {}
    old_edges = {e.get("from"): e for e in old.get("edges") or []}
    new_edges = {e.get("from"): e for e in new.get("edges") or []}
    names = sorted(n for n in set(old_nodes) | set(new_nodes)
                   if old_nodes.get(n) != new_nodes.get(n) or old_edges.get(n) != new_edges.get(n))
    if names:
        return names
    rest = {k: v for k, v in old.items() if k not in ("nodes", "edges")}
    return [] if rest == {k: v for k, v in new.items() if k not in ("nodes", "edges")} \
        else ["(workflow)"]


def default_node(events: list[dict[str, Any]], state: RunState) -> str | None:
    """The node a rerun starts from when none is named: the last final failure, else
    the node the run's error names, else the node a cancel or kill interrupted."""
    if state.status == "completed":
        return None  # nothing failed: the caller names the node
    for event in reversed(events):
        p = event.get("payload") or {}
        # A `fail` node fails on purpose; the node that failed before it is the one.
        if event.get("type") == "node_failed" and not p.get("will_retry") \
                and p.get("kind") != "fail" and event.get("node"):
            return str(event["node"])
    node = (state.error or {}).get("node")
    if isinstance(node, str) and node:
        return node
    started = [e.get("node") for e in events if e.get("type") == "node_started"]
    return str(started[-1]) if started else None


def _first_start(events: list[dict[str, Any]], node: str) -> int | None:
    for i, event in enumerate(events):
        if event.get("node") == node and event.get("type") in ("node_started",
                                                               "include_entered"):
            return i
    return None


def plan(reader: RunReader, run_id: str, definition: WorkflowDefinition, *,
         from_node: str | None = None, overrides: Mapping[str, Any] | None = None,
         force: bool = False, item_rows: ItemRows | None = None) -> RerunPlan:
    """What a rerun of `run_id` under `definition` reuses; InputError for anything the
    caller should fix (a run not ended, an unknown node, a bad --set, a changed
    definition without `force`). `item_rows` reads a fan-out node's items that its
    trace never ended (None: none are reused then)."""
    manifest = reader.manifest(run_id)  # NotFoundError for an unknown run
    events = reader.trace(run_id)
    state = RunState(run_id)
    for event in events:
        state.apply(event)
    if state.status not in TERMINAL:
        what = {"waiting": "waiting at a checkpoint; answer it (`wfrun answer`) or cancel "
                           "it first"}.get(state.status, "not ended; cancel it first, or "
                                           f"resume it (`wfrun resume {run_id}`)")
        raise InputError(f"run '{run_id}' is {what}")
    if manifest.get("workflow") != definition.name:
        raise InputError(f"run '{run_id}' ran workflow '{manifest.get('workflow')}', not "
                         f"'{definition.name}'")
    node = from_node or default_node(events, state)
    if node is None:
        raise InputError(f"run '{run_id}' {state.status} with no failed node; name the node "
                         "to rerun from with --from NODE")
    if node not in definition.nodes:
        raise InputError(f"workflow '{definition.name}' has no node '{node}'; rerun from one "
                         "of the nodes the run took (`wfrun show "
                         f"{run_id}` lists them)")
    cut = _first_start(events, node)
    if cut is None:
        taken = list(dict.fromkeys(str(e["node"]) for e in events
                                   if e.get("type") == "node_started" and e.get("node")))
        raise InputError(f"run '{run_id}' never reached node '{node}' (it ran: "
                         f"{', '.join(taken) or 'no node'}); rerun from one of those")
    before = RunState(run_id)
    for event in events[:cut]:
        before.apply(event)
    changed = []
    if manifest.get("definition_digest") != definition.digest:
        changed = changed_nodes(reader.workflow(run_id), json.loads(definition.snapshot_json))
        if not force:
            raise InputError(
                f"workflow '{definition.name}' changed since run '{run_id}' (changed: "
                f"{', '.join(changed) or '(workflow)'}); the reused results came from the old "
                "definition: rerun with --force to use them with the new one")
    outputs = reader.live(run_id, copy.deepcopy(before.outputs))
    results = reader.live(run_id, copy.deepcopy(before.results))
    reused = tuple(n for n in results if not results[n].get("will_retry"))
    for name in reused:
        results[name]["reused_from"] = run_id
    replaced = []
    for name, value in (overrides or {}).items():
        _check_override(run_id, definition, name, value, results)
        outputs[name] = value
        results[name]["output"] = value
        results[name]["set"] = True
        replaced.append(name)
    items: dict[str, Any] | None = {}
    if node not in changed and definition.nodes[node].kind in _FANOUT:
        items = _ended_items(reader, run_id, events[cut:], node)
        if items is None and item_rows is not None:
            # Killed mid-node, never resumed: the store's rows of the visit the cut began.
            rows = item_rows(run_id, node, before.visits.get(node, 0) + 1)
            items = _stored_items(reader, run_id, definition.nodes[node], rows)
    carried = {"outputs": outputs, "results": results, "steps": before.steps,
               "scope_inputs": reader.live(run_id, copy.deepcopy(before.scope_inputs))}
    return RerunPlan(rerun_of=run_id, from_node=node, reused=reused, carried=carried,
                     input=reader.live(run_id, state.input),
                     changed_nodes=tuple(changed), forced=bool(force and changed),
                     replaced=tuple(replaced),
                     workflow_ref=str(manifest.get("workflow_ref") or definition.name),
                     items={node: items} if items else {})


def _ended_items(reader: RunReader, run_id: str, events: list[dict[str, Any]],
                 node: str) -> dict[str, Any] | None:
    """The items of fan-out `node`'s first visit from the cut that ended ok, by label,
    with their outputs (the node's final end records both: `items` or `branches`
    beside `output`, kept on a failure too); None when the node never ended."""
    for event in events:
        p = event.get("payload") or {}
        if event.get("node") != node or p.get("will_retry") \
                or event.get("type") not in ("node_finished", "node_failed"):
            continue
        outputs, items, branches = p.get("output"), p.get("items"), p.get("branches")
        if isinstance(items, list) and isinstance(outputs, list):
            pairs = [(str(i), s, outputs[i] if i < len(outputs) else None)
                     for i, s in enumerate(items)]
        elif isinstance(branches, dict) and isinstance(outputs, dict):
            pairs = [(str(k), s, outputs.get(k)) for k, s in branches.items()]
        else:
            return {}
        ok = {label: out for label, s, out in pairs
              if isinstance(s, dict) and s.get("outcome") == "ok"}
        live: dict[str, Any] = reader.live(run_id, copy.deepcopy(ok))
        return live
    return None  # the node never ended (a killed run): its trace does not know


def _stored_items(reader: RunReader, run_id: str, node: Node,
                  rows: Sequence[ItemRecord]) -> dict[str, Any]:
    """The rows that ended ok, by label (a map's index as text, a branch's name in the
    definition's order, as the node opened them), with their outputs read back as a
    recorded end's are."""
    spec = node.spec
    labels = [name for name, _ in spec.branches] if isinstance(spec, ParallelSpec) else None
    ok: dict[str, Any] = {}
    for row in rows:
        if row.state != "ok":
            continue
        if labels is None:
            ok[str(row.index)] = row.output
        elif 0 <= row.index < len(labels):
            ok[labels[row.index]] = row.output
    live: dict[str, Any] = reader.live(run_id, copy.deepcopy(ok))
    return live


def _check_override(run_id: str, definition: WorkflowDefinition, name: str, value: Any,
                    results: Mapping[str, Any]) -> None:
    if name not in results:
        raise InputError(f"--set {name}: node '{name}' is not reused by this rerun (it did "
                         f"not end before the rerun's first node in run '{run_id}'); --set "
                         "replaces the output of a reused node")
    if results[name].get("outcome") != "ok":
        raise InputError(f"--set {name}: node '{name}' ended {results[name].get('outcome')} in "
                         f"run '{run_id}', so it has no output to replace")
    node = definition.nodes.get(name)
    schema = getattr(node.spec, "output", None) if node is not None else None
    if isinstance(schema, Mapping):
        errors = validation_errors(dict(schema), value)
        if errors:
            raise InputError(f"--set {name}: the value does not match the node's output "
                             "schema: " + "; ".join(errors))
