"""The fan-out node kinds' shapes (DESIGN §10): `parallel` and `map`.

A branch or item body is one inline node, parsed by the same code as any node
(`parse._node`, handed in as `body_node`), or `{workflow: NAME|PATH, input: ...}`,
a linked child run. Every mistake is a positioned diagnostic: a bad `over`, a
`max_concurrency` below 1, a checkpoint (or another fan-out) as a body, an `as`
that hides a name templates see.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from runner.canonical import canonical_json

from .diagnostics import KeyPath, did_you_mean
from .model import (
    DEFAULT_MAP_CONCURRENCY,
    DEFAULT_MAX_ITEMS,
    ChildWorkflowBody,
    MapSpec,
    Node,
    ParallelSpec,
)

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

BodyNode = Callable[[str, Any, KeyPath], Node | None]


def parse_parallel(c: Any, node_id: str, body: Any, kp: KeyPath,
                   body_node: BodyNode) -> ParallelSpec | None:
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
            c.sink.error("no-branches", "a parallel node needs at least one branch",
                         (*kp, "branches"))
            ok = False
        else:
            for name, spec in bm.items():
                bkp: KeyPath = (*kp, "branches", name)
                if c.ident(name, bkp, "branch name", at_key=True) is None:
                    ok = False
                    continue
                parsed = _body(c, f"{node_id}.{name}", spec, bkp, body_node)
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
    return ParallelSpec(tuple(branches), limit, fail_fast)


def parse_map(c: Any, node_id: str, body: Any, kp: KeyPath,
              body_node: BodyNode) -> MapSpec | None:
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
        do = _body(c, f"{node_id}[]", m["do"], (*kp, "do"), body_node)
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
    return MapSpec(over, do, as_name, limit, fail_fast, max_items)


def _over(c: Any, value: Any, kp: KeyPath) -> str | None:
    if not isinstance(value, str) or not _TEMPLATE.search(value):
        found = f"the text {value!r}" if isinstance(value, str) else \
            f"a YAML {type(value).__name__}"
        hint = ('a fixed list goes in one: over: "{{ [1, 2] }}"' if isinstance(value, list)
                else 'for example: over: "{{ outputs.ls.files }}"')
        c.sink.error("bad-over", f"`over` must be a template that yields a list, not {found}",
                     kp, hint=hint)
        return None
    c.template(value, kp)
    return value


def _body(c: Any, body_id: str, spec: Any, kp: KeyPath,
          body_node: BodyNode) -> Node | ChildWorkflowBody | None:
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
    return body_node(body_id, m, kp)


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
