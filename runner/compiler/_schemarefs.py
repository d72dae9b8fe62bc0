"""What a schema inside a definition may refer to, and regexes run with a bound.

A schema comes from someone else's YAML, so applying it must not reach the network
(a `$ref` to an http URL was fetched with no timeout), loop (`$ref` chains that come
back to themselves without consuming input) or backtrack for seconds (`^(a+)+$`).
Only local references (`#/...` pointers and `#name` anchors) are allowed, every one
must resolve, and every regex a schema holds (`pattern`, which `propertyNames` uses
too, `patternProperties`, and the keys `additionalProperties` and
`unevaluatedProperties` check against it) runs in the `regex` module with a
timeout (docs/adr/0006-template-budget-in-process.md says why not re2).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

from ._schemamessages import shown

if TYPE_CHECKING:
    from jsonschema import Draft202012Validator

#: How long one `pattern` may run on one value.
PATTERN_SECONDS = 0.1
Path = tuple[str | int, ...]
# Keywords whose subschemas apply to the same instance as their parent: a `$ref` cycle
# through only these never consumes input, so validation would recurse for ever.
_SAME_PLACE = ("allOf", "anyOf", "oneOf")
_SAME_PLACE_ONE = ("not", "if", "then", "else")
_SAME_PLACE_MAP = ("dependentSchemas",)


def _walk(node: Any, path: Path = ()) -> Iterator[tuple[Path, Any]]:
    stack: list[tuple[Path, Any]] = [(path, node)]
    while stack:
        where, value = stack.pop()
        if isinstance(value, dict):
            yield where, value
            stack.extend(((*where, k), v) for k, v in value.items())
        elif isinstance(value, list):
            stack.extend(((*where, i), v) for i, v in enumerate(value))


def _pointer(root: Any, fragment: str) -> tuple[Any, Path] | None:
    """The value at a JSON pointer fragment ('/a/b~1c'), or None when absent."""
    node: Any = root
    path: Path = ()
    for raw in fragment.split("/")[1:]:
        part = unquote(raw).replace("~1", "/").replace("~0", "~")
        if isinstance(node, dict) and part in node:
            node, path = node[part], (*path, part)
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node, path = node[int(part)], (*path, int(part))
        else:
            return None
    return node, path


def _target(root: Any, anchors: dict[str, Path], ref: str) -> Path | None:
    fragment = ref[1:]
    if fragment == "" or fragment.startswith("/"):
        found = _pointer(root, fragment)
        return found[1] if found is not None else None
    return anchors.get(unquote(fragment))


def ref_problem(schema: Any) -> tuple[str, Path] | None:
    """(message, path) for a reference wfrun will not follow, or None."""
    nodes = dict(_walk(schema))
    anchors = {v["$anchor"]: p for p, v in nodes.items() if isinstance(v.get("$anchor"), str)}
    targets: dict[Path, Path] = {}
    for path, node in sorted(nodes.items(), key=lambda item: [str(x) for x in item[0]]):
        for keyword in ("$ref", "$dynamicRef"):
            ref = node.get(keyword)
            if not isinstance(ref, str):
                continue
            where = (*path, keyword)
            if not ref.startswith("#"):
                return (f"{keyword} '{ref[:120]}' points outside this schema; wfrun never "
                        "fetches schemas: use a local reference like '#/$defs/name'", where)
            target = _target(schema, anchors, ref)
            if target is None:
                return (f"{keyword} '{ref[:120]}' does not point at anything in this schema",
                        where)
            targets[path] = target
    cycle = _same_place_cycle(nodes, targets)
    if cycle is not None:
        shown = " -> ".join("#/" + "/".join(str(x) for x in p) for p in cycle)
        return (f"$ref loops back without consuming any input ({shown}); validation would "
                "never end", (*cycle[0], "$ref"))
    return None


def _same_place_cycle(nodes: dict[Path, Any], targets: dict[Path, Path]) -> list[Path] | None:
    def edges(path: Path) -> Iterator[Path]:
        node = nodes.get(path)
        if not isinstance(node, dict):
            return
        if path in targets:
            yield targets[path]
        for k in _SAME_PLACE:
            if isinstance(node.get(k), list):
                yield from ((*path, k, i) for i in range(len(node[k])))
        for k in _SAME_PLACE_ONE:
            if k in node:
                yield (*path, k)
        for k in _SAME_PLACE_MAP:
            if isinstance(node.get(k), dict):
                yield from ((*path, k, name) for name in node[k])

    state: dict[Path, int] = {}  # 1 on the stack, 2 done
    for start in targets:
        if state.get(start):
            continue
        stack: list[tuple[Path, Iterator[Path]]] = [(start, edges(start))]
        trail = [start]
        state[start] = 1
        while stack:
            path, it = stack[-1]
            nxt = next(it, None)
            if nxt is None:
                state[path] = 2
                stack.pop()
                trail.pop()
                continue
            if state.get(nxt) == 1:
                return [*trail[trail.index(nxt):], nxt]
            if not state.get(nxt):
                state[nxt] = 1
                trail.append(nxt)
                stack.append((nxt, edges(nxt)))
    return None


# -- validation with bounded regexes and no retrieval -------------------------------

def _search(pattern: str, text: str) -> bool | None:
    """True/False, or None when the pattern ran past its time."""
    import regex  # type: ignore[import-untyped]  # no stubs; two calls used

    try:
        return regex.search(pattern, text, timeout=PATTERN_SECONDS) is not None
    except TimeoutError:
        return None
    except regex.error:
        return False


def _too_slow(pattern: str) -> str:
    return (f"the pattern {shown(pattern, 80)} ran longer than {PATTERN_SECONDS:g} s on this "
            "value; simplify the pattern")


def _pattern(validator: Any, patrn: str, instance: Any, schema: Any) -> Iterator[Any]:
    from jsonschema.exceptions import ValidationError

    if not validator.is_type(instance, "string"):
        return
    found = _search(patrn, instance)
    if found is None:
        yield ValidationError(_too_slow(patrn))
    elif not found:
        yield ValidationError(f"does not match the pattern {shown(patrn, 100)}")


def _pattern_properties(validator: Any, patterns: dict[str, Any], instance: Any,
                        schema: Any) -> Iterator[Any]:
    from jsonschema.exceptions import ValidationError

    if not validator.is_type(instance, "object"):
        return
    for patrn, subschema in patterns.items():
        for k, v in instance.items():
            found = _search(patrn, k)
            if found is None:
                yield ValidationError(_too_slow(patrn))
                return
            if found:
                yield from validator.descend(v, subschema, path=k, schema_path=patrn)


def _additional_properties(validator: Any, aP: Any, instance: Any,
                           schema: Any) -> Iterator[Any]:
    """jsonschema's own, with the patternProperties match bounded too."""
    from jsonschema.exceptions import ValidationError

    if not validator.is_type(instance, "object"):
        return
    properties = schema.get("properties", {})
    patterns = list(schema.get("patternProperties", {}))
    extras = []
    for k in instance:
        if k in properties:
            continue
        matched = [_search(p, k) for p in patterns]
        if None in matched:
            yield ValidationError(_too_slow(patterns[matched.index(None)]))
            return
        if not any(matched):
            extras.append(k)
    if validator.is_type(aP, "object"):
        for extra in extras:
            yield from validator.descend(instance[extra], aP, path=extra)
    elif not aP and extras:
        names = ", ".join(shown(e, 40) for e in sorted(extras)[:10])
        verb = "was" if len(extras) == 1 else "were"
        yield ValidationError(f"Additional properties are not allowed ({names} {verb} "
                              "unexpected)")


