"""Validate one loaded YAML document into a local (not yet flattened) workflow.

Every problem is collected into a `DiagnosticSink` with the key path where it
was found; nothing raises. The key tables at the top are the format's
vocabulary: `schema.py` publishes the same sets and a test keeps them equal.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .budget import DEFAULT_BUDGET, TemplateBudget, budget_from_yaml
from .diagnostics import DiagnosticSink, KeyPath, did_you_mean
from .durations import DurationError, parse_duration
from .fanout import MAP_KEYS, PARALLEL_KEYS, parse_map, parse_parallel
from .jsonschemas import schema_problem_at
from .model import (
    AUTHOR_KINDS,
    DEFAULT_FAIL_CODE,
    DEFAULT_MAX_STEPS,
    DEFAULT_NODE_TIMEOUT,
    DEFAULT_OUTPUT_CAP,
    DEFAULT_REMINDERS,
    OUTCOMES,
    RESERVED_NODE_IDS,
    ActionSpec,
    AgentSpec,
    CheckpointSpec,
    ComputeSpec,
    FailSpec,
    HookRef,
    Node,
    NotifySpec,
    Retry,
    Spec,
)
from .sources import sha256_hex
from .template_checks import shell_code_items, shell_quoting_problems
from .templates import check_budget, check_syntax

TOP_KEYS = ("version", "name", "title", "description", "input", "start", "nodes", "edges",
            "includes", "exits", "max_steps", "presentation", "defaults", "secrets", "env",
            "template_budget")
# `secrets:` and `env:` name environment variables (DESIGN §9, runner/engine/secrets.py).
ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
DEFAULTS_KEYS = ("timeout", "retry")
NODE_COMMON_KEYS = ("timeout", "retry", "description")
RETRY_KEYS = ("attempts", "backoff", "max_delay")
KIND_KEYS: dict[str, tuple[str, ...]] = {
    "agent": ("prompt", "output", "reminders"),
    "decision": ("question", "choices", "field", "reminders"),
    "compute": ("expr", "call"),
    "action": ("shell", "use_shell", "call", "cwd", "env", "stdin", "allow_nonzero_exit",
               "output_cap", "parse"),
    "notify": ("kind", "message"),
    "checkpoint": ("summary",),
    "fail": ("message", "code"),
    "parallel": PARALLEL_KEYS,
    "map": MAP_KEYS,
}
EDGE_KEYS = ("from", "to", "switch")
SWITCH_KEYS = ("on", "cases", "default")
INCLUDE_KEYS = ("workflow", "input")
EXIT_KEYS = ("from",)

ID_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]*$")
PATH_RE = re.compile(r"^\$(?:output|result)?(?:\.[A-Za-z0-9_-]+)*$")
MODULE_HOOK_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*:[A-Za-z_]\w*$")
FAIL_CODE_RE = re.compile(r"^[A-Za-z][A-Za-z0-9_]{0,63}$")
FILE_HOOK_RE = re.compile(r"^(\.{1,2}/[^:]+\.py):([A-Za-z_]\w*)$")
MAX_OUTPUT_CAP = 64 * 1024 * 1024


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
    # (key path, text) of every template, for the reference checks (references.py).
    templates: list[tuple[KeyPath, str]] = field(default_factory=list)
    # Every node id written in the file, including nodes that failed their own checks,
    # so edges to them do not cascade into 'unknown node' errors.
    declared: set[str] = field(default_factory=set)


class _Checker:
    """Walks one document; small typed accessors that report and return None."""

    def __init__(self, sink: DiagnosticSink, base_dir: Path) -> None:
        self.sink = sink
        self.base_dir = base_dir
        self.hooks: list[HookRef] = []
        self.budget = DEFAULT_BUDGET  # what constant template parts are tried against
        self.templates: list[tuple[KeyPath, str]] = []

    # -- shapes -----------------------------------------------------------------
    def mapping(self, value: Any, kp: KeyPath, what: str,
                hint: str | None = None) -> dict[str, Any] | None:
        if isinstance(value, dict):
            return value
        self.sink.error("wrong-type", f"{what} must be a mapping, not {_type_name(value)}", kp,
                        hint=hint)
        return None

    def keys(self, m: Mapping[Any, Any], allowed: tuple[str, ...], kp: KeyPath,
             what: str, required: tuple[str, ...] = ()) -> None:
        if self.sink.stopped:  # past the cap: skip the 'did you mean' work as well
            return
        for k in m:
            if not isinstance(k, str) or k not in allowed:
                hint = did_you_mean(str(k), allowed)
                self.sink.error("unknown-key", f"unknown key '{k}' in {what}", (*kp, k),
                                at_key=True,
                                hint=hint or f"expected one of: {', '.join(allowed)}")
        for k in required:
            if k not in m:
                self.sink.error("missing-key", f"{what} needs '{k}'", kp, at_key=bool(kp))

    def string(self, value: Any, kp: KeyPath, what: str, *, template: bool = False,
               non_empty: bool = True) -> str | None:
        if not isinstance(value, str):
            self.sink.error("wrong-type", f"{what} must be a string, not {_type_name(value)}",
                            kp)
            return None
        if non_empty and not value.strip():
            self.sink.error("empty-value", f"{what} must not be empty", kp)
            return None
        if template:
            self.template(value, kp)
        return value

    def template(self, text: str, kp: KeyPath) -> None:
        self.templates.append((kp, text))
        problem = check_syntax(text)
        if problem is not None:
            _, message = problem
            self.sink.error("template-syntax", f"template syntax error: {message}", kp)
            return
        over = check_budget(text, self.budget)
        if over is not None:
            self.sink.error("template-budget", f"template over its budget: {over[1]}", kp)

    def templates_in(self, value: Any, kp: KeyPath) -> None:
        """Check every string inside an input mapping or list as a template."""
        if isinstance(value, str):
            self.template(value, kp)
        elif isinstance(value, dict):
            for k, v in value.items():
                self.templates_in(v, (*kp, k))
        elif isinstance(value, list):
            for i, v in enumerate(value):
                self.templates_in(v, (*kp, i))

    def boolean(self, value: Any, kp: KeyPath, what: str) -> bool | None:
        if isinstance(value, bool):
            return value
        self.sink.error("wrong-type", f"{what} must be true or false, not {_type_name(value)}",
                        kp)
        return None

    def integer(self, value: Any, kp: KeyPath, what: str, lo: int, hi: int) -> int | None:
        if isinstance(value, bool) or not isinstance(value, int):
            self.sink.error("wrong-type", f"{what} must be an integer, not {_type_name(value)}",
                            kp)
            return None
        if not lo <= value <= hi:
            self.sink.error("out-of-range", f"{what} must be between {lo} and {hi}", kp)
            return None
        return value

    def duration(self, value: Any, kp: KeyPath, what: str) -> tuple[bool, float | None]:
        try:
            return True, parse_duration(value)
        except DurationError as exc:
            self.sink.error("invalid-duration", f"{what}: {exc}", kp)
            return False, None

    def ident(self, value: Any, kp: KeyPath, what: str, *, at_key: bool = False) -> str | None:
        if not isinstance(value, str) or not ID_RE.match(value):
            self.sink.error("invalid-id", f"{what} '{value}' must match [A-Za-z_][A-Za-z0-9_-]*",
                            kp, at_key=at_key)
            return None
        return value

    def schema(self, value: Any, kp: KeyPath, what: str) -> dict[str, Any] | None:
        if not isinstance(value, dict):
            self.sink.error("wrong-type", f"{what} must be a JSON Schema mapping, not "
                            f"{_type_name(value)}", kp)
            return None
        found = schema_problem_at(value)
        if found is not None:
            problem, inner = found  # placed on the offending key, not on `input:`/`output:`
            self.sink.error("invalid-schema", f"{what} is not a valid JSON Schema: {problem}",
                            (*kp, *inner))
            return None
        return value

    def hook(self, value: Any, kp: KeyPath) -> HookRef | None:
        if not isinstance(value, str):
            self.sink.error("wrong-type", f"a hook must be a string like 'module:function' or "
                            f"'./file.py:function', not {_type_name(value)}", kp)
            return None
        ref = value.strip()
        if MODULE_HOOK_RE.match(ref):
            module, function = ref.split(":")
            hook = HookRef(ref=ref, module=module, function=function)
        else:
            match = FILE_HOOK_RE.match(ref)
            if match and "\0" in ref:
                self.sink.error("invalid-hook", "a hook's file path cannot contain a NUL "
                                "byte", kp)
                return None
            if not match:
                self.sink.error("invalid-hook", f"'{value}' is not a hook; write "
                                "'package.module:function' or './file.py:function'", kp)
                return None
            try:
                file = (self.base_dir / match.group(1)).resolve()
                # A FIFO or device would block the read, a directory cannot be one.
                if not file.is_file():
                    raise FileNotFoundError(match.group(1))
                data = file.read_bytes()
            except (OSError, RuntimeError):  # RuntimeError: a symlink loop (Python < 3.13)
                self.sink.error("hook-not-found", f"hook file '{match.group(1)}' does not exist "
                                f"next to this workflow (or is not a readable file)", kp)
                return None
            hook = HookRef(ref=ref, file=str(file), function=match.group(2),
                           sha256=sha256_hex(data))
        self.hooks.append(hook)
        return hook


def _type_name(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "a mapping"
    return type(value).__name__


def case_key(value: Any) -> str:
    """Switch values compare as strings: true -> 'true', 3 -> '3', null -> 'null'."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _env_names(c: _Checker, value: Any, key: str) -> tuple[str, ...]:
    """`secrets:` / `env:`: a list of environment variable names, each once."""
    if not isinstance(value, list):
        c.sink.error("wrong-type", f"{key} must be a list of environment variable names, not "
                     f"{_type_name(value)}", (key,))
        return ()
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
    """Check one document's shape; returns None only when it is not a mapping."""
    c = _Checker(sink, path.parent)
    if data is None:
        sink.error("empty-file", "the file is empty; a workflow needs at least 'start' and "
                   "'nodes'", line=1, column=1)
        return None
    if not isinstance(data, dict):
        sink.error("wrong-type", f"a workflow file must be a mapping at the top level, not "
                   f"{_type_name(data)}", (), line=1, column=1)
        return None
    c.keys(data, TOP_KEYS, (), "the workflow", required=("start", "nodes"))
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
            c.keys(d, DEFAULTS_KEYS, ("defaults",), "defaults")
            if "timeout" in d:
                ok, t = c.duration(d["timeout"], ("defaults", "timeout"), "timeout")
                if ok:
                    default_timeout = t
            if "retry" in d:
                default_retry = _retry(c, d["retry"], ("defaults", "retry")) or default_retry

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
    return wf


