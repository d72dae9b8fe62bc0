"""Validate one loaded YAML document into a local (not yet flattened) workflow.

Every problem is collected into a `DiagnosticSink` with the key path where it
was found; nothing raises. The key tables at the top are the format's
vocabulary outside nodes (`schema.py` publishes the same sets and a test keeps
them equal); a node's body is parsed by its row in the node-kind table
(`kinds.py`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ._budget import DEFAULT_BUDGET, TemplateBudget, budget_from_yaml
from ._checker import Checker, case_key, type_name
from ._diagnostics import DiagnosticSink, KeyPath, did_you_mean
from ._docshape import check_document, check_node
from ._flow import ConcurrencySpec, RateLimitSpec, parse_concurrency, parse_rate_limit
from ._kinds import KINDS, authored_kinds
from ._model import (
    DEFAULT_MAX_STEPS,
    DEFAULT_NODE_TIMEOUT,
    OUTCOMES,
    RESERVED_NODE_IDS,
    CacheSpec,
    HookRef,
    Node,
    Retry,
    Spec,
)
from ._triggers import TriggerSpec, parse_triggers

# `secrets:` and `env:` name environment variables (DESIGN §9, runner/engine/_secrets.py).
ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

PATH_RE = re.compile(r"^\$(?:output|result)?(?:\.[A-Za-z0-9_-]+)*$")


@dataclass
class RawEdge:
    source: str  # node id, or "mount.exit"
    to: str | None
    on: str | None
    cases: dict[str, str]
    default: str | None
    key_path: KeyPath


@dataclass
class RawInclude:
    mount: str
    workflow: str
    input: Any
    key_path: KeyPath


@dataclass
class RawNode:
    id: str
    kind: str
    spec: Spec
    timeout: float | None
    retry: Retry
    description: str | None
    key_path: KeyPath
    # Decision choices given as a mapping build the node's switch edge.
    choice_targets: dict[str, str] | None = None
    cache: CacheSpec | None = None


@dataclass
class RawWorkflow:
    name: str
    path: Path
    title: str | None = None
    description: str | None = None
    input_schema: dict[str, Any] | None = None
    start: str = ""
    nodes: dict[str, RawNode] = field(default_factory=dict)
    edges: list[RawEdge] = field(default_factory=list)
    includes: dict[str, RawInclude] = field(default_factory=dict)
    exits: dict[str, tuple[str, KeyPath]] = field(default_factory=dict)
    max_steps: int = DEFAULT_MAX_STEPS
    presentation: str | None = None
    secrets: tuple[str, ...] = ()
    env: tuple[str, ...] = ()
    hooks: list[HookRef] = field(default_factory=list)
    template_budget: TemplateBudget = DEFAULT_BUDGET
    triggers: tuple[TriggerSpec, ...] = ()
    concurrency: ConcurrencySpec | None = None
    rate_limit: RateLimitSpec | None = None
    # (key path, text) of every template, for the reference checks (references.py).
    templates: list[tuple[KeyPath, str]] = field(default_factory=list)
    # (key path, name) of every channel a `notify` node names, checked against the
    # project's configured channels when the catalog knows them (compile.py).
    channels: list[tuple[KeyPath, str]] = field(default_factory=list)
    # Every node id written in the file, including nodes that failed their own checks,
    # so edges to them do not cascade into 'unknown node' errors.
    declared: set[str] = field(default_factory=set)


def _env_names(c: Checker, value: Any, key: str) -> tuple[str, ...]:
    """`secrets:` / `env:`: a list of environment variable names, each once."""
    if not isinstance(value, list):
        return ()  # the shape check said so
    names: list[str] = []
    for i, item in enumerate(value):
        if not isinstance(item, str) or not ENV_NAME_RE.match(item):
            c.sink.error("invalid-name", f"{key} entry {item!r} must be an environment "
                         "variable name matching [A-Za-z_][A-Za-z0-9_]*", (key, i))
        elif item in names:
            c.sink.error("duplicate-name", f"'{item}' is listed twice in {key}", (key, i))
        else:
            names.append(item)
    return tuple(names)


def parse_workflow(data: Any, name: str, path: Path, sink: DiagnosticSink) -> RawWorkflow | None:
    """Check one document; returns None only when it is not a mapping. Its shape is
    checked from the published JSON Schema (docshape.py); what follows converts and
    checks formats and the rules across fields."""
    c = Checker(sink, path.parent, shapes_checked=True)
    if data is None:
        sink.error("empty-file", "the file is empty; a workflow needs at least 'start' and "
                   "'nodes'", line=1, column=1)
        return None
    if not isinstance(data, dict):
        sink.error("wrong-type", f"a workflow file must be a mapping at the top level, not "
                   f"{type_name(data)}", (), line=1, column=1)
        return None
    check_document(sink, data)
    wf = RawWorkflow(name=name, path=path)
    if "template_budget" in data:  # first: the template checks below use it
        wf.template_budget, problems = budget_from_yaml(data["template_budget"])
        c.budget = wf.template_budget
        for where, message, at_key in problems:
            sink.error("invalid-budget", message, ("template_budget", *where), at_key=at_key)

    if "version" in data and data["version"] != 1:
        sink.error("unsupported-version", "only format version 1 exists; remove 'version' or "
                   "set it to 1", ("version",))
    if "name" in data:
        declared = data["name"]
        if declared != name:
            sink.error("name-mismatch", f"'name: {declared}' must equal the file name '{name}'",
                       ("name",), hint=f"rename the file to '{declared}.yaml' or set "
                       f"name: {name}")
    if "title" in data:
        wf.title = c.string(data["title"], ("title",), "title", template=True)
    if "description" in data:
        wf.description = c.string(data["description"], ("description",), "description",
                                  non_empty=False)
    if "presentation" in data:
        wf.presentation = c.string(data["presentation"], ("presentation",), "presentation",
                                   template=True)
    if "input" in data:
        wf.input_schema = c.schema(data["input"], ("input",), "input")
    if "max_steps" in data:
        wf.max_steps = c.integer(data["max_steps"], ("max_steps",), "max_steps", 1,
                                 1_000_000) or DEFAULT_MAX_STEPS
    if "secrets" in data:
        wf.secrets = _env_names(c, data["secrets"], "secrets")
    if "env" in data:
        wf.env = _env_names(c, data["env"], "env")

    default_timeout: float | None = DEFAULT_NODE_TIMEOUT
    default_retry = Retry()
    if "defaults" in data:
        d = c.mapping(data["defaults"], ("defaults",), "defaults")
        if d is not None:
            if "timeout" in d:
                ok, t = c.duration(d["timeout"], ("defaults", "timeout"), "timeout")
                if ok:
                    default_timeout = t
            if "retry" in d:
                default_retry = _retry(c, d["retry"], ("defaults", "retry")) or default_retry

    if "triggers" in data:
        wf.triggers = parse_triggers(data["triggers"], sink)
    if "concurrency" in data:
        wf.concurrency = parse_concurrency(data["concurrency"], sink)
    if "rate_limit" in data:
        wf.rate_limit = parse_rate_limit(data["rate_limit"], sink)
    c.body_node = lambda body_id, spec, kp: _body_node(c, body_id, spec, kp, default_timeout,
                                                       default_retry)
    if "includes" in data:
        _includes(c, wf, data["includes"])
    if "nodes" in data:
        _nodes(c, wf, data["nodes"], default_timeout, default_retry)
    if "start" in data:
        start = c.string(data["start"], ("start",), "start")
        wf.start = start or ""
    if "edges" in data:
        _edges(c, wf, data["edges"])
    if "exits" in data:
        _exits(c, wf, data["exits"])
    wf.hooks = c.hooks
    wf.templates = c.templates
    wf.channels = c.channels
    return wf


def _retry(c: Checker, value: Any, kp: KeyPath) -> Retry | None:
    # `retry: 3` is the common slip: say the mapping it means.
    count = isinstance(value, int) and not isinstance(value, bool)
    m = c.mapping(value, kp, "retry", hint=f"write `retry: {{attempts: {value}}}`" if count
                  else None)
    if m is None:
        return None
    attempts = c.integer(m.get("attempts", 1), (*kp, "attempts"), "retry attempts", 1, 100)
    backoff: float | None = 0.0
    if "backoff" in m:
        ok, backoff = c.duration(m["backoff"], (*kp, "backoff"), "retry backoff")
        if not ok:
            return None
    max_delay: float | None = None
    if "max_delay" in m:
        ok, max_delay = c.duration(m["max_delay"], (*kp, "max_delay"), "retry max_delay")
        if not ok:
            return None
    if attempts is None:
        return None
    return Retry(attempts=attempts, backoff=backoff or 0.0, max_delay=max_delay)


def _includes(c: Checker, wf: RawWorkflow, value: Any) -> None:
    m = c.mapping(value, ("includes",), "includes")
    if m is None:
        return
    for mount, spec in m.items():
        kp: KeyPath = ("includes", mount)
        if c.ident(mount, kp, "include mount", at_key=True) is None:
            continue
        if mount in RESERVED_NODE_IDS:
            c.sink.error("reserved-name", f"'{mount}' is reserved and cannot name a mount", kp,
                         at_key=True)
            continue
        if isinstance(spec, str):
            spec = {"workflow": spec}
        s = c.mapping(spec, kp, f"include '{mount}'")
        if s is None:
            continue
        workflow = c.string(s.get("workflow", ""), (*kp, "workflow"), "workflow") if (
            "workflow" in s) else None
        inp = s.get("input")
        if inp is not None:
            c.templates_in(inp, (*kp, "input"))
        if workflow:
            wf.includes[mount] = RawInclude(mount, workflow, inp, kp)


def _nodes(c: Checker, wf: RawWorkflow, value: Any, default_timeout: float | None,
           default_retry: Retry) -> None:
    m = c.mapping(value, ("nodes",), "nodes")
    if m is None:
        return
    for node_id, spec in m.items():
        if c.sink.stopped:  # a generated file with 100,000 mistakes: nothing more is kept
            break
        kp: KeyPath = ("nodes", node_id)
        if c.ident(node_id, kp, "node id", at_key=True) is None:
            continue
        wf.declared.add(node_id)
        if node_id in RESERVED_NODE_IDS:
            c.sink.error("reserved-name", f"node id '{node_id}' is reserved (list, start, "
                         "status, cancel, pause, resume, answer)", kp, at_key=True)
            continue
        if node_id in wf.includes:
            c.sink.error("duplicate-id", f"'{node_id}' names both a node and an include mount",
                         kp, at_key=True)
            continue
        check_node(c.sink, node_id, spec)
        node = _node(c, node_id, spec, kp, default_timeout, default_retry)
        if node is not None:
            wf.nodes[node_id] = node


def _node(c: Checker, node_id: str, spec: Any, kp: KeyPath, default_timeout: float | None,
          default_retry: Retry) -> RawNode | None:
    m = c.mapping(spec, kp, f"node '{node_id}'")
    if m is None:
        return None
    authored = authored_kinds()
    kinds = [k for k in m if k in authored]
    if len(kinds) != 1:  # none or several: the shape check said which
        return None
    kind = kinds[0]
    timeout = default_timeout
    if "timeout" in m:
        ok, t = c.duration(m["timeout"], (*kp, "timeout"), "timeout")
        timeout = t if ok else default_timeout
    retry = default_retry
    if "retry" in m:
        retry = _retry(c, m["retry"], (*kp, "retry")) or default_retry
    description = None
    if "description" in m:
        description = c.string(m["description"], (*kp, "description"), "description",
                               non_empty=False)
    cache = _cache(c, m["cache"], (*kp, "cache"), kind) if "cache" in m else None
    row = KINDS[kind]
    assert row.parse is not None  # authored kinds have a parser
    parsed = row.parse(c, m[kind], (*kp, kind))
    if parsed is None:
        return None
    if not row.retries:
        if "retry" in m:
            c.sink.error("misplaced-retry", f"`retry:` does not apply to a {kind} node",
                         (*kp, "retry"), at_key=True, hint=row.retry_fix)
        retry = Retry()  # `defaults.retry` does not reach it either
    return RawNode(node_id, row.node_kind, parsed.spec, timeout, retry, description, kp,
                   parsed.choice_targets, cache)


def _cache(c: Checker, value: Any, kp: KeyPath, kind: str) -> CacheSpec | None:
    """`cache: {ttl: 7d, key: TEMPLATE}` (issue 39); `cache: 7d` is the ttl alone."""
    if kind in ("checkpoint", "fail", "notify"):
        c.sink.error("invalid-value", f"a {kind} node cannot be cached (it has no result to "
                     "reuse)", kp, at_key=True)
        return None
    if isinstance(value, (str, int, float)) and not isinstance(value, bool):
        value = {"ttl": value}
    m = c.mapping(value, kp, "cache", hint="write `cache: {ttl: 7d}`")
    if m is None:
        return None
    if "ttl" not in m:
        return None  # the shape check said so
    ok, ttl = c.duration(m["ttl"], (*kp, "ttl"), "cache ttl")
    if not ok:
        return None
    if ttl is None:
        c.sink.error("invalid-duration", "cache ttl: give a duration like 1h or 7d", (*kp, "ttl"))
        return None
    key = m.get("key")
    if key is not None:
        key = c.string(key, (*kp, "key"), "cache key", template=True)
    return CacheSpec(ttl=ttl, key=key or None)


def _body_node(c: Checker, body_id: str, spec: Any, kp: KeyPath,
               default_timeout: float | None, default_retry: Retry) -> Node | None:
    """A fan-out's branch or item body: one node, parsed as any node is."""
    raw = _node(c, body_id, spec, kp, default_timeout, default_retry)
    if raw is None:
        return None
    return Node(raw.id, raw.kind, raw.spec, local_id=raw.id, timeout=raw.timeout,
                retry=raw.retry, description=raw.description)


