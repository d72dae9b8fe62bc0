"""Server-side SVG of a compiled workflow graph (ADR 0005).

The layout is a small layered (Sugiyama-style) drawing computed here from the
definition snapshot, so the page loads no graph library and works offline:

1. a depth-first walk from `start` (then any node it does not reach, in
   declaration order) marks back edges: the edges of loops;
2. every node gets the layer of its longest forward path from the start;
3. nodes in a layer are ordered by the mean position of their parents (one
   barycentre sweep), which removes most crossings in the small graphs
   workflows have;
4. forward edges are straight lines, back edges arcs on the right side.

A `parallel` node draws its branches and a `map` its body as rows inside its box,
with a bar of its items' progress (done, running, failed of N) under them; each
branch row has its own `data-state`, and the bar's counts are filled the same way
(server-side from `items`, live by the page's script).

Every piece of user text (node ids, switch cases, branch names) is XML-escaped; node
state is a `data-state` attribute the page's script changes live, never markup.
"""

from __future__ import annotations

from dataclasses import dataclass
from html import escape
from typing import Any

from runner.compiler._kinds import authored_kinds
from runner.compiler._kinds import icon as kind_icon

NODE_W = 168
NODE_H = 38
GAP_X = 36
GAP_Y = 64
MARGIN = 24
LABEL_CHARS = 22  # longer ids are cut in the box; the full id is in the <title>
BODY_H = 20  # a branch's (a map body's) row inside a fan-out node's box
BAR_H = 22  # the items' progress bar and its counts
BODY_CHARS = 26
#: The item states the bar shows, in its order (left to right), and what each counts.
BAR_PARTS = (("ok", ("ok",)), ("failed", ("failed", "timed_out")),
             ("cancelled", ("cancelled",)), ("running", ("running",)))


@dataclass(frozen=True)
class GraphEdge:
    source: str
    target: str
    label: str | None


@dataclass(frozen=True)
class Body:
    """A parallel node's branch or a map's body, as the graph labels it."""

    branch: str | None  # the branch name; None for a map's body
    label: str  # "security: ƒ compute", "each file: $ action", "style: workflow review"


@dataclass(frozen=True)
class Placed:
    node: str
    kind: str
    layer: int
    x: int
    y: int
    bodies: tuple[Body, ...] = ()

    @property
    def h(self) -> int:
        return NODE_H + (len(self.bodies) * BODY_H + BAR_H if self.bodies else 0)


@dataclass(frozen=True)
class Layout:
    nodes: dict[str, Placed]
    edges: list[GraphEdge]
    back: frozenset[tuple[str, str]]
    width: int
    height: int


def edges_of(snapshot: dict[str, Any]) -> list[GraphEdge]:
    """The edges of a definition snapshot (`workflow.json` or `snapshot()`), labelled
    with their switch case."""
    out: list[GraphEdge] = []
    for edge in snapshot.get("edges") or []:
        source = str(edge.get("from"))
        if edge.get("to") is not None:
            out.append(GraphEdge(source, str(edge["to"]), None))
            continue
        switch = edge.get("switch") or {}
        for case, target in (switch.get("cases") or {}).items():
            out.append(GraphEdge(source, str(target), str(case)))
        if switch.get("default") is not None:
            out.append(GraphEdge(source, str(switch["default"]), "otherwise"))
    return out


def _node_kind(spec: Any) -> str:
    if isinstance(spec, dict):
        kind = spec.get("kind")
        if isinstance(kind, str):
            return kind
        for name in authored_kinds():  # a hand-written snapshot: its kind key
            if name in spec:
                return name
    return "node"


def _body_label(body: Any) -> str:
    if not isinstance(body, dict):
        return "?"
    if "workflow" in body:
        return f"workflow {body.get('workflow')}"
    kind = str(body.get("kind") or _node_kind(body))
    return f"{kind_icon(kind)} {kind}"


def bodies_of(spec: Any) -> tuple[Body, ...]:
    """A fan-out node's branches (in the snapshot's order: by name) or map body."""
    if not isinstance(spec, dict) or spec.get("kind") not in ("map", "parallel"):
        return ()
    inner = spec.get("spec") or {}
    if spec.get("kind") == "map":
        return (Body(None, f"each {inner.get('as') or 'item'}: {_body_label(inner.get('do'))}"),)
    branches = inner.get("branches") or {}
    return tuple(Body(str(name), f"{name}: {_body_label(b)}") for name, b in branches.items())


