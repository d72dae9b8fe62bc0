"""What one node kind is: the row type of the node-kind table (`kinds.py`).

A kind is its YAML key, the JSON Schema of its body (published by `wfrun
schema` and checked by the parser), the parser that turns a checked body into
an immutable spec, how it is drawn, and the few facts the run loop and the
graph checks need about it. Nothing here knows any particular kind.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from ._model import Spec

if TYPE_CHECKING:
    from ._checker import Checker
    from ._diagnostics import KeyPath

# -- schema parts every kind's body schema is written from ----------------------------
ID_PATTERN = "^[A-Za-z_][A-Za-z0-9_-]*$"
DURATION: dict[str, Any] = {
    "description": "A duration like 30s, 15m, 2h or 1h30m; null for no deadline.",
    "anyOf": [
        {"type": "string", "pattern": r"^\s*(\d+(\.\d+)?(ms|s|m|h|d)\s*)+$"},
        {"type": "number", "exclusiveMinimum": 0},
        {"type": "null"},
    ],
}
TEMPLATE: dict[str, Any] = {"type": "string", "description": "A sandboxed Jinja2 template."}
HOOK: dict[str, Any] = {
    "type": "string",
    "description": "A Python hook: 'package.module:function', './file.py:function', or the "
                   "name of a step registered under the entry-point group wfrun.steps.",
    "pattern": r"^((\.{1,2}/[^:]+\.py|[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*)"
               r":[A-Za-z_]\w*|[A-Za-z_][A-Za-z0-9_-]*)$",
}
JSON_SCHEMA: dict[str, Any] = {"type": "object", "description": "A JSON Schema (draft 2020-12)."}
SCALAR: dict[str, Any] = {"type": ["string", "number", "integer", "boolean", "null"]}
WORD: dict[str, Any] = {"type": ["string", "number", "boolean"]}  # a scalar that is text-like


def obj(props: dict[str, Any], required: tuple[str, ...] = (),
        description: str | None = None) -> dict[str, Any]:
    """A closed mapping: unknown keys are mistakes (the parser says 'did you mean')."""
    out: dict[str, Any] = {"type": "object", "additionalProperties": False,
                           "properties": props}
    if required:
        out["required"] = list(required)
    if description:
        out["description"] = description
    return out


@dataclass(frozen=True)
class Parsed:
    spec: Spec
    # Decision choices given as a mapping build the node's switch edge.
    choice_targets: dict[str, str] | None = None


BodyParser = Callable[["Checker", Any, "KeyPath"], "Parsed | None"]


@dataclass(frozen=True)
class KindDef:
    """One row of the node-kind table."""

    name: str  # the YAML key, and `Node.kind` unless `runs_as` says otherwise
    summary: str  # one line: the schema's description and `wfrun graph --help`
    icon: str  # `wfrun graph` and the web view
    schema: Mapping[str, Any]  # the body's JSON Schema (may be an anyOf of shorthands)
    keys: tuple[str, ...] = ()  # the body mapping's keys, for 'did you mean'
    parse: BodyParser | None = None  # None: synthetic, made by the compiler, never written
    runs_as: str | None = None  # sugar: the kind the node runs as (decision -> agent)
    # What an ok end of the node does to the run: `wait` ends it waiting (checkpoint),
    # `fail` ends it failed on purpose (any end). Either may end an included workflow.
    ends: Literal["wait", "fail"] | None = None
    retries: bool = True  # `retry:` applies (failing on purpose again fails the same way)
    # Where `retry:` goes instead, when it does not apply: a node that writes one gets a
    # `misplaced-retry` diagnostic with this as its fix (a silently ignored retry would
    # let a user believe a flaky step is covered).
    retry_fix: str = "remove `retry:`"
    # It may change the world outside the run and offers nothing to observe afterwards:
    # an interrupted controller child does not run it again (engine.py, seed 004).
    effects: bool = False

    @property
    def authored(self) -> bool:
        return self.parse is not None

    @property
    def node_kind(self) -> str:
        return self.runs_as or self.name