def _retry(c: _Checker, value: Any, kp: KeyPath) -> Retry | None:
    # `retry: 3` is the common slip: say the mapping it means.
    count = isinstance(value, int) and not isinstance(value, bool)
    m = c.mapping(value, kp, "retry", hint=f"write `retry: {{attempts: {value}}}`" if count
                  else None)
    if m is None:
        return None
    c.keys(m, RETRY_KEYS, kp, "retry", required=("attempts",))
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


def _includes(c: _Checker, wf: RawWorkflow, value: Any) -> None:
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
        c.keys(s, INCLUDE_KEYS, kp, f"include '{mount}'", required=("workflow",))
        workflow = c.string(s.get("workflow", ""), (*kp, "workflow"), "workflow") if (
            "workflow" in s) else None
        inp = s.get("input")
        if inp is not None:
            c.templates_in(inp, (*kp, "input"))
        if workflow:
            wf.includes[mount] = RawInclude(mount, workflow, inp, kp)


def _nodes(c: _Checker, wf: RawWorkflow, value: Any, default_timeout: float | None,
           default_retry: Retry) -> None:
    m = c.mapping(value, ("nodes",), "nodes")
    if m is None:
        return
    if not m:
        c.sink.error("no-nodes", "a workflow needs at least one node", ("nodes",))
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
        node = _node(c, node_id, spec, kp, default_timeout, default_retry)
        if node is not None:
            wf.nodes[node_id] = node


