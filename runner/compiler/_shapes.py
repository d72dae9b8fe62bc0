"""Shape mistakes from a JSON Schema, said as positioned diagnostics.

`jsonschema`'s `iter_errors` finds every mistake; `leaves` picks the ones worth
saying (for a shorthand `anyOf`, the branch whose type fits the value) and
`report` says each as the compiler's diagnostic at its key path (positions are
resolved from the path later, `diagnostics.py`), with a 'did you mean' for an
unknown key or a misspelt enum value. A workflow document (`docshape.py`) and a
registered step's `with:` (`check_shape`, stepcalls.py) are both said this way.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, Protocol

from ._checker import type_name
from ._diagnostics import KeyPath, did_you_mean
from ._jsonschemas import validator_for
from ._schemamessages import describe

if TYPE_CHECKING:  # a host running compiled definitions never loads jsonschema
    from jsonschema.exceptions import ValidationError

TYPE_WORDS = {"object": "a mapping", "array": "a list", "string": "a string",
              "integer": "an integer", "number": "a number", "boolean": "true or false",
              "null": "null"}


class Sink(Protocol):
    @property
    def stopped(self) -> bool: ...

    def error(self, code: str, message: str, key_path: KeyPath | None = None, *,
              at_key: bool = False, hint: str | None = None) -> None: ...


def leaves(err: ValidationError) -> Iterator[ValidationError]:
    """The errors worth saying. For an anyOf or oneOf (a shorthand string or a mapping,
    a duration...): the errors of the one branch whose type fits the value; none fits,
    the anyOf itself (a wrong type, said with every type it takes)."""
    if err.validator not in ("anyOf", "oneOf") or not err.context:
        yield err
        return
    branches: dict[Any, list[ValidationError]] = defaultdict(list)
    for e in err.context:
        branches[e.relative_schema_path[0]].append(e)
    fits = [errs for errs in branches.values()
            if not any(e.validator == "type" and not e.relative_path for e in errs)]
    if len(fits) != 1:
        if not fits or all(e.validator == "required" for errs in fits for e in errs):
            yield err  # no shape fits: a wrong type, or (oneOf of required) a form error
        return  # several fit with different faults: the parser's format checks say it
    for e in fits[0]:
        yield from leaves(e)


def either(words: list[str]) -> str:
    if not words:
        return "another shape"
    if {"a string", "a number", "true or false"} <= set(words):
        words = ["text, a number or true/false", *(w for w in words if w not in (
            "a string", "a number", "true or false", "an integer"))]
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " or " + words[-1]


def _types(err: ValidationError) -> list[str]:
    if err.validator == "type":
        want = err.validator_value
        return list(want) if isinstance(want, list) else [str(want)]
    out: list[str] = []
    for e in err.context or ():
        if not e.relative_path:
            out += [t for t in _types(e) if t not in out]
    return out


def report(sink: Sink, err: ValidationError, path: KeyPath, what: str, *,
           unknown_hint: str | None = None, type_hint: str | None = None,
           empty: str | None = None) -> None:
    """Say one error at `path`, the place named `what` in messages."""
    instance = err.instance
    schema = err.schema if isinstance(err.schema, dict) else {}
    kind = err.validator
    if kind == "additionalProperties" and isinstance(instance, dict):
        known = tuple(str(k) for k in schema.get("properties") or {})
        for k in instance:
            if k not in known:
                sink.error("unknown-key", f"unknown key '{k}' in {what}", (*path, k),
                           at_key=True, hint=did_you_mean(str(k), known) or unknown_hint or (
                               f"expected one of: {', '.join(known)}" if known else None))
        return
    if kind == "required" and isinstance(instance, dict):
        for k in err.validator_value if isinstance(err.validator_value, list) else ():
            if k not in instance:
                sink.error("missing-key", f"{what} needs '{k}'", path, at_key=bool(path))
        return
    if kind in ("type", "anyOf", "oneOf"):
        words = either([TYPE_WORDS.get(t, t) for t in _types(err)])
        sink.error("wrong-type", f"{what} must be {words}, not {type_name(instance)}", path,
                   hint=type_hint)
        return
    if kind in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"):
        lo, hi = schema.get("minimum"), schema.get("maximum")
        bounds = f"between {lo} and {hi}" if lo is not None and hi is not None else (
            f"at least {lo}" if lo is not None else f"at most {hi}")
        sink.error("out-of-range", f"{what} must be {bounds}", path)
        return
    if kind in ("minItems", "minProperties"):
        sink.error("empty-value", empty or f"{what} must not be empty", path)
        return
    hint = None
    if kind == "enum" and isinstance(err.validator_value, list):
        hint = did_you_mean(str(instance), [str(c) for c in err.validator_value])
    sink.error("invalid-value", f"{what} {describe(err)}", path, hint=hint)


def check_shape(sink: Sink, schema: Mapping[str, Any], value: Any, kp: KeyPath,
                what: str, *, owner: str = "",
                skip: Callable[[Any], bool] = lambda _v: False) -> bool:
    """Report every mistake in `value` against `schema` under `kp`; True when none.

    Messages name the place as `what.inner.path` + `owner` ("with.method of step
    'http'"). `skip(instance)` drops errors about values the schema cannot judge yet
    (a template string standing for a number until the run renders it)."""
    ok = True
    errors = sorted(validator_for(dict(schema)).iter_errors(value),
                    key=lambda e: [str(p) for p in e.absolute_path])
    for top in errors:
        for err in leaves(top):
            if skip(err.instance) or sink.stopped:
                continue
            ok = False
            rel: KeyPath = tuple(err.absolute_path)
            inner = ".".join(str(p) for p in rel)
            report(sink, err, (*kp, *rel), (f"{what}.{inner}" if inner else what) + owner)
    return ok
