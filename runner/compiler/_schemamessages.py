"""One validation error of a JSON Schema as a short, bounded line.

jsonschema's own messages quote the offending value as a Python repr (`'xxx…' is
too long`, `True is not of type 'string'`): a 100 KB input came back whole, to a
model or a terminal, in a syntax neither reads. These say what is wrong with
the value (its type, its length, the missing or unexpected keys) and quote
values only as JSON cut to a few dozen characters.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from jsonschema.exceptions import ValidationError

SHOWN = 60  # characters of a value quoted in a message
PATH_CHARS = 120  # a deeper location keeps its last characters
KEY_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]{0,39}$")
BOUNDS = {"minimum": ">=", "maximum": "<=", "exclusiveMinimum": ">", "exclusiveMaximum": "<"}


def shown(value: Any, limit: int = SHOWN) -> str:
    """`value` as compact JSON, cut to `limit` characters with an ellipsis."""
    try:
        text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError):
        text = json_type(value)
    return text if len(text) <= limit else text[:limit - 1] + "…"


def cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit - 1] + "…"


def json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list | tuple):
        return "array"
    if isinstance(value, dict):
        return "object"
    return "value"


def location(path: Iterable[Any]) -> str:
    """`$.a[0].b` for a value's place; keys that are not plain names are quoted, cut."""
    parts = []
    for part in path:
        if isinstance(part, int):
            parts.append(f"[{part}]")
        elif KEY_RE.match(str(part)):
            parts.append(f".{part}")
        else:
            parts.append(f"[{shown(str(part), 40)}]")
    where = "".join(parts)
    if len(where) > PATH_CHARS:
        where = "…" + where[-(PATH_CHARS - 1):]
    return "$" + where if where else "value"


def _names(keys: Iterable[Any], most: int = 5) -> str:
    keys = list(keys)
    text = ", ".join(shown(str(k), 40) for k in keys[:most])
    return text + (f" and {len(keys) - most} more" if len(keys) > most else "")


def describe(err: ValidationError) -> str:
    """What is wrong with `err.instance`, without quoting more than a few characters."""
    kind, want, got = str(err.validator), err.validator_value, err.instance
    size = len(got) if isinstance(got, str | list | dict) else 0
    if kind == "unevaluatedProperties" or "ran longer than" in err.message:
        return cut(err.message, 300)  # wfrun's own bounded checks (schemarefs.py) say it
    if kind == "type":
        wanted = want if isinstance(want, list) else [want]
        return f"expected {' or '.join(str(t) for t in wanted)}, got {json_type(got)}"
    if kind == "required" and isinstance(got, dict):
        missing = [k for k in (want if isinstance(want, list) else []) if k not in got]
        return f"missing required propert{'y' if len(missing) == 1 else 'ies'} {_names(missing)}"
    if kind == "additionalProperties" and isinstance(got, dict):
        schema = err.schema if isinstance(err.schema, dict) else {}
        known = schema.get("properties") or {}
        patterns = [re.compile(p) for p in schema.get("patternProperties") or {}]
        extra = [k for k in got if k not in known and not any(p.search(k) for p in patterns)]
        return f"unexpected propert{'y' if len(extra) == 1 else 'ies'} {_names(extra)}"
    if kind == "enum":
        return f"must be one of {shown(want, 200)}"
    if kind == "const":
        return f"must be {shown(want)}"
    if kind in ("minLength", "maxLength"):
        side = "at most" if kind == "maxLength" else "at least"
        return f"is {size} characters long; {side} {want} allowed"
    if kind in ("minItems", "maxItems", "minProperties", "maxProperties"):
        side = "at most" if kind.startswith("max") else "at least"
        what = "items" if kind.endswith("Items") else "properties"
        return f"has {size} {what}; {side} {want} allowed"
    if kind in BOUNDS:
        return f"must be {BOUNDS[kind]} {shown(want)}"
    if kind == "multipleOf":
        return f"must be a multiple of {shown(want)}"
    if kind == "pattern":
        return f"does not match the pattern {shown(want, 100)}"
    if kind == "format":
        return f"is not a valid {shown(want, 40)}"
    if kind == "uniqueItems":
        return "has duplicate items"
    if kind in ("anyOf", "oneOf"):
        return "does not match exactly one of the allowed shapes" if kind == "oneOf" else \
            "matches none of the allowed shapes"
    if kind == "not":
        return "matches a shape that is not allowed"
    if kind == "False" or want is False:
        return "is not allowed here"
    return f"fails the schema's {shown(kind, 40)} check"