def _node(c: _Checker, node_id: str, spec: Any, kp: KeyPath, default_timeout: float | None,
          default_retry: Retry) -> RawNode | None:
    m = c.mapping(spec, kp, f"node '{node_id}'")
    if m is None:
        return None
    kinds = [k for k in m if k in AUTHOR_KINDS]
    allowed = (*AUTHOR_KINDS, *NODE_COMMON_KEYS)
    for k in m:
        if k not in allowed and not c.sink.stopped:
            hint = did_you_mean(str(k), allowed)
            c.sink.error("unknown-key", f"unknown key '{k}' in node '{node_id}'", (*kp, k),
                         at_key=True, hint=hint or "a node has one kind key: "
                         + ", ".join(AUTHOR_KINDS))
    if not kinds:
        if not any(k not in allowed for k in m):
            c.sink.error("missing-kind", f"node '{node_id}' needs one kind key: "
                         + ", ".join(AUTHOR_KINDS), kp, at_key=True)
        return None
    if len(kinds) > 1:
        c.sink.error("multiple-kinds", f"node '{node_id}' has several kind keys ("
                     + ", ".join(kinds) + "); keep exactly one", (*kp, kinds[1]), at_key=True)
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
    body = m[kind]
    bkp: KeyPath = (*kp, kind)
    choice_targets: dict[str, str] | None = None
    parsed: Spec | None
    if kind == "agent":
        parsed = _agent(c, body, bkp)
    elif kind == "decision":
        parsed, choice_targets = _decision(c, body, bkp)
    elif kind == "compute":
        parsed = _compute(c, body, bkp)
    elif kind == "action":
        parsed = _action(c, body, bkp)
    elif kind == "notify":
        parsed = _notify(c, body, bkp)
    elif kind == "fail":
        parsed = _fail_spec(c, body, bkp)
        retry = Retry()  # failing on purpose again would fail the same way
    elif kind in ("parallel", "map"):
        def body_node(body_id: str, spec: Any, at: KeyPath) -> Node | None:
            raw = _node(c, body_id, spec, at, default_timeout, default_retry)
            return None if raw is None else Node(
                raw.id, raw.kind, raw.spec, local_id=raw.id,  # type: ignore[arg-type]
                timeout=raw.timeout, retry=raw.retry, description=raw.description)
        parse = parse_parallel if kind == "parallel" else parse_map
        parsed = parse(c, node_id, body, bkp, body_node)
    else:
        parsed = _checkpoint(c, body, bkp)
    if parsed is None:
        return None
    out_kind = "agent" if kind == "decision" else kind
    return RawNode(node_id, out_kind, parsed, timeout, retry, description, kp, choice_targets)