def layout(snapshot: dict[str, Any]) -> Layout:
    nodes_spec = snapshot.get("nodes") or {}
    ids = [str(n) for n in nodes_spec]
    known = set(ids)
    edges = [e for e in edges_of(snapshot) if e.source in known and e.target in known]
    children: dict[str, list[str]] = {n: [] for n in ids}
    for e in edges:
        if e.target not in children[e.source]:
            children[e.source].append(e.target)
    start = str(snapshot.get("start") or (ids[0] if ids else ""))
    order = [start] if start in known else []
    order += [n for n in ids if n != start]

    # 1. back edges: an edge to a node still on the DFS stack (iterative: no recursion limit)
    back: set[tuple[str, str]] = set()
    visited: set[str] = set()
    seen_order: list[str] = []
    for root in order:
        if root in visited:
            continue
        visited.add(root)
        seen_order.append(root)
        on_stack = {root}
        stack: list[tuple[str, int]] = [(root, 0)]
        while stack:
            node, i = stack[-1]
            if i >= len(children[node]):
                stack.pop()
                on_stack.discard(node)
                continue
            stack[-1] = (node, i + 1)
            child = children[node][i]
            if child in on_stack:
                back.add((node, child))
            elif child not in visited:
                visited.add(child)
                seen_order.append(child)
                on_stack.add(child)
                stack.append((child, 0))

    # 2. longest-path layers over the forward edges (a DAG now), in topological order
    forward = [(e.source, e.target) for e in edges if (e.source, e.target) not in back]
    indegree = {n: 0 for n in ids}
    for _, t in forward:
        indegree[t] += 1
    layer = {n: 0 for n in ids}
    ready = [n for n in seen_order if indegree[n] == 0]
    while ready:
        node = ready.pop(0)
        for s, t in forward:
            if s == node:
                layer[t] = max(layer[t], layer[node] + 1)
                indegree[t] -= 1
                if indegree[t] == 0:
                    ready.append(t)

    # 3. order within layers: discovery order, then one barycentre sweep
    rank = {n: i for i, n in enumerate(seen_order)}
    layers: dict[int, list[str]] = {}
    for n in sorted(ids, key=lambda n: rank.get(n, len(rank))):
        layers.setdefault(layer[n], []).append(n)
    position: dict[str, float] = {}
    for depth in sorted(layers):
        row = layers[depth]
        if depth > 0:
            def centre(n: str) -> float:
                parents = [position[s] for s, t in forward if t == n and s in position]
                return sum(parents) / len(parents) if parents else float(rank.get(n, 0))
            row.sort(key=lambda n: (centre(n), rank.get(n, 0)))
        for i, n in enumerate(row):
            position[n] = float(i)

    widest = max((len(r) for r in layers.values()), default=1)
    width = MARGIN * 2 + widest * NODE_W + (widest - 1) * GAP_X + 40  # room for back arcs
    bodies = {n: bodies_of(nodes_spec.get(n)) for n in ids}
    # A layer is as tall as its tallest box (a fan-out node's grows with its branches).
    tall = {d: max(Placed(n, "", d, 0, 0, bodies[n]).h for n in row)
            for d, row in layers.items()}
    top: dict[int, int] = {}
    y = MARGIN
    for depth in sorted(layers):
        top[depth] = y
        y += tall[depth] + GAP_Y
    height = y - GAP_Y + MARGIN if layers else MARGIN * 2
    placed: dict[str, Placed] = {}
    for depth, row in layers.items():
        row_w = len(row) * NODE_W + (len(row) - 1) * GAP_X
        left = MARGIN + ((widest * NODE_W + (widest - 1) * GAP_X) - row_w) // 2
        for i, n in enumerate(row):
            placed[n] = Placed(n, _node_kind(nodes_spec.get(n)), depth,
                               left + i * (NODE_W + GAP_X), top[depth], bodies[n])
    return Layout(placed, edges, frozenset(back), width, height)


def _short(text: str) -> str:
    return text if len(text) <= LABEL_CHARS else text[:LABEL_CHARS - 1] + "…"


def _short_body(text: str) -> str:
    return text if len(text) <= BODY_CHARS else text[:BODY_CHARS - 1] + "…"


def items_text(counts: dict[str, int]) -> str:
    """`2 ok · 1 running · 1 failed of 4`: a fan-out node's items (the page's script
    writes the same words)."""
    total = int(counts.get("total") or 0)
    words = [f"{n} {name}" for name, keys in BAR_PARTS
             if (n := sum(int(counts.get(k) or 0) for k in keys))
             or name in ("ok", "running", "failed")]
    return f"{' · '.join(words)} of {total}"