class _SlowPattern(Exception):
    def __init__(self, pattern: str) -> None:
        super().__init__(pattern)
        self.pattern = pattern


def _unevaluated_properties(validator: Any, uP: Any, instance: Any,
                            schema: Any) -> Iterator[Any]:
    """jsonschema's own, with the keys that `patternProperties` evaluates found by the
    bounded search (its helper calls `re.search` directly)."""
    from jsonschema.exceptions import ValidationError

    if not validator.is_type(instance, "object"):
        return
    try:
        evaluated = _evaluated_keys(validator, instance, schema)
    except _SlowPattern as slow:
        yield ValidationError(_too_slow(slow.pattern))
        return
    unevaluated = [k for k in instance if k not in evaluated
                   and next(validator.descend(instance[k], uP, path=k, schema_path=k),
                            None) is not None]
    if not unevaluated:
        return
    names = ", ".join(shown(str(k), 40) for k in sorted(unevaluated, key=str)[:10])
    verb = "was" if len(unevaluated) == 1 else "were"
    if uP is False:
        yield ValidationError(f"Unevaluated properties are not allowed ({names} {verb} "
                              "unexpected)")
    else:
        yield ValidationError(f"Unevaluated properties are not valid under the given schema "
                              f"({names} {verb} unevaluated and invalid)")