def _agent(c: _Checker, body: Any, kp: KeyPath) -> AgentSpec | None:
    if isinstance(body, str):
        body = {"prompt": body}
    m = c.mapping(body, kp, "agent")
    if m is None:
        return None
    c.keys(m, KIND_KEYS["agent"], kp, "agent", required=("prompt",))
    prompt = c.string(m["prompt"], (*kp, "prompt"), "prompt", template=True) if (
        "prompt" in m) else None
    output = c.schema(m["output"], (*kp, "output"), "output") if "output" in m else None
    reminders = DEFAULT_REMINDERS
    if "reminders" in m:
        reminders = c.integer(m["reminders"], (*kp, "reminders"), "reminders", 0, 10) or 0
    if prompt is None:
        return None
    return AgentSpec(prompt=prompt, output=output, reminders=reminders)


def _decision(c: _Checker, body: Any, kp: KeyPath) -> tuple[AgentSpec | None,
                                                               dict[str, str] | None]:
    m = c.mapping(body, kp, "decision")
    if m is None:
        return None, None
    c.keys(m, KIND_KEYS["decision"], kp, "decision", required=("question", "choices"))
    question = c.string(m["question"], (*kp, "question"), "question", template=True) if (
        "question" in m) else None
    field_name = "route"
    if "field" in m:
        field_name = c.ident(m["field"], (*kp, "field"), "decision field") or "route"
    reminders = DEFAULT_REMINDERS
    if "reminders" in m:
        reminders = c.integer(m["reminders"], (*kp, "reminders"), "reminders", 0, 10) or 0
    choices: list[str] = []
    targets: dict[str, str] | None = None
    raw = m.get("choices")
    ckp: KeyPath = (*kp, "choices")
    if isinstance(raw, list):
        for i, choice in enumerate(raw):
            if isinstance(choice, (dict, list)) or choice is None:
                c.sink.error("wrong-type", "each choice must be a word", (*ckp, i))
                continue
            key = case_key(choice)
            if key in choices:
                c.sink.error("duplicate-choice", f"choice '{key}' is listed twice", (*ckp, i))
                continue
            choices.append(key)
    elif isinstance(raw, dict):
        targets = {}
        for choice, target in raw.items():
            key = case_key(choice)
            if not isinstance(target, str):
                c.sink.error("wrong-type", f"choice '{key}' must name the node it leads to",
                             (*ckp, choice))
                continue
            if key in targets:
                c.sink.error("duplicate-choice", f"choice '{key}' is listed twice (choices "
                             "compare as text)", (*ckp, choice), at_key=True)
                continue
            choices.append(key)
            targets[key] = target
    elif "choices" in m:
        c.sink.error("wrong-type", "choices must be a list of words, or a mapping of word to "
                     "node id", ckp)
    if "choices" in m and not choices and isinstance(raw, (list, dict)):
        c.sink.error("empty-value", "a decision needs at least one choice", ckp)
    if question is None or not choices:
        return None, None
    schema = {
        "type": "object",
        "required": [field_name],
        "properties": {field_name: {"type": "string", "enum": choices},
                       "reason": {"type": "string"}},
    }
    prompt = (f"{question}\n\nAnswer with a JSON object whose '{field_name}' is one of: "
              + ", ".join(choices) + ". Add a short 'reason'.")
    spec = AgentSpec(prompt=prompt, output=schema, reminders=reminders,
                     decision_field=field_name, choices=tuple(choices))
    return spec, targets


