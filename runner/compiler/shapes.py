"""Shape checks from a JSON Schema, reported as positioned diagnostics.

`jsonschema`'s `iter_errors` finds every shape mistake; this module turns each
into the compiler's diagnostic at the key path where it is (positions are
resolved from the path later, `diagnostics.py`), with a 'did you mean' for an
unknown key. The hand-written parsers keep only what a schema cannot say.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from jsonschema.exceptions import ValidationError

from .checker import type_name
from .diagnostics import DiagnosticSink, KeyPath, did_you_mean
from .jsonschemas import validator_for
from .schemamessages import describe

_TYPE_WORDS = {"object": "a mapping", "array": "a list", "string": "a string",
               "integer": "an integer", "number": "a number", "boolean": "true or false",
               "null": "null"}


def _leaves(err: ValidationError) -> list[ValidationError]:
    """The errors worth saying: for an anyOf/oneOf, the branch that got furthest."""
    if err.validator in ("anyOf", "oneOf") and err.context:
        deepest = max(len(e.absolute_path) for e in err.context)
        if deepest > len(err.absolute_path):
            return [e for e in err.context if len(e.absolute_path) == deepest]
    return [err]


def check_shape(sink: DiagnosticSink, schema: Mapping[str, Any], value: Any, kp: KeyPath,
                what: str, *, owner: str = "",
                skip: Callable[[Any], bool] = lambda _v: False) -> bool:
    """Report every mistake in `value` against `schema` under `kp`; True when none.

    Messages name the place as `what.inner.path` + `owner` ("with.method of step
    'http'"). `skip(instance)` drops errors about values the schema cannot judge yet (a template
    string standing for a number until the run renders it)."""
    ok = True
    errors = sorted(validator_for(dict(schema)).iter_errors(value),
                    key=lambda e: [str(p) for p in e.absolute_path])
    for top in errors:
        for err in _leaves(top):
            if skip(err.instance) or sink.stopped:
                continue
            ok = False
            _report(sink, err, kp, what, owner)
    return ok


def _report(sink: DiagnosticSink, err: ValidationError, kp: KeyPath, what: str,
            owner: str) -> None:
    rel: KeyPath = tuple(err.absolute_path)
    path: KeyPath = (*kp, *rel)
    inner = ".".join(str(p) for p in rel)
    where = (f"{what}.{inner}" if inner else what) + owner
    schema = err.schema if isinstance(err.schema, dict) else {}
    if err.validator == "additionalProperties" and isinstance(err.instance, dict):
        known = tuple(schema.get("properties") or {})
        for k in err.instance:
            if k in known:
                continue
            sink.error("unknown-key", f"unknown key '{k}' in {where}", (*path, k), at_key=True,
                       hint=did_you_mean(str(k), known) or (
                           f"expected one of: {', '.join(known)}" if known else None))
        return
    if err.validator == "required" and isinstance(err.instance, dict):
        for k in err.validator_value if isinstance(err.validator_value, list) else ():
            if k not in err.instance:
                sink.error("missing-key", f"{where} needs '{k}'", path, at_key=bool(path))
        return
    if err.validator == "type":
        wanted = err.validator_value if isinstance(err.validator_value, list) \
            else [err.validator_value]
        words = " or ".join(_TYPE_WORDS.get(str(t), str(t)) for t in wanted)
        sink.error("wrong-type", f"{where} must be {words}, not {type_name(err.instance)}", path)
        return
    if err.validator == "enum":
        choices = [str(c) for c in err.validator_value] if isinstance(
            err.validator_value, list) else []
        sink.error("invalid-value", f"{where} {describe(err)}", path,
                   hint=did_you_mean(str(err.instance), choices))
        return
    sink.error("invalid-value", f"{where} {describe(err)}", path)
