"""JSON Schemas inside definitions (`input`, agent `output`): checked and applied.

Checking a schema against the 2020-12 meta-schema is the slow part of loading a
file, and the same small schemas recur across a corpus, so results are cached
by canonical text.
"""

from __future__ import annotations

import json
from functools import lru_cache
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError, ValidationError, best_match


def canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def schema_problem(schema: dict[str, Any]) -> str | None:
    try:
        key = canonical(schema)
    except (TypeError, ValueError):
        return "it contains values that are not JSON"
    return _problem(key)


@lru_cache(maxsize=4096)
def _problem(key: str) -> str | None:
    try:
        Draft202012Validator.check_schema(json.loads(key))
    except SchemaError as exc:
        where = "/".join(str(p) for p in exc.absolute_path)
        return f"{exc.message}" + (f" (at {where})" if where else "")
    return None


@lru_cache(maxsize=1024)
def _validator(key: str) -> Draft202012Validator:
    return Draft202012Validator(json.loads(key))


def validation_errors(schema: dict[str, Any] | Any, value: Any, limit: int = 5) -> list[str]:
    """Human messages for why `value` does not match `schema` (empty when it does)."""
    validator = _validator(canonical(schema))
    errors = sorted(validator.iter_errors(value), key=lambda e: list(e.absolute_path))
    if not errors:
        return []
    out = []
    first: ValidationError | None = best_match(errors)
    ordered = [first, *[e for e in errors if e is not first]] if first else errors
    for err in ordered[:limit]:
        where = "".join(f"[{p!r}]" if isinstance(p, int) else f".{p}" for p in err.absolute_path)
        out.append(f"{'$' + where if where else 'value'}: {err.message}")
    return out