def _compute(c: _Checker, body: Any, kp: KeyPath) -> ComputeSpec | None:
    if isinstance(body, str):
        c.template(body, kp)
        return ComputeSpec(expr=body)
    m = c.mapping(body, kp, "compute")
    if m is None:
        return None
    c.keys(m, KIND_KEYS["compute"], kp, "compute")
    if ("expr" in m) == ("call" in m):
        c.sink.error("compute-form", "compute needs exactly one of 'expr' or 'call'", kp)
        return None
    if "expr" in m:
        expr = m["expr"]
        if isinstance(expr, str):
            c.template(expr, (*kp, "expr"))
        return ComputeSpec(expr=expr if isinstance(expr, str) else _literal(expr))
    hook = c.hook(m["call"], (*kp, "call"))
    return ComputeSpec(call=hook) if hook else None


def _literal(value: Any) -> str:
    # A non-string literal (a number, a list) is an expression that yields itself.
    import json

    return "{{ " + json.dumps(value) + " }}"


def _action(c: _Checker, body: Any, kp: KeyPath) -> ActionSpec | None:
    m = c.mapping(body, kp, "action")
    if m is None:
        return None
    c.keys(m, KIND_KEYS["action"], kp, "action")
    if ("shell" in m) == ("call" in m):
        c.sink.error("action-form", "action needs exactly one of 'shell' (an argv list) or "
                     "'call' (a Python hook)", kp)
        return None
    use_shell = False
    if "use_shell" in m:
        use_shell = bool(c.boolean(m["use_shell"], (*kp, "use_shell"), "use_shell"))
    shell: tuple[str, ...] | str | None = None
    call = None
    if "shell" in m:
        raw = m["shell"]
        skp: KeyPath = (*kp, "shell")
        if isinstance(raw, str):
            if not use_shell:
                c.sink.error("shell-string", "shell must be an argv list like [ruff, check, .]; "
                             "to run a command line through /bin/sh, add 'use_shell: true'", skp)
                return None
            c.template(raw, skp)
            _shell_quoting(c, raw, skp)
            shell = raw
        elif isinstance(raw, list):
            if not raw:
                c.sink.error("empty-value", "shell needs at least the program name", skp)
                return None
            argv = []
            for i, arg in enumerate(raw):
                if isinstance(arg, (dict, list)) or arg is None:
                    c.sink.error("wrong-type", "each shell argument must be a string", (*skp, i))
                    return None
                text = case_key(arg)
                c.template(text, (*skp, i))
                argv.append(text)
            if use_shell:
                c.sink.error("shell-string", "use_shell: true takes a command line string, not "
                             "an argv list", (*kp, "use_shell"))
            for i in shell_code_items(argv):
                _shell_quoting(c, argv[i], (*skp, i))
            shell = tuple(argv)
        else:
            c.sink.error("wrong-type", f"shell must be an argv list, not {_type_name(raw)}", skp)
            return None
    else:
        call = c.hook(m["call"], (*kp, "call"))
        if call is None:
            return None
    cwd = c.string(m["cwd"], (*kp, "cwd"), "cwd", template=True) if "cwd" in m else None
    stdin = c.string(m["stdin"], (*kp, "stdin"), "stdin", template=True,
                     non_empty=False) if "stdin" in m else None
    env: dict[str, str] = {}
    if "env" in m:
        em = c.mapping(m["env"], (*kp, "env"), "env")
        for k, v in (em or {}).items():
            bad = _env_key_problem(str(k))
            if bad:  # the OS refuses it when the run starts the process
                c.sink.error("invalid-name", f"env key {str(k)[:60]!r} {bad}",
                             (*kp, "env", k), at_key=True)
                continue
            if isinstance(v, (dict, list)) or v is None:
                c.sink.error("wrong-type", f"env value '{k}' must be a string", (*kp, "env", k))
                continue
            text = case_key(v)
            c.template(text, (*kp, "env", k))
            env[str(k)] = text
    allow = False
    if "allow_nonzero_exit" in m:
        allow = bool(c.boolean(m["allow_nonzero_exit"], (*kp, "allow_nonzero_exit"),
                               "allow_nonzero_exit"))
    cap = DEFAULT_OUTPUT_CAP
    if "output_cap" in m:
        cap = c.integer(m["output_cap"], (*kp, "output_cap"), "output_cap", 1,
                        MAX_OUTPUT_CAP) or DEFAULT_OUTPUT_CAP
    parse = c.string(m["parse"], (*kp, "parse"), "parse", template=True) if "parse" in m else None
    return ActionSpec(shell=shell, use_shell=use_shell, call=call, cwd=cwd, env=env,
                      stdin=stdin, allow_nonzero_exit=allow, output_cap=cap, parse=parse)


