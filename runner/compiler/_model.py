"""The compiled definition: immutable, JSON-serialisable, include-resolved.

A `WorkflowDefinition` is what the engine executes. Included workflows are
flattened into it: a child node `plan` mounted at `fix` becomes `fix/plan`,
entering the mount runs a synthetic `include_entry` node with id `fix`, and
each named exit passes through a synthetic `include_exit` node
`fix/__exit_<name>`. Every node knows its `scope` (the mount path) so the
engine can show templates the child's own `input` and `outputs`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any, Literal, Protocol

from runner._canonical import canonical_json

from ._budget import DEFAULT_BUDGET, TemplateBudget

if TYPE_CHECKING:  # field types only: a run that has neither never loads their parsers
    from ._flow import ConcurrencySpec, RateLimitSpec
    from ._triggers import TriggerSpec

DEFAULT_FAIL_CODE = "workflow_failed"
RESERVED_NODE_IDS = frozenset({"list", "start", "status", "cancel", "pause", "resume", "answer"})
OUTCOMES: tuple[str, ...] = ("ok", "failed", "timed_out", "cancelled")
DEFAULT_NODE_TIMEOUT = 15 * 60.0
DEFAULT_MAX_STEPS = 100
DEFAULT_REMINDERS = 2
DEFAULT_OUTPUT_CAP = 1_000_000

# A timeout that is not set falls back to the workflow default; `None` means no deadline.
UNSET: Any = "unset"


@dataclass(frozen=True)
class HookRef:
    """A Python hook: `module:function`, `./file.py:function` (relative to the YAML), or
    the name of a step registered under the entry-point group `wfrun.steps`."""

    ref: str
    step: str | None = None  # a registered step's name (compiler/_stepcalls.py)
    module: str | None = None
    file: str | None = None  # absolute path of a file hook, resolved at compile time
    function: str = ""
    sha256: str | None = None  # file hooks are part of the source identity

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"ref": self.ref}
        if self.sha256:
            out["sha256"] = self.sha256
        return out


@dataclass(frozen=True)
class Retry:
    attempts: int = 1
    backoff: float = 0.0
    max_delay: float | None = None

    def to_json(self) -> dict[str, Any]:
        return {"attempts": self.attempts, "backoff": self.backoff, "max_delay": self.max_delay}


@dataclass(frozen=True)
class AgentSpec:
    prompt: str
    output: Mapping[str, Any] | None = None
    reminders: int = DEFAULT_REMINDERS
    # Set for `decision` nodes: the output field that carries the choice.
    decision_field: str | None = None
    choices: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"prompt": self.prompt, "output": self.output,
                               "reminders": self.reminders}
        if self.decision_field:
            out["decision_field"] = self.decision_field
            out["choices"] = list(self.choices)
        return out


@dataclass(frozen=True)
class ComputeSpec:
    expr: str | None = None
    call: HookRef | None = None

    def to_json(self) -> dict[str, Any]:
        return {"expr": self.expr, "call": self.call.to_json() if self.call else None}


@dataclass(frozen=True)
class ActionSpec:
    shell: tuple[str, ...] | str | None = None  # argv list, or a string when use_shell
    use_shell: bool = False
    call: HookRef | None = None
    cwd: str | None = None
    env: Mapping[str, str] = field(default_factory=dict)
    stdin: str | None = None
    allow_nonzero_exit: bool = False
    output_cap: int = DEFAULT_OUTPUT_CAP
    parse: str | None = None
    params: Mapping[str, Any] | None = None  # `with:`, templates rendered natively

    def to_json(self) -> dict[str, Any]:
        # `with` only when written, so actions without it keep their digests.
        return {**({"with": self.params} if self.params is not None else {}),
            "shell": list(self.shell) if isinstance(self.shell, tuple) else self.shell,
            "use_shell": self.use_shell,
            "call": self.call.to_json() if self.call else None,
            "cwd": self.cwd,
            "env": dict(self.env),
            "stdin": self.stdin,
            "allow_nonzero_exit": self.allow_nonzero_exit,
            "output_cap": self.output_cap,
            "parse": self.parse,
        }


@dataclass(frozen=True)
class NotifySpec:
    kind: Literal["progress", "final"]
    message: str
    channels: tuple[str, ...] = ()  # names in .wfrun/config.yaml `notify: channels:`

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"kind": self.kind, "message": self.message}
        if self.channels:  # absent when none: the digests of existing definitions stay
            out["channels"] = list(self.channels)
        return out


@dataclass(frozen=True)
class CheckpointSpec:
    summary: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"summary": self.summary}


@dataclass(frozen=True)
class FailSpec:
    """Ends the run `failed` on purpose with a rendered message and a stable code."""

    message: str
    code: str = DEFAULT_FAIL_CODE

    def to_json(self) -> dict[str, Any]:
        return {"message": self.message, "code": self.code}


@dataclass(frozen=True)
class IncludeEntrySpec:
    """Entering a mounted child: renders `input` in the parent's scope."""

    mount: str  # full mount path, e.g. "fix" or "fix/inner"
    workflow: str  # the child's name
    input: Any  # template(s) rendered natively in the parent scope
    max_steps: int = DEFAULT_MAX_STEPS

    def to_json(self) -> dict[str, Any]:
        return {"mount": self.mount, "workflow": self.workflow, "input": self.input,
                "max_steps": self.max_steps}