def _fanout_parts(p: Placed, branch_states: dict[str, str],
                  counts: dict[str, int] | None) -> list[str]:
    """The rows of a fan-out node's branches (or map body) and its items' bar, drawn
    over its box in a group of their own (the box's CSS colours only the box)."""
    node = escape(p.node)
    out = [f'<g class="fanout" data-node="{node}">']
    for i, body in enumerate(p.bodies):
        y = p.y + NODE_H + i * BODY_H
        branch = f' data-branch="{escape(body.branch)}"' if body.branch is not None else ""
        state = branch_states.get(body.branch or "", "pending")
        out.append(f'<g class="body"{branch} data-state="{escape(state)}">'
                   f'<title>{escape(body.label)}</title>'
                   f'<rect x="{p.x + 8}" y="{y}" width="{NODE_W - 16}" height="{BODY_H - 4}" '
                   f'rx="4"/><text x="{p.x + 14}" y="{y + 12}">'
                   f'{escape(_short_body(body.label))}</text></g>')
    y = p.y + NODE_H + len(p.bodies) * BODY_H
    counts = counts or {}
    total = int(counts.get("total") or 0)
    width = NODE_W - 16
    out.append(f'<g class="items" data-total="{total}">'
               f'<rect class="items-track" x="{p.x + 8}" y="{y}" width="{width}" height="5" '
               'rx="2"/>')
    x = p.x + 8
    for name, keys in BAR_PARTS:
        n = sum(int(counts.get(k) or 0) for k in keys)
        w = round(width * n / total) if total else 0
        out.append(f'<rect class="items-{name}" data-part="{name}" x="{x}" y="{y}" '
                   f'width="{w}" height="5"/>')
        x += w
    text = items_text(counts) if total else ""
    out.append(f'<text class="items-text" x="{p.x + NODE_W // 2}" y="{y + 16}">'
               f'{escape(text)}</text></g></g>')
    return out


def render_svg(graph: Layout, states: dict[str, str] | None = None, *,
               items: dict[str, dict[str, int]] | None = None,
               branches: dict[str, dict[str, str]] | None = None) -> str:
    """The graph as an inline <svg>; `states` gives each node's initial `data-state`,
    `items` a fan-out node's item counts by state (with `total`), `branches` its
    branches' states."""
    states = states or {}
    items = items or {}
    branches = branches or {}
    parts = [f'<svg class="graph" xmlns="http://www.w3.org/2000/svg" role="img" '
             f'aria-label="workflow graph" width="{graph.width}" height="{graph.height}" '
             f'viewBox="0 0 {graph.width} {graph.height}">',
             '<defs><marker id="arrow" viewBox="0 0 10 10" refX="10" refY="5" '
             'markerWidth="7" markerHeight="7" orient="auto-start-reverse">'
             '<path d="M0,0 L10,5 L0,10 z"/></marker></defs>']
    for e in graph.edges:
        a, b = graph.nodes[e.source], graph.nodes[e.target]
        is_back = (e.source, e.target) in graph.back or a.layer >= b.layer
        if is_back:
            # Leave the right side of the source, loop round, enter the target's right side.
            x1, y1 = a.x + NODE_W, a.y + a.h // 2
            x2, y2 = b.x + NODE_W, b.y + b.h // 2
            bend = max(x1, x2) + 28 + 6 * abs(a.layer - b.layer)
            path = f"M{x1},{y1} C{bend},{y1} {bend},{y2} {x2},{y2}"
            lx, ly = bend - 4, (y1 + y2) // 2
        else:
            x1, y1 = a.x + NODE_W // 2, a.y + a.h
            x2, y2 = b.x + NODE_W // 2, b.y
            path = f"M{x1},{y1} L{x2},{y2}"
            lx, ly = (x1 + x2) // 2 + 4, (y1 + y2) // 2
        cls = "edge back" if is_back else "edge"
        parts.append(f'<path class="{cls}" data-from="{escape(e.source)}" '
                     f'data-to="{escape(e.target)}" d="{path}" marker-end="url(#arrow)"/>')
        if e.label is not None:
            parts.append(f'<text class="edge-label" x="{lx}" y="{ly}">'
                         f'{escape(_short(e.label))}</text>')
    for p in graph.nodes.values():
        state = states.get(p.node, "pending")
        parts.append(
            f'<g class="node" data-node="{escape(p.node)}" data-kind="{escape(p.kind)}" '
            f'data-state="{escape(state)}"><title>{escape(p.node)} ({escape(p.kind)})</title>'
            f'<rect x="{p.x}" y="{p.y}" width="{NODE_W}" height="{p.h}" rx="7"/>'
            f'<text x="{p.x + NODE_W // 2}" y="{p.y + 16}" class="node-id">'
            f'{escape(_short(p.node))}</text>'
            f'<text x="{p.x + NODE_W // 2}" y="{p.y + 31}" class="node-kind">'
            f'{escape(kind_icon(p.kind))} {escape(p.kind)} · '
            f'<tspan class="node-state">{escape(state)}</tspan></text></g>')
        if p.bodies:
            parts.extend(_fanout_parts(p, branches.get(p.node) or {}, items.get(p.node)))
    parts.append("</svg>")
    return "".join(parts)