def _valid(errors: Iterator[Any]) -> bool:
    return next(errors, None) is None


def _evaluated_keys(validator: Any, instance: dict[str, Any], schema: Any) -> set[str]:
    """jsonschema's `find_evaluated_property_keys_by_schema` (4.x), keyword for keyword;
    raises `_SlowPattern` when a `patternProperties` regex runs past its time."""
    if validator.is_type(schema, "boolean"):
        return set()
    keys: set[str] = set()
    for keyword in ("$ref", "$dynamicRef"):
        ref = schema.get(keyword)
        if ref is not None:
            # jsonschema's helper follows references the same way (a private attribute).
            resolved = validator._resolver.lookup(ref)
            keys |= _evaluated_keys(
                validator.evolve(schema=resolved.contents, _resolver=resolved.resolver),
                instance, resolved.contents)
    properties = schema.get("properties")
    if validator.is_type(properties, "object"):
        keys |= properties.keys() & instance.keys()
    for keyword in ("additionalProperties", "unevaluatedProperties"):
        sub = schema.get(keyword)
        if sub is not None:
            keys |= {k for k, v in instance.items() if _valid(validator.descend(v, sub))}
    for patrn in schema.get("patternProperties", {}):
        for k in instance:
            found = _search(patrn, k)
            if found is None:
                raise _SlowPattern(patrn)
            if found:
                keys.add(k)
    for name, sub in schema.get("dependentSchemas", {}).items():
        if name in instance:
            keys |= _evaluated_keys(validator, instance, sub)
    for keyword in ("allOf", "oneOf", "anyOf"):
        for sub in schema.get(keyword, []):
            if _valid(validator.descend(instance, sub)):
                keys |= _evaluated_keys(validator, instance, sub)
    if "if" in schema:
        if validator.evolve(schema=schema["if"]).is_valid(instance):
            keys |= _evaluated_keys(validator, instance, schema["if"])
            if "then" in schema:
                keys |= _evaluated_keys(validator, instance, schema["then"])
        elif "else" in schema:
            keys |= _evaluated_keys(validator, instance, schema["else"])
    return keys


def _refuse(uri: str) -> Any:
    from referencing.exceptions import NoSuchResource

    raise NoSuchResource(ref=uri)  # type: ignore[call-arg]  # attrs, not seen by mypy


def bounded_validator(schema: Any) -> Draft202012Validator:
    from jsonschema import Draft202012Validator, validators
    from referencing import Registry

    cls = validators.extend(Draft202012Validator, {  # type: ignore[no-untyped-call]
        "pattern": _pattern,
        "patternProperties": _pattern_properties,
        "additionalProperties": _additional_properties,
        "unevaluatedProperties": _unevaluated_properties,
    })
    registry: Registry[Any] = Registry(retrieve=_refuse)  # type: ignore[call-arg]
    validator: Draft202012Validator = cls(schema, registry=registry)
    return validator
