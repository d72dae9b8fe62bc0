"""Graph checks for one file and flattening of includes into one NetworkX graph.

Checks run per source file on its local graph (so every problem points at a
line in the file that has it); flattening then qualifies child node ids with
their mount path and wires entry and exit nodes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ._diagnostics import DiagnosticSink, KeyPath, did_you_mean
from ._kinds import ends
from ._model import (
    DEFAULT_NODE_TIMEOUT,
    AgentSpec,
    Edge,
    IncludeEntrySpec,
    IncludeExitSpec,
    Node,
    Retry,
)
from ._parse import RawEdge, RawWorkflow

EXIT_PREFIX = "__exit_"


@dataclass
class LocalGraph:
    """A file's own graph after endpoint checks: edges keyed by source."""

    workflow: RawWorkflow
    edges: dict[str, RawEdge] = field(default_factory=dict)  # source -> edge
    # Children by mount, filled in by the compiler before checks that need them.
    children: dict[str, LocalGraph] = field(default_factory=dict)

    @property
    def terminals(self) -> list[str]:
        """Nodes with no outgoing edge, in file order."""
        return [nid for nid in self.workflow.nodes if nid not in self.edges]


def check_local(wf: RawWorkflow, children: dict[str, LocalGraph],
                sink: DiagnosticSink) -> LocalGraph:
    """Endpoint, fan-out, start, exit, decision and reachability checks for one file."""
    g = LocalGraph(wf, children=children)
    names = sorted(wf.declared | set(wf.includes))
    broken = wf.declared - set(wf.nodes)  # declared, but failed their own checks

    def target_ok(target: str, kp: KeyPath) -> bool:
        if target in wf.nodes or target in wf.includes:
            return True
        if target in broken:
            return False
        if "." in target and target.split(".", 1)[0] in wf.includes:
            sink.error("invalid-target", f"'{target}' is an exit; edges enter an include by its "
                       f"mount name '{target.split('.', 1)[0]}'", kp)
            return False
        sink.error("unknown-node", f"'{target}' is not a node or include in this workflow", kp,
                   hint=did_you_mean(target, names))
        return False

    def source_ok(source: str, kp: KeyPath) -> bool:
        if source in wf.nodes:
            return True
        if source in broken:
            return False
        if "." in source:
            mount, exit_name = source.split(".", 1)
            child = children.get(mount)
            if mount in wf.includes:
                if child is None:
                    return False  # the include itself failed; already reported
                if exit_name in child.workflow.exits:
                    return True
                sink.error("unknown-exit", f"include '{mount}' has no exit '{exit_name}'", kp,
                           hint=did_you_mean(exit_name, child.workflow.exits)
                           or _exits_hint(child))
                return False
        if source in wf.includes:
            sink.error("invalid-source", f"edges leave include '{source}' through its exits, "
                       f"like '{source}.<exit>'", kp,
                       hint=_exits_hint(children[source]) if source in children else None)
            return False
        sink.error("unknown-node", f"'{source}' is not a node in this workflow", kp,
                   hint=did_you_mean(source, names))
        return False

    # Decisions with a choice -> node mapping build their own switch edge.
    for nid, node in wf.nodes.items():
        if node.choice_targets is not None and isinstance(node.spec, AgentSpec):
            field_name = node.spec.decision_field or "route"
            kp = (*node.key_path, "decision", "choices")
            edge = RawEdge(nid, None, f"$.{field_name}", dict(node.choice_targets), None, kp)
            for choice, target in node.choice_targets.items():
                target_ok(target, (*kp, choice))
            g.edges[nid] = edge

    for edge in wf.edges:
        fkp = (*edge.key_path, "from")
        valid_source = source_ok(edge.source, fkp)
        source_node = wf.nodes.get(edge.source)
        if source_node is not None and source_node.kind == "fail":
            sink.error("fail-has-edge", f"'{edge.source}' is a fail node: it ends the run, so "
                       "it cannot have an outgoing edge", fkp)
        if valid_source and edge.source in g.edges:
            sink.error("multiple-edges", f"'{edge.source}' already has an outgoing edge; a node "
                       "has at most one (use a switch to branch)", fkp)
            continue
        if edge.to is not None:
            target_ok(edge.to, (*edge.key_path, "to"))
        else:
            for case, target in edge.cases.items():
                target_ok(target, (*edge.key_path, "switch", "cases", case))
            if edge.default is not None:
                target_ok(edge.default, (*edge.key_path, "switch", "default"))
            _check_decision_switch(wf, edge, sink)
        if valid_source:
            g.edges[edge.source] = edge

    if wf.start and wf.start not in wf.declared and wf.start not in wf.includes:
        sink.error("unknown-node", f"start node '{wf.start}' does not exist", ("start",),
                   hint=did_you_mean(wf.start, names))

    for exit_name, (source, kp) in wf.exits.items():
        if source in broken:
            continue
        if source not in wf.nodes:
            sink.error("unknown-node", f"exit '{exit_name}' leaves from '{source}', which is not "
                       "a node", kp, hint=did_you_mean(source, list(wf.nodes)))
        elif source in g.edges:
            sink.error("exit-not-terminal", f"exit '{exit_name}' must leave from a node without "
                       f"an outgoing edge, but '{source}' has one", kp)

    _check_reachable(g, sink)
    return g


