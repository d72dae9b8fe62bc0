"""The published JSON Schema of the workflow YAML format (`wfrun schema`).

Editors use it to complete and check files (`# yaml-language-server: $schema=...`).
It is built from the compiler's own key tables, and a test checks that every
valid fixture passes it and every shape mistake fails it.
"""

from __future__ import annotations

from typing import Any

from .budget import BUDGET_KEYS, CEILING
from .fanout import MAX_CONCURRENCY, MAX_ITEMS_CEILING, TAKEN_NAMES, WORKFLOW_BODY_KEYS
from .model import OUTCOMES
from .parse import (
    DEFAULTS_KEYS,
    EDGE_KEYS,
    EXIT_KEYS,
    INCLUDE_KEYS,
    KIND_KEYS,
    NODE_COMMON_KEYS,
    RETRY_KEYS,
    SWITCH_KEYS,
    TOP_KEYS,
)

SCHEMA_ID = "https://wfrun.dev/schema/workflow-v1.json"
ID_PATTERN = "^[A-Za-z_][A-Za-z0-9_-]*$"
DURATION = {
    "description": "A duration like 30s, 15m, 2h or 1h30m; null for no deadline.",
    "anyOf": [
        {"type": "string", "pattern": r"^\s*(\d+(\.\d+)?(ms|s|m|h|d)\s*)+$"},
        {"type": "number", "exclusiveMinimum": 0},
        {"type": "null"},
    ],
}
TEMPLATE = {"type": "string", "description": "A sandboxed Jinja2 template."}
HOOK = {
    "type": "string",
    "description": "A Python hook: 'package.module:function' or './file.py:function'.",
    "pattern": r"^(\.{1,2}/[^:]+\.py|[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*)"
               r":[A-Za-z_]\w*$",
}
JSON_SCHEMA = {"type": "object", "description": "A JSON Schema (draft 2020-12)."}
SCALAR = {"type": ["string", "number", "integer", "boolean", "null"]}


def _obj(props: dict[str, Any], keys: tuple[str, ...], required: tuple[str, ...] = (),
         description: str | None = None) -> dict[str, Any]:
    assert set(props) == set(keys), (set(props) ^ set(keys))
    out: dict[str, Any] = {"type": "object", "additionalProperties": False,
                           "properties": props}
    if required:
        out["required"] = list(required)
    if description:
        out["description"] = description
    return out


def _fanout_kinds(kinds: dict[str, Any], common: dict[str, Any]) -> dict[str, Any]:
    """`parallel` and `map` (DESIGN §10): a body is one node of any kind but checkpoint
    and fan-out, or a linked child run."""
    inline = {k: v for k, v in kinds.items() if k != "checkpoint"}
    body = {"anyOf": [
        {"type": "object", "additionalProperties": False,
         "properties": {**common, **inline}, "oneOf": [{"required": [k]} for k in inline]},
        _obj({"workflow": {"type": "string", "description": "A workflow name or a ./path.yaml"},
              "input": {"description": "Templates rendered natively in the node's scope."}},
             WORKFLOW_BODY_KEYS, ("workflow",), "A linked child run with its own bundle.")]}
    concurrency = {"type": "integer", "minimum": 1, "maximum": MAX_CONCURRENCY}
    return {
        "parallel": _obj(
            {"branches": {"type": "object", "minProperties": 1,
                          "propertyNames": {"pattern": ID_PATTERN},
                          "additionalProperties": body},
             "max_concurrency": concurrency, "fail_fast": {"type": "boolean"}},
            KIND_KEYS["parallel"], ("branches",),
            "Named branches at once; outputs.NODE.<branch>. fail_fast defaults to true."),
        "map": _obj(
            {"over": {**TEMPLATE, "description": "A template that yields a list."},
             "as": {"type": "string", "pattern": ID_PATTERN,
                    "not": {"enum": list(TAKEN_NAMES)}},
             "do": body, "max_concurrency": concurrency, "fail_fast": {"type": "boolean"},
             "max_items": {"type": "integer", "minimum": 1, "maximum": MAX_ITEMS_CEILING}},
            KIND_KEYS["map"], ("over", "do"),
            "One body per item (default 8 at once, at most 10,000 items); outputs.NODE "
            "is the list of item outputs in order."),
    }