@dataclass(frozen=True)
class IncludeExitSpec:
    mount: str
    exit: str
    source: str  # the child node whose output leaves through this exit

    def to_json(self) -> dict[str, Any]:
        return {"mount": self.mount, "exit": self.exit, "from": self.source}


class Spec(Protocol):
    """A node's parsed body (each kind has its own, `compiler/_kinds.py`)."""

    def to_json(self) -> dict[str, Any]: ...


@dataclass(frozen=True)
class CacheSpec:
    """`cache: {ttl, key}`: reuse an earlier ok result of the node (issue 39). `key`: a
    template; None keys on the node's digest and its rendered prompt, argv or input."""

    ttl: float
    key: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"ttl": self.ttl, "key": self.key}


@dataclass(frozen=True)
class Node:
    id: str  # qualified id, unique in the flattened graph
    kind: str  # a name in the node-kind table (compiler/_kinds.py)
    spec: Spec
    scope: str = ""  # mount path of the workflow the node was written in ("" = root)
    local_id: str = ""  # the id as written in its own file
    timeout: float | None = DEFAULT_NODE_TIMEOUT
    retry: Retry = field(default_factory=Retry)
    description: str | None = None
    cache: CacheSpec | None = None

    def to_json(self) -> dict[str, Any]:
        out = {
            "kind": self.kind,
            "scope": self.scope,
            "local_id": self.local_id,
            "timeout": self.timeout,
            "retry": self.retry.to_json(),
            "description": self.description,
            "spec": self.spec.to_json(),
        }
        if self.cache is not None:  # only when declared: other nodes keep their digests
            out["cache"] = self.cache.to_json()
        return out

    @cached_property
    def pure(self) -> bool:
        """No effect outside its run: a compute expression (a sandboxed template).
        Running it twice is invisible, so its end needs no flush of its own."""
        spec = self.spec
        return isinstance(spec, ComputeSpec) and spec.call is None


@dataclass(frozen=True)
class Edge:
    """One outgoing edge: either a plain `to`, or a `switch` on a path."""

    source: str
    to: str | None = None
    on: str | None = None
    cases: Mapping[str, str] = field(default_factory=dict)
    default: str | None = None

    @property
    def targets(self) -> list[str]:
        if self.to is not None:
            return [self.to]
        out = list(dict.fromkeys(self.cases.values()))
        if self.default is not None and self.default not in out:
            out.append(self.default)
        return out

    def to_json(self) -> dict[str, Any]:
        if self.to is not None:
            return {"from": self.source, "to": self.to}
        return {"from": self.source, "switch": {"on": self.on, "cases": dict(self.cases),
                                                "default": self.default}}


@dataclass(frozen=True)
class Source:
    """Where one piece of a definition came from (YAML, hook or included file)."""

    kind: Literal["file", "builtin"]
    sha256: str
    path: str | None = None
    name: str | None = None

    def to_json(self) -> dict[str, Any]:
        if self.kind == "builtin":
            return {"kind": "builtin", "name": self.name, "sha256": self.sha256}
        return {"kind": "file", "path": self.path, "sha256": self.sha256}