def _exits_hint(child: LocalGraph) -> str:
    exits = list(child.workflow.exits)
    return ("its exits are: " + ", ".join(exits)) if exits else "it declares no exits"


def _check_decision_switch(wf: RawWorkflow, edge: RawEdge, sink: DiagnosticSink) -> None:
    node = wf.nodes.get(edge.source)
    if node is None or not isinstance(node.spec, AgentSpec) or not node.spec.decision_field:
        return
    field_name = node.spec.decision_field
    if edge.on not in (f"$.{field_name}", f"$output.{field_name}"):
        return
    choices = node.spec.choices
    for case in edge.cases:
        if case not in choices:
            sink.error("unknown-choice", f"'{case}' is not one of the decision's choices ("
                       + ", ".join(choices) + ")", (*edge.key_path, "switch", "cases", case),
                       at_key=True, hint=did_you_mean(case, choices))
    missing = [ch for ch in choices if ch not in edge.cases]
    if missing and edge.default is None:
        sink.error("decision-not-exhaustive", "the switch has no case for choice"
                   + ("s " if len(missing) > 1 else " ") + ", ".join(f"'{m}'" for m in missing)
                   + "; add the cases or a default", (*edge.key_path, "switch", "cases"))


def _check_reachable(g: LocalGraph, sink: DiagnosticSink) -> None:
    wf = g.workflow
    if not wf.start or (wf.start not in wf.nodes and wf.start not in wf.includes):
        return
    if wf.declared - set(wf.nodes) or set(wf.includes) - set(g.children):
        return  # a broken node or include hides its edges; reachability would only cascade
    # A plain breadth-first walk: checking a file must not pay for importing networkx.
    succ: dict[str, set[str]] = {n: set() for n in (*wf.nodes, *wf.includes)}
    for source, edge in g.edges.items():
        origin = source.split(".", 1)[0]
        targets = [edge.to] if edge.to else [*edge.cases.values(),
                                               *([edge.default] if edge.default else [])]
        for t in targets:
            if t in succ and origin in succ:
                succ[origin].add(t)
    reachable = {wf.start}
    frontier = [wf.start]
    while frontier:
        for nxt in succ.get(frontier.pop(), ()):
            if nxt not in reachable:
                reachable.add(nxt)
                frontier.append(nxt)
    for nid, node in wf.nodes.items():
        if nid not in reachable:
            sink.error("unreachable-node", f"node '{nid}' cannot be reached from start "
                       f"'{wf.start}'", node.key_path, at_key=True)
    for mount, inc in wf.includes.items():
        if mount not in reachable:
            sink.error("unreachable-node", f"include '{mount}' cannot be reached from start "
                       f"'{wf.start}'", inc.key_path, at_key=True)


