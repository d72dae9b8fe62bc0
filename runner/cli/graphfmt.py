"""Text, Mermaid and Graphviz renderings of a compiled workflow graph."""

from __future__ import annotations

import json

from runner.compiler import WorkflowDefinition
from runner.compiler._fanout import ChildWorkflowBody, MapSpec, ParallelSpec
from runner.compiler._kinds import icon as kind_icon

# The entry marker's id cannot clash with a node's: node ids get the "n_" prefix.
_START_ID = "start_marker"


def _label(definition: WorkflowDefinition, nid: str) -> str:
    node = definition.nodes[nid]
    kind = "decision" if getattr(node.spec, "decision_field", None) else node.kind
    return f"{nid} [{kind}]"


def _bodies(spec: object) -> list[tuple[str, str, str]]:
    """A map's body or a parallel node's branches: (key, label, what runs)."""
    bodies: list[tuple[str, str, object]] = []
    if isinstance(spec, MapSpec):
        bodies = [("each", f"each {spec.as_name} (max {spec.max_concurrency} at once"
                   f"{', fail_fast' if spec.fail_fast else ''})", spec.body)]
    elif isinstance(spec, ParallelSpec):
        bodies = [(name, f"branch {name}", body) for name, body in spec.branches]
    out = []
    for key, label, body in bodies:
        if isinstance(body, ChildWorkflowBody):
            out.append((key, label, f"workflow {body.workflow}"))
        else:
            kind = str(getattr(body, "kind", "?"))
            out.append((key, label, f"{kind_icon(kind)} {kind}"))
    return out


def _fanout_lines(spec: object) -> list[str]:
    """A map's body or a parallel node's branches, under the node (`wfrun graph`)."""
    return [f"    | {label}: {what}" for _, label, what in _bodies(spec)]


def render_graph(definition: WorkflowDefinition, fmt: str) -> str:
    if fmt == "mermaid":
        return _mermaid(definition)
    if fmt == "dot":
        return _dot(definition)
    return _text(definition)


def _text(d: WorkflowDefinition) -> str:
    lines = [f"{d.name}  {d.digest}", f"start: {d.start}  max_steps: {d.max_steps}"]
    for nid, node in d.nodes.items():
        icon = kind_icon(node.kind)
        lines.append(f"{icon} {_label(d, nid)}")
        lines.extend(_fanout_lines(node.spec))
        edge = d.edges.get(nid)
        if edge is None:
            lines.append("    (end)")
        elif edge.to is not None:
            lines.append(f"    -> {edge.to}")
        else:
            for case, target in edge.cases.items():
                lines.append(f"    {edge.on} == {case} -> {target}")
            if edge.default:
                lines.append(f"    otherwise -> {edge.default}")
    return "\n".join(lines)


def _mid(nid: str) -> str:
    return "n_" + "".join(ch if ch.isalnum() else "_" for ch in nid)


def _mermaid(d: WorkflowDefinition) -> str:
    lines = ["flowchart TD", f"    {_START_ID}(((start))) --> {_mid(d.start)}"]
    for nid in d.nodes:
        lines.append(f'    {_mid(nid)}["{_label(d, nid)}"]')
        # A fan-out node's branches (a map's body): rounded, on a dotted link.
        for i, (_, label, what) in enumerate(_bodies(d.nodes[nid].spec)):
            text = f"{label}: {what}".replace('"', "#quot;")
            # "b<i>_" cannot be a node's id: those get the "n_" prefix.
            lines.append(f'    b{i}_{_mid(nid)}(["{text}"])')
            lines.append(f"    {_mid(nid)} -.- b{i}_{_mid(nid)}")
    for src, edge in d.edges.items():
        if edge.to is not None:
            lines.append(f"    {_mid(src)} --> {_mid(edge.to)}")
            continue
        for case, target in edge.cases.items():
            lines.append(f'    {_mid(src)} -->|"{case}"| {_mid(target)}')
        if edge.default:
            lines.append(f'    {_mid(src)} -->|"*"| {_mid(edge.default)}')
    return "\n".join(lines)


def _dot(d: WorkflowDefinition) -> str:
    lines = [f"digraph {json.dumps(d.name)} {{", "  rankdir=TB;",
             f'  {_START_ID} [label="start", shape=circle];',
             f"  {_START_ID} -> {json.dumps(d.start)};"]
    for nid in d.nodes:
        shape = "diamond" if getattr(d.nodes[nid].spec, "decision_field", None) else "box"
        lines.append(f"  {json.dumps(nid)} [label={json.dumps(_label(d, nid))}, shape={shape}];")
        for key, label, what in _bodies(d.nodes[nid].spec):
            body = json.dumps(f"{nid}[{key}]")
            text = json.dumps(f"{label}: {what}", ensure_ascii=False)
            lines.append(f"  {body} [label={text}, shape=box, "
                         'style="rounded,dashed"];')
            lines.append(f"  {json.dumps(nid)} -> {body} [style=dashed, arrowhead=none];")
    for src, edge in d.edges.items():
        if edge.to is not None:
            lines.append(f"  {json.dumps(src)} -> {json.dumps(edge.to)};")
            continue
        for case, target in edge.cases.items():
            lines.append(f"  {json.dumps(src)} -> {json.dumps(target)} "
                         f"[label={json.dumps(case)}];")
        if edge.default:
            lines.append(f"  {json.dumps(src)} -> {json.dumps(edge.default)} [label=\"*\"];")
    lines.append("}")
    return "\n".join(lines)