def _env_key_problem(key: str) -> str | None:
    if not key:
        return "is empty; name the environment variable"
    if "\0" in key:
        return "contains a NUL byte, which no environment variable can hold"
    if "=" in key:
        return "contains '=', which ends an environment variable's name"
    return None


def _shell_quoting(c: _Checker, code: str, kp: KeyPath) -> None:
    for problem in shell_quoting_problems(code):
        c.sink.warning("shell-quoting", problem, kp)


def _notify(c: _Checker, body: Any, kp: KeyPath) -> NotifySpec | None:
    if isinstance(body, str):
        body = {"message": body}
    m = c.mapping(body, kp, "notify")
    if m is None:
        return None
    c.keys(m, KIND_KEYS["notify"], kp, "notify", required=("message",))
    kind = m.get("kind", "progress")
    if kind not in ("progress", "final"):
        c.sink.error("invalid-value", f"notify kind must be 'progress' or 'final', not "
                     f"'{kind}'", (*kp, "kind"), hint=did_you_mean(str(kind),
                                                                    ("progress", "final")))
        return None
    message = c.string(m["message"], (*kp, "message"), "message", template=True) if (
        "message" in m) else None
    if message is None:
        return None
    return NotifySpec(kind=kind, message=message)


def _checkpoint(c: _Checker, body: Any, kp: KeyPath) -> CheckpointSpec | None:
    if body is None:
        return CheckpointSpec()
    if isinstance(body, str):
        body = {"summary": body}
    m = c.mapping(body, kp, "checkpoint")
    if m is None:
        return None
    c.keys(m, KIND_KEYS["checkpoint"], kp, "checkpoint")
    summary = c.string(m["summary"], (*kp, "summary"), "summary", template=True) if (
        "summary" in m) else None
    return CheckpointSpec(summary=summary)


