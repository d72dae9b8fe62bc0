"""A workflow document's shape, checked from the published JSON Schema (`schema.py`).

`jsonschema`'s `iter_errors` finds every shape mistake (wrong types, unknown and
missing keys, a node with no or several kind keys, an edge or action in neither
or both forms, bounds, empty lists); this module says each one as the compiler's
positioned diagnostic, with a 'did you mean' for an unknown key. The parsers
(`parse.py`, the kinds' body parsers) then only convert, and check what a schema
cannot say: value formats with their own messages (ids, paths, durations, hooks,
names), and rules across fields (reserved and duplicate names, switch cases,
`use_shell`, templates, references).
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any, NamedTuple

from jsonschema import Draft202012Validator
from jsonschema.exceptions import ValidationError

from ._diagnostics import DiagnosticSink, KeyPath
from ._kinddef import DURATION
from ._kinds import authored_kinds, table_version
from ._shapes import Sink, leaves, report

_EMPTY = {"cases": "switch cases must not be empty",
          "choices": "a decision needs at least one choice",
          "shell": "shell needs at least the program name"}
# Formats with messages of their own in the parsers (invalid-id, invalid-path,
# invalid-duration, invalid-hook, invalid-name, unsupported-version, ...), and the
# places whose checks are their own (budgets, a step's `with:`).
_PARSER_OWNED = frozenset({"pattern", "propertyNames", "const", "enum", "uniqueItems", "format"})
_OWN_SUBTREES = ("template_budget", "triggers", "concurrency", "rate_limit")  # own parsers


def _validators() -> tuple[Draft202012Validator, Draft202012Validator, Draft202012Validator]:
    return _built(table_version())


@lru_cache(maxsize=2)
def _built(_version: int) -> tuple[Draft202012Validator, Draft202012Validator,
                                   Draft202012Validator]:
    """(the document without its nodes' bodies and edges, one node, one edge): a big
    file's nodes are built one by one as the parser reaches them (yamlio.LazyNodes)
    and checking stops at the problem cap, so each node is checked when it is
    reached; nodes and edges are checked one by one, each shape once (`_checked`)."""
    from ._schema import workflow_schema

    schema = workflow_schema()
    props = schema["properties"]
    nodes, edges = dict(props["nodes"]), dict(props["edges"])
    node, edge = nodes.pop("additionalProperties"), edges.pop("items")
    if set(nodes.get("propertyNames", {})) <= _PARSER_OWNED:
        # What it finds (a node id's pattern) is dropped for the parser's invalid-id;
        # matched per id it was ~5 % of a 5,000-node compile.
        nodes.pop("propertyNames", None)
    top = {**schema, "properties": {**props, "nodes": nodes, "edges": edges}}
    defs = {"$defs": schema["$defs"]}  # a node may hold nodes ({"$ref": NODE_REF})
    return (Draft202012Validator(top), Draft202012Validator({**node, **defs}),
            Draft202012Validator(edge))


def check_document(sink: DiagnosticSink, data: dict[str, Any]) -> None:
    """Report every shape mistake in one workflow document outside its nodes."""
    _check(sink, _validators()[0], data, ())
    edges = data.get("edges")
    if isinstance(edges, list):
        for i, edge in enumerate(edges):
            if sink.stopped:
                return
            _checked(sink, 2, edge, ("edges", i))


def check_node(sink: DiagnosticSink, node_id: str, value: Any) -> None:
    """Report every shape mistake in one node."""
    _checked(sink, 1, value, ("nodes", node_id))


_PLACEHOLDER = "\0item\0"
_SHAPES: dict[Any, list[_Found]] = {}
_SHAPES_KEPT = 4096
_KEY_BUDGET = 256  # values walked for one shape key; a bigger value is not cached


def _checked(sink: DiagnosticSink, which: int, value: Any, at: KeyPath) -> None:
    """What is reported depends only on a value's shape (keys, types, lengths, numbers;
    never string contents: their formats are the parser's), so each shape is validated
    once (a generated 5,000-node file has a handful; jsonschema takes ~0.4 ms a node)."""
    key = _shape_key(value, [_KEY_BUDGET])
    key = (which, table_version(), key) if key is not None else None
    found = _SHAPES.get(key) if key is not None else None
    if found is None:
        recorder = _Recorder()
        _check(recorder, _validators()[which], value, (*at[:-1], _PLACEHOLDER))
        found = recorder.found
        if key is not None:
            if len(_SHAPES) >= _SHAPES_KEPT:
                _SHAPES.clear()
            _SHAPES[key] = found
    name = str(at[-1])
    for f in found:
        if sink.stopped:
            return
        path = tuple(at[-1] if p == _PLACEHOLDER else p for p in f.path)
        sink.error(f.code, f.message.replace(_PLACEHOLDER, name), path, at_key=f.at_key,
                   hint=f.hint)


def _shape_key(value: Any, budget: list[int]) -> Any:
    """The value with every string replaced by "s" (as nested tuples), or None past
    the budget or for a value of another kind. Loaded values are plain `str`, `dict`
    and `list`: those are told by their class first (a node's shape key was 8 % of
    validate's checks through the isinstance chain); subclasses take the chain."""
    budget[0] -= 1
    if budget[0] < 0:
        return None
    cls = value.__class__
    if cls is str:
        return "s"
    if cls is dict:
        items = []
        for k, v in value.items():
            if v.__class__ is str:  # taken in place, counted
                budget[0] -= 1
                sub: Any = "s"
            else:
                sub = _shape_key(v, budget)
                if sub is None and v is not None:
                    return None
            items.append((k.__class__.__name__, k if isinstance(k, (str, int)) else repr(k),
                          sub))
        return ("m", tuple(items)) if budget[0] >= 0 else None
    if cls is list:
        subs = []
        for v in value:
            if v.__class__ is str:
                budget[0] -= 1
                subs.append("s")
                continue
            sub = _shape_key(v, budget)
            if sub is None and v is not None:
                return None
            subs.append(sub)
        return ("l", tuple(subs)) if budget[0] >= 0 else None
    if isinstance(value, str):
        return "s"
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, (int, float)):
        return (type(value).__name__, value)
    if isinstance(value, dict):
        return _shape_key(dict(value), budget)
    if isinstance(value, list):
        return _shape_key(list(value), budget)
    return None


class _Found(NamedTuple):
    code: str
    message: str
    path: KeyPath
    at_key: bool
    hint: str | None


class _Recorder:
    """A sink that keeps what it is told (for `check_node`'s cache)."""

    stopped = False

    def __init__(self) -> None:
        self.found: list[_Found] = []

    def error(self, code: str, message: str, key_path: KeyPath | None = None, *,
              at_key: bool = False, hint: str | None = None) -> None:
        self.found.append(_Found(code, message, key_path or (), at_key, hint))


def _check(sink: Sink, validator: Draft202012Validator, value: Any,
           prefix: KeyPath) -> None:
    errors = sorted(validator.iter_errors(value), key=lambda e: [str(p) for p in e.path])
    for top in errors:
        for err in leaves(top):
            if sink.stopped:
                return
            _report(sink, err, prefix)


def _what(path: KeyPath) -> str:
    """How a message names the place at `path`."""
    if not path:
        return "the workflow"
    head, last = path[0], path[-1]
    if head == "nodes" and len(path) == 2:
        return f"node '{last}'"
    if head == "nodes" and len(path) == 3 and last in authored_kinds():
        return str(last)
    if head == "edges" and len(path) == 2:
        return "an edge"
    if head == "edges" and len(path) == 3 and last in ("from", "to"):
        return f"edge '{last}'"
    if head in ("includes", "exits") and len(path) == 2:
        return f"{'include' if head == 'includes' else 'exit'} '{last}'"
    if len(path) >= 2 and path[-2] == "retry":
        return f"retry {last}"
    if len(path) >= 2 and path[-2] in ("env", "cases") and isinstance(last, str):
        return f"{'env value' if path[-2] == 'env' else 'case'} '{last}'"
    if isinstance(last, int) and len(path) >= 2:
        owner = {"shell": "shell argument", "choices": "choice"}.get(str(path[-2]))
        return f"{owner} {last}" if owner else f"item {last} of {path[-2]}"
    return str(last)


def _report(sink: Sink, err: ValidationError, prefix: KeyPath) -> None:
    path: KeyPath = (*prefix, *err.absolute_path)
    if str(err.validator) in _PARSER_OWNED or (path and path[0] in _OWN_SUBTREES):
        return
    if err.schema == DURATION:
        return  # a duration says what is wrong with it (invalid-duration, durations.py)
    if len(path) >= 5 and path[0] == "nodes" and path[3] == "with":
        return  # a step's parameters: checked against its own schema (stepcalls.py)
    if len(path) == 2 and path[0] in ("secrets", "env"):
        return  # an entry that is not a variable name is invalid-name (parse.py)
    instance = err.instance
    if err.validator in ("oneOf", "anyOf") and isinstance(instance, dict) and _is_form(path):
        _form(sink, err, path, instance)
        return
    if err.validator in ("minItems", "minProperties") and path == ("nodes",):
        sink.error("no-nodes", "a workflow needs at least one node", path)
        return
    node = len(path) == 2 and path[0] == "nodes"
    retry = path[-1:] == ("retry",) and isinstance(instance, int) \
        and not isinstance(instance, bool)
    report(sink, err, path, _what(path),
           unknown_hint=("a node has one kind key: " + ", ".join(authored_kinds())) if node
           else None,
           type_hint=f"write `retry: {{attempts: {instance}}}`" if retry else None,
           empty=_EMPTY.get(str(path[-1])) if path else None)


def _is_form(path: KeyPath) -> bool:
    """Where a oneOf of `required`s picks a form: a node, an action or compute, an edge."""
    return (len(path) == 2 and path[0] in ("nodes", "edges")) or (
        len(path) == 3 and path[0] == "nodes" and path[2] in ("action", "compute"))


def _form(sink: Sink, err: ValidationError, path: KeyPath,
          instance: dict[str, Any]) -> None:
    if path[0] == "edges":
        sink.error("edge-form", "an edge needs exactly one of 'to' or 'switch'", path)
    elif len(path) == 3 and path[2] == "compute":
        sink.error("compute-form", "compute needs exactly one of 'expr' or 'call'", path)
    elif len(path) == 3:
        sink.error("action-form", "action needs exactly one of 'shell' (an argv list) or "
                   "'call' (a Python hook)", path)
    else:
        node = path[1]
        authored = authored_kinds()
        kinds = [k for k in instance if k in authored]
        if len(kinds) > 1:
            sink.error("multiple-kinds", f"node '{node}' has several kind keys ("
                       + ", ".join(kinds) + "); keep exactly one", (*path, kinds[1]),
                       at_key=True)
        elif not kinds and all(k in authored or k in ("timeout", "retry", "description")
                               for k in instance):
            # An unknown key may be a misspelt kind: its 'did you mean' says it all.
            sink.error("missing-kind", f"node '{node}' needs one kind key: "
                       + ", ".join(authored), path, at_key=True)