@dataclass(frozen=True)
class WorkflowDefinition:
    name: str
    start: str
    nodes: Mapping[str, Node]
    edges: Mapping[str, Edge]  # keyed by source node id (≤ 1 outgoing edge)
    title: str | None = None
    description: str | None = None
    input_schema: Mapping[str, Any] | None = None
    max_steps: int = DEFAULT_MAX_STEPS
    presentation: str | None = None
    exits: Mapping[str, str] = field(default_factory=dict)  # exit name -> node id
    secrets: tuple[str, ...] = ()  # names of secrets resolved at activation (never stored)
    env: tuple[str, ...] = ()  # environment variables templates may read as env.NAME
    template_budget: TemplateBudget = DEFAULT_BUDGET  # per render (compiler/_budget.py)
    # When runs start (compiler/_triggers.py): not in the snapshot nor the digest.
    triggers: tuple[TriggerSpec, ...] = ()
    concurrency: ConcurrencySpec | None = None  # flow control (compiler/_flow.py): idem
    rate_limit: RateLimitSpec | None = None
    source: Source | None = None
    sources: tuple[Source, ...] = ()  # every file that went into it (YAML, hooks, children)
    digest: str = ""

    def snapshot(self) -> dict[str, Any]:
        """The normalized definition: what the digest covers and bundles store."""
        return {
            "schema": "wfrun.definition.v1",
            "name": self.name,
            "title": self.title,
            "description": self.description,
            "input": self.input_schema,
            "start": self.start,
            "max_steps": self.max_steps,
            "presentation": self.presentation,
            "exits": dict(self.exits),
            "nodes": {nid: n.to_json() for nid, n in self.nodes.items()},
            # Sorted by source: the order edges are written in carries no meaning.
            "edges": [e.to_json() for _, e in sorted(self.edges.items())],
            # Only when declared, so workflows without them keep their digests.
            **({"secrets": list(self.secrets)} if self.secrets else {}),
            **({"env": list(self.env)} if self.env else {}),
            **({"template_budget": self.template_budget.to_json()}
               if self.template_budget != DEFAULT_BUDGET else {}),
        }

    @cached_property
    def snapshot_json(self) -> str:
        """`snapshot()` as canonical JSON, encoded once per definition: every run's
        bundle stores it, and it grows with the workflow (46 µs per run for 3 nodes)."""
        return canonical_json(self.snapshot())

    @cached_property
    def sources_json(self) -> dict[str, Any]:
        """`source` and `sources` as a launch row and a run's manifest record them, made
        once per definition (every run recorded them twice). Read only: it is shared."""
        return {"source": self.source.to_json() if self.source else None,
                "sources": [s.to_json() for s in self.sources]}

    @cached_property
    def write_only(self) -> tuple[str, ...]:
        """Top-level input properties the schema marks `writeOnly: true` (secrets)."""
        schema = self.input_schema
        props = schema.get("properties") if isinstance(schema, Mapping) else None
        if not isinstance(props, Mapping):
            return ()
        return tuple(sorted(name for name, sub in props.items()
                            if isinstance(sub, Mapping) and sub.get("writeOnly") is True))

    @cached_property
    def declares_secrets(self) -> bool:
        """Whether a run has anything secret of its own to resolve (`secrets:`, `env:`,
        writeOnly input): without, it masks only its environment's (SecretSource.plain)."""
        return bool(self.secrets or self.env or self.write_only)

    @cached_property
    def pure_run(self) -> bool:
        """No effect outside the run until it ends: every node pure, none kept in the
        step cache, none retried after a delay. Its launch may settle it as one trace
        write and one commit (ADR 0009, lever 3): a crash before that repeats nothing."""
        return all(n.pure and n.cache is None and n.retry.attempts <= 1
                   for n in self.nodes.values())

    def to_json(self) -> dict[str, Any]:
        snap = self.snapshot()
        snap["digest"] = self.digest
        snap["source"] = self.source.to_json() if self.source else None
        snap["sources"] = [s.to_json() for s in self.sources]
        return snap
