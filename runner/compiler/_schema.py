"""The published JSON Schema of the workflow YAML format (`wfrun schema`).

Editors use it to complete and check files (`# yaml-language-server: $schema=...`).
It is built from the compiler's own key tables and the node-kind table
(`kinds.py`), and a test checks that every valid fixture passes it and every
shape mistake fails it.
"""

from __future__ import annotations

from typing import Any

from ._budget import BUDGET_KEYS, CEILING
from ._flow import CONCURRENCY_KEYS, RATE_LIMIT_KEYS, STRATEGIES
from ._kinddef import DURATION, ID_PATTERN, JSON_SCHEMA, TEMPLATE
from ._kinds import KINDS
from ._model import OUTCOMES
from ._triggers import FILES_KEYS, MISSED, OVERLAP, TRIGGER_KEYS, TRIGGER_KINDS, WEBHOOK_KEYS

SCHEMA_ID = "https://wfrun.dev/schema/workflow-v1.json"
# One node (any kind): a kind whose body holds nodes (a branch, a map's item) refers
# to it as {"$ref": NODE_REF}.
NODE_REF = "#/$defs/node"
# The format's keys outside nodes (a node's body keys are its kind's: kinds.py).
TOP_KEYS = ("version", "name", "title", "description", "input", "start", "nodes", "edges",
            "includes", "exits", "max_steps", "presentation", "defaults", "secrets", "env",
            "template_budget", "triggers", "concurrency", "rate_limit")
DEFAULTS_KEYS = ("timeout", "retry")
NODE_COMMON_KEYS = ("timeout", "retry", "description", "cache")
CACHE_KEYS = ("ttl", "key")
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


def _triggers_schema() -> dict[str, Any]:
    """`triggers:` name -> one trigger (compiler/_triggers.py, DESIGN §10)."""
    header = {"type": "string", "pattern": "^[A-Za-z0-9-]{1,64}$"}
    webhook = _obj({"path": {"type": "string", "pattern": "^/[A-Za-z0-9._~/-]{0,200}$"},
                    "secret": {"type": "string", "pattern": "^[A-Za-z_][A-Za-z0-9_]*$",
                               "description": "The environment variable holding the "
                                              "HMAC-SHA256 key."},
                    "signature_header": header, "delivery_header": header,
                    "debounce": DURATION}, WEBHOOK_KEYS, ("path",))
    files = _obj({"paths": {"type": "array", "minItems": 1, "items": {"type": "string"}},
                  "debounce": DURATION}, FILES_KEYS, ("paths",))
    trigger = _obj({
        "cron": {"type": "string", "description": "5 fields, or 6 with seconds first."},
        "every": DURATION, "webhook": webhook, "files": files,
        "timezone": {"type": "string", "description": "An IANA time zone (default UTC)."},
        "missed": {"enum": list(MISSED)}, "catch_up_window": DURATION,
        "overlap": {"enum": list(OVERLAP)},
        "input": {"description": "Run input; templates see `trigger` and `event`."},
        "description": {"type": "string"},
    }, TRIGGER_KEYS, (), "A trigger: exactly one of cron, every, webhook, files.")
    trigger["oneOf"] = [{"required": [k]} for k in TRIGGER_KINDS]
    return {"type": "object", "propertyNames": {"pattern": ID_PATTERN},
            "additionalProperties": trigger}


def workflow_schema() -> dict[str, Any]:
    retry = _obj({"attempts": {"type": "integer", "minimum": 1, "maximum": 100},
                  "backoff": DURATION, "max_delay": DURATION}, RETRY_KEYS, ("attempts",))
    # Every authored kind's body schema, from the node-kind table (compiler/_kinds.py).
    kinds: dict[str, Any] = {k.name: dict(k.schema) for k in KINDS.values() if k.authored}
    ttl = {"description": "How long a kept result is reused, like 1h or 7d.",
           "anyOf": [d for d in DURATION["anyOf"] if d != {"type": "null"}]}
    # The ttl's forms side by side with the mapping (not a nested anyOf): a mapping
    # then fits one branch only, and its mistakes are said (shapes.leaves).
    cache = {"anyOf": [*ttl["anyOf"], _obj(
        {"ttl": ttl, "key": TEMPLATE}, CACHE_KEYS, ("ttl",),
        "Reuse an earlier ok result of this node for `ttl` (key: the node's digest and "
        "its rendered prompt, argv or input, or the `key` template).")]}
    common = {"timeout": DURATION, "retry": retry, "description": {"type": "string"},
              "cache": cache}
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
        "triggers": _triggers_schema(),
        "concurrency": _obj({"key": TEMPLATE, "limit": {"type": "integer", "minimum": 1,
                                                        "maximum": 100_000},
                             "strategy": {"enum": list(STRATEGIES)}},
                            CONCURRENCY_KEYS, ("key",),
                            "At most `limit` runs per rendered key at once."),
        "rate_limit": _obj({"key": TEMPLATE, "limit": {"type": "integer", "minimum": 1,
                                                       "maximum": 100_000},
                            "per": DURATION}, RATE_LIMIT_KEYS, RATE_LIMIT_KEYS,
                           "At most `limit` runs started per rendered key per `per`."),
    }, TOP_KEYS, ("start", "nodes"), "A wfrun workflow (format version 1).")
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", "$id": SCHEMA_ID,
            "title": "wfrun workflow", **top, "$defs": {"node": node}}