def _fail_spec(c: _Checker, body: Any, kp: KeyPath) -> FailSpec | None:
    if isinstance(body, str):
        body = {"message": body}
    m = c.mapping(body, kp, "fail")
    if m is None:
        return None
    c.keys(m, KIND_KEYS["fail"], kp, "fail", required=("message",))
    message = c.string(m["message"], (*kp, "message"), "message", template=True) if (
        "message" in m) else None
    code = DEFAULT_FAIL_CODE
    if "code" in m:
        raw = m["code"]
        if not isinstance(raw, str) or not FAIL_CODE_RE.match(raw):
            c.sink.error("invalid-value", "fail code must be a word of letters, digits and _ "
                         f"(like tests_failed), not {raw!r}", (*kp, "code"))
            return None
        code = raw
    if message is None:
        return None
    return FailSpec(message=message, code=code)


def _edges(c: _Checker, wf: RawWorkflow, value: Any) -> None:
    if not isinstance(value, list):
        c.sink.error("wrong-type", f"edges must be a list, not {_type_name(value)}", ("edges",))
        return
    for i, item in enumerate(value):
        if c.sink.stopped:
            break
        kp: KeyPath = ("edges", i)
        m = c.mapping(item, kp, "an edge")
        if m is None:
            continue
        c.keys(m, EDGE_KEYS, kp, "an edge", required=("from",))
        source = m.get("from")
        if "from" in m and not isinstance(source, str):
            c.sink.error("wrong-type", "edge 'from' must be a node id", (*kp, "from"))
            continue
        has_to, has_switch = "to" in m, "switch" in m
        if has_to == has_switch:
            c.sink.error("edge-form", "an edge needs exactly one of 'to' or 'switch'", kp)
            continue
        if source is None:
            continue
        if has_to:
            to = m["to"]
            if not isinstance(to, str):
                c.sink.error("wrong-type", "edge 'to' must be a node id", (*kp, "to"))
                continue
            wf.edges.append(RawEdge(source, to, None, {}, None, kp))
            continue
        skp: KeyPath = (*kp, "switch")
        s = c.mapping(m["switch"], skp, "switch")
        if s is None:
            continue
        c.keys(s, SWITCH_KEYS, skp, "switch", required=("on", "cases"))
        on = s.get("on")
        if "on" in s and (not isinstance(on, str) or not PATH_RE.match(on)):
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
                c.sink.error("empty-value", "switch cases must not be empty", (*skp, "cases"))
                continue
            for k, target in cm.items():
                if not isinstance(target, str):
                    c.sink.error("wrong-type", f"case '{case_key(k)}' must name a node",
                                 (*skp, "cases", k))
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
            c.sink.error("wrong-type", "switch 'default' must name a node", (*skp, "default"))
            default = None
        if on is None or not cases:
            continue
        wf.edges.append(RawEdge(source, None, on, cases, default, kp))


def _exits(c: _Checker, wf: RawWorkflow, value: Any) -> None:
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
        c.keys(s, EXIT_KEYS, kp, f"exit '{name}'", required=("from",))
        source = s.get("from")
        if "from" in s and isinstance(source, str):
            wf.exits[name] = (source, (*kp, "from"))
        elif "from" in s:
            c.sink.error("wrong-type", "exit 'from' must be a node id", (*kp, "from"))