def check_included(parent: LocalGraph, mount: str, sink: DiagnosticSink) -> None:
    """An included child must map every terminal node to an exit; parents route exits."""
    child = parent.children.get(mount)
    if child is None:
        return
    kp = parent.workflow.includes[mount].key_path
    exit_sources = {src for src, _ in child.workflow.exits.values()}
    for nid in child.terminals:
        node = child.workflow.nodes[nid]
        if ends(node.kind) is not None or nid in exit_sources:
            continue
        sink.error("unmapped-terminal", f"included workflow '{child.workflow.name}' can end at "
                   f"node '{nid}', which no exit maps; declare it under the child's 'exits'",
                   kp, at_key=True)
    for exit_name in child.workflow.exits:
        if f"{mount}.{exit_name}" not in parent.edges:
            sink.warning("unrouted-exit", f"exit '{mount}.{exit_name}' has no edge, so leaving "
                         "through it ends the run", kp, at_key=True)


def flatten(g: LocalGraph, prefix: str = "") -> tuple[dict[str, Node], dict[str, Edge]]:
    """Qualified nodes and edges of a checked local graph and all its children."""
    wf = g.workflow

    def q(local: str) -> str:
        return f"{prefix}/{local}" if prefix else local

    def q_source(source: str) -> str:
        if source in wf.nodes:
            return q(source)
        mount, exit_name = source.split(".", 1)
        return f"{q(mount)}/{EXIT_PREFIX}{exit_name}"

    nodes: dict[str, Node] = {}
    edges: dict[str, Edge] = {}
    for nid, raw in wf.nodes.items():
        nodes[q(nid)] = Node(id=q(nid), kind=raw.kind,
                             spec=raw.spec, scope=prefix, local_id=nid, timeout=raw.timeout,
                             retry=raw.retry, description=raw.description,
                             cache=raw.cache)
    for mount, inc in wf.includes.items():
        child = g.children[mount]
        mount_id = q(mount)
        nodes[mount_id] = Node(
            id=mount_id, kind="include_entry",
            spec=IncludeEntrySpec(mount=mount_id, workflow=child.workflow.name, input=inc.input,
                                  max_steps=child.workflow.max_steps),
            scope=prefix, local_id=mount, timeout=DEFAULT_NODE_TIMEOUT, retry=Retry())
        child_nodes, child_edges = flatten(child, mount_id)
        nodes.update(child_nodes)
        edges.update(child_edges)
        edges[mount_id] = Edge(source=mount_id, to=f"{mount_id}/{child.workflow.start}")
        for exit_name, (src, _) in child.workflow.exits.items():
            exit_id = f"{mount_id}/{EXIT_PREFIX}{exit_name}"
            nodes[exit_id] = Node(
                id=exit_id, kind="include_exit",
                spec=IncludeExitSpec(mount=mount_id, exit=exit_name, source=f"{mount_id}/{src}"),
                scope=prefix, local_id=f"{mount}.{exit_name}", timeout=DEFAULT_NODE_TIMEOUT,
                retry=Retry())
            edges[f"{mount_id}/{src}"] = Edge(source=f"{mount_id}/{src}", to=exit_id)
    for source, raw_edge in g.edges.items():
        src = q_source(source)
        if raw_edge.to is not None:
            edges[src] = Edge(source=src, to=q(raw_edge.to))
        else:
            edges[src] = Edge(source=src, on=raw_edge.on,
                              cases={k: q(v) for k, v in raw_edge.cases.items()},
                              default=q(raw_edge.default) if raw_edge.default else None)
    return nodes, edges


def to_networkx(nodes: Mapping[str, Node], edges: Mapping[str, Edge]) -> Any:
    """Nodes carry their `Node` as `spec`; edges carry the route values that take them."""
    import networkx as nx  # imported on first use: it costs ~80 ms of start-up

    dg: nx.DiGraph = nx.DiGraph()
    for nid, node in nodes.items():
        dg.add_node(nid, spec=node, kind=node.kind)
    for src, edge in edges.items():
        if edge.to is not None:
            dg.add_edge(src, edge.to, route=None)
            continue
        routes: dict[str, list[str]] = {}
        for case, target in edge.cases.items():
            routes.setdefault(target, []).append(case)
        if edge.default is not None:
            routes.setdefault(edge.default, []).append("*")
        for target, cases in routes.items():
            dg.add_edge(src, target, route=cases, on=edge.on)
    return dg