def _edges(c: Checker, wf: RawWorkflow, value: Any) -> None:
    if not isinstance(value, list):
        return
    for i, item in enumerate(value):
        if c.sink.stopped:
            break
        kp: KeyPath = ("edges", i)
        m = c.mapping(item, kp, "an edge")
        if m is None:
            continue
        source = m.get("from")
        if "from" in m and not isinstance(source, str):
            continue
        has_to, has_switch = "to" in m, "switch" in m
        if has_to == has_switch:
            continue
        if source is None:
            continue
        if has_to:
            to = m["to"]
            if not isinstance(to, str):
                continue
            wf.edges.append(RawEdge(source, to, None, {}, None, kp))
            continue
        skp: KeyPath = (*kp, "switch")
        s = c.mapping(m["switch"], skp, "switch")
        if s is None:
            continue
        on = s.get("on")
        if "on" in s and not isinstance(on, str):
            continue
        if isinstance(on, str) and not PATH_RE.match(on):
            c.sink.error("invalid-path", f"switch 'on' must be a path like $.route, "
                         f"$output.route or $result.outcome, not '{on}'", (*skp, "on"))
            continue
        cases: dict[str, str] = {}
        raw_cases = s.get("cases")
        if "cases" in s:
            cm = c.mapping(raw_cases, (*skp, "cases"), "cases")
            if cm is None:
                continue
            if not cm:
                continue
            for k, target in cm.items():
                if not isinstance(target, str):
                    continue
                if case_key(k) in cases:
                    c.sink.error("duplicate-case", f"case '{case_key(k)}' appears twice (cases "
                                 "compare as text)", (*skp, "cases", k), at_key=True)
                    continue
                cases[case_key(k)] = target
            if on == "$result.outcome":
                for k in cases:
                    if k not in OUTCOMES:
                        c.sink.error("invalid-outcome", f"'{k}' is not a node outcome; cases on "
                                     "$result.outcome are ok, failed, timed_out, cancelled",
                                     (*skp, "cases", k), at_key=True,
                                     hint=did_you_mean(k, OUTCOMES))
        default = s.get("default")
        if default is not None and not isinstance(default, str):
            default = None
        if on is None or not cases:
            continue
        wf.edges.append(RawEdge(source, None, on, cases, default, kp))


def _exits(c: Checker, wf: RawWorkflow, value: Any) -> None:
    m = c.mapping(value, ("exits",), "exits")
    if m is None:
        return
    for name, spec in m.items():
        kp: KeyPath = ("exits", name)
        if c.ident(name, kp, "exit name", at_key=True) is None:
            continue
        if isinstance(spec, str):
            spec = {"from": spec}
        s = c.mapping(spec, kp, f"exit '{name}'")
        if s is None:
            continue
        source = s.get("from")
        if "from" in s and isinstance(source, str):
            wf.exits[name] = (source, (*kp, "from"))

