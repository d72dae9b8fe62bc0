"""The fan-out node kinds (DESIGN §10, ADR 0008): `parallel` and `map`, their specs,
body parsers, schemas and rows of the node-kind table.

A branch or item body is one inline node, parsed by the same code as any node
(the parser hands it in as `Checker.body_node`, with the file's defaults), or
`{workflow: NAME|PATH, input: ...}`, a linked child run. Every mistake is a
positioned diagnostic: a bad `over`, a `max_concurrency` below 1, a checkpoint (or
another fan-out) as a body, an `as` that hides a name templates see.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from runner._canonical import canonical_json

from ._builtin_kinds import BUILTIN_KINDS
from ._diagnostics import KeyPath, did_you_mean
from ._kinddef import DURATION, ID_PATTERN, TEMPLATE, KindDef, Parsed, obj
from ._model import Node

if TYPE_CHECKING:  # a body is parsed by a checker handed in: the run loop loads none
    from ._checker import Checker

#: A map's default item ceiling and concurrency.
DEFAULT_MAX_ITEMS = 10_000
DEFAULT_MAP_CONCURRENCY = 8


@dataclass(frozen=True)
class ChildWorkflowBody:
    """A branch or item body that runs as a linked child run of its own (`workflow:`)."""

    workflow: str
    input: Any = None

    def to_json(self) -> dict[str, Any]:
        return {"workflow": self.workflow, "input": self.input}


@dataclass(frozen=True)
class ParallelSpec:
    """Named branches run at once; `outputs.NODE.<branch>`."""

    branches: tuple[tuple[str, Node | ChildWorkflowBody], ...]
    max_concurrency: int | None = None  # None: every branch at once
    fail_fast: bool = True

    def to_json(self) -> dict[str, Any]:
        return {"branches": {name: b.to_json() for name, b in self.branches},
                "max_concurrency": self.max_concurrency, "fail_fast": self.fail_fast}


@dataclass(frozen=True)
class MapSpec:
    """One body per item of a list; `outputs.NODE` in item order."""

    over: str  # a template that must yield a list
    body: Node | ChildWorkflowBody
    as_name: str = "item"
    max_concurrency: int = DEFAULT_MAP_CONCURRENCY
    fail_fast: bool = False
    max_items: int = DEFAULT_MAX_ITEMS

    def to_json(self) -> dict[str, Any]:
        return {"over": self.over, "as": self.as_name, "do": self.body.to_json(),
                "max_concurrency": self.max_concurrency, "fail_fast": self.fail_fast,
                "max_items": self.max_items}


PARALLEL_KEYS = ("branches", "max_concurrency", "fail_fast")
MAP_KEYS = ("over", "as", "do", "max_concurrency", "fail_fast", "max_items")
WORKFLOW_BODY_KEYS = ("workflow", "input")
#: A map's item ceiling may be raised this far (the store's rows stay small per item).
MAX_ITEMS_CEILING = 1_000_000
MAX_CONCURRENCY = 1_000
#: Names a body's templates already see: `as` may not hide one.
TAKEN_NAMES = ("input", "outputs", "results", "run", "project", "secrets", "env", "index")
_NOT_A_BODY = ("checkpoint", "parallel", "map")
_TEMPLATE = re.compile(r"\{\{|\{%")

def parse_parallel(c: Checker, body: Any, kp: KeyPath) -> Parsed | None:
    node_id = str(kp[1]) if len(kp) > 1 else "parallel"
    m = c.mapping(body, kp, "parallel")
    if m is None:
        return None
    c.keys(m, PARALLEL_KEYS, kp, "parallel", required=("branches",))
    branches: list[tuple[str, Node | ChildWorkflowBody]] = []
    ok = True
    raw = m.get("branches")
    if raw is not None:
        bm = c.mapping(raw, (*kp, "branches"), "branches",
                       hint="name each branch: branches: {security: {agent: ...}}")
        if bm is None:
            ok = False
        elif not bm:
            ok = False  # the schema's minProperties says so (docshape)
        else:
            for name, spec in bm.items():
                bkp: KeyPath = (*kp, "branches", name)
                if c.ident(name, bkp, "branch name", at_key=True) is None:
                    ok = False
                    continue
                parsed = _body(c, f"{node_id}.{name}", spec, bkp)
                if parsed is None:
                    ok = False
                else:
                    branches.append((name, parsed))
    limit = None
    if "max_concurrency" in m:
        limit = c.integer(m["max_concurrency"], (*kp, "max_concurrency"), "max_concurrency",
                          1, MAX_CONCURRENCY)
        ok = ok and limit is not None
    fail_fast = True
    if "fail_fast" in m:
        flag = c.boolean(m["fail_fast"], (*kp, "fail_fast"), "fail_fast")
        ok = ok and flag is not None
        fail_fast = bool(flag)
    if not ok or raw is None:
        return None
    return Parsed(ParallelSpec(tuple(branches), limit, fail_fast))


def parse_map(c: Checker, body: Any, kp: KeyPath) -> Parsed | None:
    node_id = str(kp[1]) if len(kp) > 1 else "map"
    m = c.mapping(body, kp, "map")
    if m is None:
        return None
    c.keys(m, MAP_KEYS, kp, "map", required=("over", "do"))
    ok = True
    over = None
    if "over" in m:
        over = _over(c, m["over"], (*kp, "over"))
        ok = ok and over is not None
    as_name = "item"
    if "as" in m:
        name = c.ident(m["as"], (*kp, "as"), "`as`")
        if name is not None and name in TAKEN_NAMES:
            c.sink.error("name-taken", f"`as: {name}` would hide the '{name}' templates see; "
                         "choose another name", (*kp, "as"), hint="for example: as: file")
            name = None
        ok = ok and name is not None
        as_name = name or as_name
    do = None
    if "do" in m:
        do = _body(c, f"{node_id}[]", m["do"], (*kp, "do"))
        ok = ok and do is not None
    limit = DEFAULT_MAP_CONCURRENCY
    if "max_concurrency" in m:
        got = c.integer(m["max_concurrency"], (*kp, "max_concurrency"), "max_concurrency", 1,
                        MAX_CONCURRENCY)
        ok = ok and got is not None
        limit = got or limit
    fail_fast = False
    if "fail_fast" in m:
        flag = c.boolean(m["fail_fast"], (*kp, "fail_fast"), "fail_fast")
        ok = ok and flag is not None
        fail_fast = bool(flag)
    max_items = DEFAULT_MAX_ITEMS
    if "max_items" in m:
        got = c.integer(m["max_items"], (*kp, "max_items"), "max_items", 1, MAX_ITEMS_CEILING)
        ok = ok and got is not None
        max_items = got or max_items
    if not ok or over is None or do is None:
        return None
    return Parsed(MapSpec(over, do, as_name, limit, fail_fast, max_items))


def _over(c: Checker, value: Any, kp: KeyPath) -> str | None:
    if not isinstance(value, str):
        return None  # not a string: the schema's shape check says so (docshape)
    if not _TEMPLATE.search(value):
        c.sink.error("bad-over", f"`over` must be a template that yields a list, not the "
                     f"text {value!r}", kp,
                     hint='for example: over: "{{ outputs.ls.files }}"')
        return None
    c.template(value, kp)
    return value


def _body(c: Checker, body_id: str, spec: Any, kp: KeyPath) -> Node | ChildWorkflowBody | None:
    m = c.mapping(spec, kp, "a branch body",
                  hint="one node ({action: ...}) or {workflow: NAME, input: ...}")
    if m is None:
        return None
    if "workflow" in m:
        c.keys(m, WORKFLOW_BODY_KEYS, kp, "a workflow body", required=("workflow",))
        name = c.string(m["workflow"], (*kp, "workflow"), "workflow")
        if "input" in m:
            try:  # it goes into the digest: JSON with string keys only
                canonical_json(m["input"])
            except ValueError:
                c.sink.error("wrong-type", "a child run's input must be JSON: mappings with "
                             "string keys, lists, strings, numbers, booleans", (*kp, "input"))
                return None
            c.templates_in(m["input"], (*kp, "input"))
        return None if name is None else ChildWorkflowBody(name, m.get("input"))
    for kind in _NOT_A_BODY:
        if kind in m:
            what = "a checkpoint" if kind == "checkpoint" else f"a {kind} node"
            c.sink.error("not-a-body", f"{what} cannot be a branch or item body "
                         "(it would stop or fan out one item of many)", (*kp, kind),
                         at_key=True, hint="run it as a child: {workflow: NAME, input: ...}")
            return None
    assert c.body_node is not None, "the parser sets body_node before any node"
    node: Node | None = c.body_node(body_id, m, kp)
    return node


def unknown_branch(c_error: Callable[..., None], text: str, kp: KeyPath,
                   branches: dict[str, tuple[str, ...]]) -> None:
    """`outputs.P.X` where P is a parallel node without a branch X."""
    for m in re.finditer(r"\boutputs\.([A-Za-z_][\w-]*)\.([A-Za-z_]\w*)", text):
        node, branch = m.group(1), m.group(2)
        names = branches.get(node)
        if names is not None and branch not in names:
            c_error("unknown-branch", f"outputs.{node}.{branch}: parallel node '{node}' has no "
                    f"branch '{branch}'", kp, hint=did_you_mean(branch, names)
                    or f"its branches: {', '.join(names)}")


def _schemas() -> tuple[dict[str, Any], dict[str, Any]]:
    """The body schema (any built-in kind but checkpoint, or a child run) and the two
    kinds' schemas."""
    inline = {k.name: k.schema for k in BUILTIN_KINDS if k.authored and k.name != "checkpoint"}
    retry = obj({"attempts": {"type": "integer", "minimum": 1, "maximum": 100},
                 "backoff": DURATION, "max_delay": DURATION}, ("attempts",))
    body = {"anyOf": [
        {"type": "object", "additionalProperties": False,
         "properties": {"timeout": DURATION, "retry": retry, "description": {"type": "string"},
                        **inline},
         "oneOf": [{"required": [k]} for k in inline]},
        obj({"workflow": {"type": "string", "description": "A workflow name or a ./path.yaml"},
             "input": {"description": "Templates rendered natively in the node's scope."}},
            ("workflow",), "A linked child run with its own bundle.")]}
    concurrency = {"type": "integer", "minimum": 1, "maximum": MAX_CONCURRENCY}
    parallel = obj(
        {"branches": {"type": "object", "minProperties": 1,
                      "propertyNames": {"pattern": ID_PATTERN}, "additionalProperties": body},
         "max_concurrency": concurrency, "fail_fast": {"type": "boolean"}},
        ("branches",), "Named branches at once; outputs.NODE.<branch>. fail_fast: true by "
        "default.")
    map_ = obj(
        {"over": {**TEMPLATE, "description": "A template that yields a list."},
         "as": {"type": "string", "pattern": ID_PATTERN},
         "do": body, "max_concurrency": concurrency, "fail_fast": {"type": "boolean"},
         "max_items": {"type": "integer", "minimum": 1, "maximum": MAX_ITEMS_CEILING}},
        ("over", "do"), "One body per item (8 at once, at most 10,000 items by default); "
        "outputs.NODE is the list of item outputs in order.")
    return parallel, map_


_PARALLEL_SCHEMA, _MAP_SCHEMA = _schemas()
PARALLEL = KindDef("parallel", "Named branches run at once (fail_fast by default).", "⫴",
                   _PARALLEL_SCHEMA, PARALLEL_KEYS, parse_parallel, retries=False,
                   retry_fix="put `retry:` on each branch that may fail: branches: {NAME: "
                   "{action: ..., retry: {attempts: 3}}} (ADR 0008: a branch is retried "
                   "alone)")
MAP = KindDef("map", "One body per item of a list, max_concurrency at once.", "≡",
              _MAP_SCHEMA, MAP_KEYS, parse_map, retries=False,
              retry_fix="put `retry:` on the body: do: {action: ..., retry: {attempts: 3}} "
              "(ADR 0008: each item is retried alone)")
FANOUT_KINDS: tuple[KindDef, ...] = (PARALLEL, MAP)
