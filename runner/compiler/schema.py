"""The published JSON Schema of the workflow YAML format (`wfrun schema`).

Editors use it to complete and check files (`# yaml-language-server: $schema=...`).
It is built from the compiler's own key tables and the node-kind table
(`kinds.py`), and a test checks that every valid fixture passes it and every
shape mistake fails it.
"""

from __future__ import annotations

from typing import Any

from .budget import BUDGET_KEYS, CEILING
from .kinddef import DURATION, ID_PATTERN, JSON_SCHEMA, TEMPLATE
from .kinds import KINDS
from .model import OUTCOMES

SCHEMA_ID = "https://wfrun.dev/schema/workflow-v1.json"
# One node (any kind): a kind whose body holds nodes (a branch, a map's item) refers
# to it as {"$ref": NODE_REF}.
NODE_REF = "#/$defs/node"
# The format's keys outside nodes (a node's body keys are its kind's: kinds.py).
TOP_KEYS = ("version", "name", "title", "description", "input", "start", "nodes", "edges",
            "includes", "exits", "max_steps", "presentation", "defaults", "secrets", "env",
            "template_budget")
DEFAULTS_KEYS = ("timeout", "retry")
NODE_COMMON_KEYS = ("timeout", "retry", "description")
RETRY_KEYS = ("attempts", "backoff", "max_delay")
EDGE_KEYS = ("from", "to", "switch")
SWITCH_KEYS = ("on", "cases", "default")
INCLUDE_KEYS = ("workflow", "input")
EXIT_KEYS = ("from",)


def _obj(props: dict[str, Any], keys: tuple[str, ...], required: tuple[str, ...] = (),
         description: str | None = None) -> dict[str, Any]:
    assert set(props) == set(keys), (set(props) ^ set(keys))
    # In the table's order: 'expected one of' hints list the keys as the docs do.
    out: dict[str, Any] = {"type": "object", "additionalProperties": False,
                           "properties": {k: props[k] for k in keys}}
    if required:
        out["required"] = list(required)
    if description:
        out["description"] = description
    return out


def workflow_schema() -> dict[str, Any]:
    retry = _obj({"attempts": {"type": "integer", "minimum": 1, "maximum": 100},
                  "backoff": DURATION, "max_delay": DURATION}, RETRY_KEYS, ("attempts",))
    # Every authored kind's body schema, from the node-kind table (compiler/kinds.py).
    kinds: dict[str, Any] = {k.name: dict(k.schema) for k in KINDS.values() if k.authored}
    common = {"timeout": DURATION, "retry": retry, "description": {"type": "string"}}
    assert set(common) == set(NODE_COMMON_KEYS)
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
                  "propertyNames": {"pattern": ID_PATTERN},
                  "additionalProperties": {"$ref": NODE_REF}},
        "edges": {"type": "array", "items": edge},
        "includes": {"type": "object", "propertyNames": {"pattern": ID_PATTERN},
                     "additionalProperties": include},
        "exits": {"type": "object", "propertyNames": {"pattern": ID_PATTERN},
                  "additionalProperties": exit_},
        "max_steps": {"type": "integer", "minimum": 1, "maximum": 1_000_000},
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
            "title": "wfrun workflow", **top, "$defs": {"node": node}}