def workflow_schema() -> dict[str, Any]:
    retry = _obj({"attempts": {"type": "integer", "minimum": 1, "maximum": 100},
                  "backoff": DURATION, "max_delay": DURATION}, RETRY_KEYS, ("attempts",))
    kinds: dict[str, Any] = {
        "agent": {"anyOf": [TEMPLATE, _obj(
            {"prompt": TEMPLATE, "output": JSON_SCHEMA,
             "reminders": {"type": "integer", "minimum": 0, "maximum": 10}},
            KIND_KEYS["agent"], ("prompt",),
            "An agent step: the prompt goes to the agent, which submits JSON output.")]},
        "decision": _obj(
            {"question": TEMPLATE,
             "choices": {"anyOf": [
                 {"type": "array", "minItems": 1, "items": SCALAR},
                 {"type": "object", "minProperties": 1,
                  "additionalProperties": {"type": "string", "pattern": ID_PATTERN}}]},
             "field": {"type": "string", "pattern": ID_PATTERN},
             "reminders": {"type": "integer", "minimum": 0, "maximum": 10}},
            KIND_KEYS["decision"], ("question", "choices"),
            "An agent step that picks one of `choices`; a mapping builds the switch."),
        "compute": {"anyOf": [TEMPLATE, {
            "type": "object", "additionalProperties": False,
            "properties": {"expr": {}, "call": HOOK},
            "minProperties": 1, "maxProperties": 1}]},
        "action": {**_obj(
            {"shell": {"anyOf": [{"type": "array", "minItems": 1, "items": SCALAR},
                                 {"type": "string"}]},
             "use_shell": {"type": "boolean"},
             "call": HOOK,
             "cwd": TEMPLATE,
             "env": {"type": "object", "additionalProperties": SCALAR},
             "stdin": TEMPLATE,
             "allow_nonzero_exit": {"type": "boolean"},
             "output_cap": {"type": "integer", "minimum": 1},
             "parse": TEMPLATE},
            KIND_KEYS["action"], (),
            "A side effect: `shell` (argv list) or `call` (Python hook)."),
            "oneOf": [{"required": ["shell"]}, {"required": ["call"]}]},
        "notify": {"anyOf": [TEMPLATE, _obj(
            {"kind": {"enum": ["progress", "final"]}, "message": TEMPLATE},
            KIND_KEYS["notify"], ("message",))]},
        "checkpoint": {"anyOf": [{"type": "null"}, TEMPLATE,
                                 _obj({"summary": TEMPLATE}, KIND_KEYS["checkpoint"])]},
        "fail": {"anyOf": [TEMPLATE, _obj(
            {"message": TEMPLATE, "code": {"type": "string",
                                           "pattern": "^[A-Za-z][A-Za-z0-9_]{0,63}$"}},
            KIND_KEYS["fail"], ("message",),
            "Ends the run failed on purpose (exit 1) with this message and code.")]},
    }
    common = {"timeout": DURATION, "retry": retry, "description": {"type": "string"}}
    assert set(common) == set(NODE_COMMON_KEYS)
    kinds.update(_fanout_kinds(kinds, common))
    node = {
        "type": "object",
        "additionalProperties": False,
        "properties": {**common, **kinds},
        "oneOf": [{"required": [k]} for k in kinds],
        "description": "A node: exactly one kind key plus optional timeout, retry, description.",
    }
    switch = _obj({"on": {"type": "string", "pattern": r"^\$(output|result)?(\.[A-Za-z0-9_-]+)*$",
                          "description": "$.field, $output.field or $result.outcome ("
                          + ", ".join(OUTCOMES) + ")"},
                   "cases": {"type": "object", "minProperties": 1,
                             "additionalProperties": {"type": "string"}},
                   "default": {"type": "string"}}, SWITCH_KEYS, ("on", "cases"))
    edge = {**_obj({"from": {"type": "string"}, "to": {"type": "string"}, "switch": switch},
                   EDGE_KEYS, ("from",)),
            "oneOf": [{"required": ["to"]}, {"required": ["switch"]}]}
    include = {"anyOf": [{"type": "string"}, _obj(
        {"workflow": {"type": "string", "description": "A workflow name or a ./path.yaml"},
         "input": {"description": "Templates rendered natively in the parent's scope."}},
        INCLUDE_KEYS, ("workflow",))]}
    exit_ = {"anyOf": [{"type": "string"}, _obj({"from": {"type": "string"}}, EXIT_KEYS,
                                                 ("from",))]}
    top = _obj({
        "version": {"const": 1},
        "name": {"type": "string", "description": "Must equal the file name without .yaml."},
        "title": TEMPLATE,
        "description": {"type": "string"},
        "input": JSON_SCHEMA,
        "start": {"type": "string", "description": "The first node or include mount."},
        "nodes": {"type": "object", "minProperties": 1,
                  "propertyNames": {"pattern": ID_PATTERN}, "additionalProperties": node},
        "edges": {"type": "array", "items": edge},
        "includes": {"type": "object", "propertyNames": {"pattern": ID_PATTERN},
                     "additionalProperties": include},
        "exits": {"type": "object", "propertyNames": {"pattern": ID_PATTERN},
                  "additionalProperties": exit_},
        "max_steps": {"type": "integer", "minimum": 1},
        "presentation": TEMPLATE,
        "secrets": {"type": "array", "uniqueItems": True,
                    "items": {"type": "string", "pattern": "^[A-Za-z_][A-Za-z0-9_]*$"},
                    "description": "Secrets resolved from the environment or --secret at "
                                   "activation, as {{ secrets.NAME }}; never stored, masked."},
        "env": {"type": "array", "uniqueItems": True,
                "items": {"type": "string", "pattern": "^[A-Za-z_][A-Za-z0-9_]*$"},
                "description": "Environment variables templates may read as {{ env.NAME }}."},
        "defaults": _obj({"timeout": DURATION, "retry": retry}, DEFAULTS_KEYS),
        "template_budget": _obj({
            "seconds": {"type": "number", "exclusiveMinimum": 0, "maximum": CEILING.seconds},
            **{k: {"type": "integer", "minimum": 1, "maximum": getattr(CEILING, k)}
               for k in BUDGET_KEYS if k != "seconds"},
        }, BUDGET_KEYS, (), "Per-render template limits (docs/workflows.md), up to a "
                            "hard ceiling."),
    }, TOP_KEYS, ("start", "nodes"), "A wfrun workflow (format version 1).")
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", "$id": SCHEMA_ID,
            "title": "wfrun workflow", **top}
