"""Static checks of what templates and switches refer to (issue 13 item 5).

`validate` used to pass `{{ inptu.x }}`, `{{ outputs.nosuch }}` and `$result.status`;
each failed only when the run got there. Per file, after the graph checks:

- a name no template can see (`inptu`) is `unknown-name`, with did-you-mean;
- `outputs.X` / `results.X` naming no node or include is `unknown-node-ref`, and one
  naming a node that cannot have run before this one is `node-not-before`;
- `input.X` for a key the input schema does not declare is `unknown-input-key` (an
  error when the schema forbids other keys, else a warning);
- a switch on `$result.F` for a field results do not have is `unknown-result-field`.
"""

from __future__ import annotations

from ._diagnostics import DiagnosticSink, KeyPath, did_you_mean
from ._fanout import MapSpec, ParallelSpec, unknown_branch
from ._graph import LocalGraph
from ._simple_tags import simple_names
from ._template_ast import summary

CONTEXT = ("input", "outputs", "results", "run", "project", "secrets", "env")
GLOBALS = ("range", "lipsum", "dict", "cycler", "joiner", "namespace", "true", "false",
           "none", "True", "False", "None", "loop", "self", "caller", "varargs", "kwargs")
PARSE_CONTEXT = ("stdout", "stderr", "exit_code")
RESULT_FIELDS = ("outcome", "error", "exit_code")


def _refs(text: str) -> tuple[frozenset[str], tuple[tuple[str, str, int], ...]] | None:
    """(free names, (root, key, line) for `root.key`, sorted), or None when it does not
    parse. Sorted: a simple text's are read off the text, the others off the tree."""
    from ._templates import is_template

    if not is_template(text):  # plain text: nothing to look up
        return frozenset(), ()
    simple = simple_names(text)  # most templates: no parse (~1 ms each) needed
    if simple is not None:
        return simple.free, tuple(sorted(simple.refs))
    found = summary(text)
    return None if found.problem else (found.free, tuple(sorted(found.refs)))


def _predecessors(g: LocalGraph) -> dict[str, set[str]]:
    """For each node or mount: the nodes and mounts with an edge into it."""
    succ: dict[str, set[str]] = {}
    for source, edge in g.edges.items():
        src = source.split(".", 1)[0]  # an include's exit leaves from its mount
        targets = {edge.to} if edge.to else set()
        targets |= set(edge.cases.values())
        if edge.default:
            targets.add(edge.default)
        succ.setdefault(src, set()).update(t for t in targets if t)
    preds: dict[str, set[str]] = {}
    for src, targets in succ.items():
        for t in targets:
            preds.setdefault(t, set()).add(src)
    return preds


def _can_run_before(preds: dict[str, set[str]], key: str, here: str) -> bool:
    """Whether a path leads from `key` to `here`: walked back from `here` per reference,
    stopping when found. (Every node's full ancestor set was quadratic: a valid chain
    of 26,000 nodes took 315 s and 21 GB.)"""
    seen: set[str] = set()
    todo = list(preds.get(here, ()))
    while todo:
        p = todo.pop()
        if p == key:
            return True
        if p not in seen:
            seen.add(p)
            todo.extend(preds.get(p, ()))
    return False


def check_references(g: LocalGraph, sink: DiagnosticSink) -> None:
    wf = g.workflow
    id_set = set(wf.nodes) | set(wf.includes)
    ids = sorted(id_set)
    preds = _predecessors(g)
    schema = wf.input_schema if isinstance(wf.input_schema, dict) else None
    props = schema.get("properties") if schema else None
    closed = schema is not None and schema.get("additionalProperties") is False
    branches = {nid: tuple(name for name, _ in n.spec.branches)
                for nid, n in wf.nodes.items() if isinstance(n.spec, ParallelSpec)}
    for kp, text in wf.templates:
        if sink.stopped:
            break
        if len(kp) < 2 or kp[0] not in ("nodes", "includes") or not isinstance(kp[1], str):
            continue
        here = kp[1]
        refs = _refs(text)
        if refs is None:
            continue
        free, found = refs
        known = (*CONTEXT, *GLOBALS, *(PARSE_CONTEXT if "parse" in kp else ()),
                 *_item_names(wf.nodes.get(here), kp))
        if branches:
            unknown_branch(sink.error, text, kp, branches)
        for name in sorted(free - set(known)):
            sink.error("unknown-name", f"templates here cannot see '{name}'", kp,
                       hint=did_you_mean(name, CONTEXT) or f"they see: {', '.join(CONTEXT)}")
        for root, key, _line in found:
            if root == "input":
                if isinstance(props, dict) and key not in props:
                    message = f"the input schema has no property '{key}'"
                    hint = did_you_mean(key, sorted(props))
                    if closed:
                        sink.error("unknown-input-key", message, kp, hint=hint)
                    else:
                        sink.warning("unknown-input-key", message, kp, hint=hint)
                continue
            if key not in id_set:
                sink.error("unknown-node-ref", f"{root}.{key} names no node or include in this "
                           "workflow", kp, hint=did_you_mean(key, ids))
            elif not _can_run_before(preds, key, here):
                sink.error("node-not-before", f"{root}.{key}: node '{key}' cannot have run "
                           f"before '{here}' (no path leads from it to here)", kp)
    for edge in g.edges.values():
        on = edge.on or ""
        if on.startswith("$result."):
            field = on.split(".")[1]
            if field not in RESULT_FIELDS:
                sink.error("unknown-result-field", f"$result has no field '{field}'",
                           _on_path(edge.key_path),
                           hint=did_you_mean(field, RESULT_FIELDS)
                           or f"$result has: {', '.join(RESULT_FIELDS)}")


def _item_names(node: object, kp: KeyPath) -> tuple[str, ...]:
    """A map body's templates also see the item (`as`) and its `index`."""
    spec = getattr(node, "spec", None)
    if isinstance(spec, MapSpec) and kp[2:4] == ("map", "do"):
        return (spec.as_name, "index")
    return ()


def _on_path(kp: KeyPath) -> KeyPath:
    return (*kp, "switch", "on")
