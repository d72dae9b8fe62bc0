"""YAML loading: a fast C loader for the happy path, positions on demand.

The safe C loader (its parts in `_yamlfast`) reads a typical file several times
faster than the round-trip loader, but it forgets where things were. Positions are
only needed for files that have diagnostics, so `_yamlpos.locate_all` re-reads just
those files and maps key paths to 1-based lines and columns.
"""

from __future__ import annotations

import datetime
import math
from collections.abc import Iterator
from typing import Any, NamedTuple

from ruamel.yaml.constructor import DuplicateKeyError
from ruamel.yaml.error import MarkedYAMLError, YAMLError
from ruamel.yaml.events import AliasEvent, CollectionEndEvent, CollectionStartEvent
from ruamel.yaml.nodes import MappingNode, ScalarNode, SequenceNode

from ._diagnostics import Diagnostic
from ._yamlfast import (
    _MAP,
    _SEQ,
    _STR,
    _STR_TAG,
    _VALUE_ERRORS,
    MAX_DEPTH,
    _BadValue,
    _fast,
    _local,
    _one_line,
    _TooDeep,
)


class YamlProblem(Exception):
    """The text is not YAML that wfrun can read; carries the diagnostic."""

    def __init__(self, diagnostic: Diagnostic) -> None:
        super().__init__(diagnostic.message)
        self.diagnostic = diagnostic


def load(text: str, path: str) -> Any:
    """Parse YAML into plain JSON-like data, or raise `YamlProblem`.

    A big file's `nodes:` comes back as a `LazyNodes` mapping: each node is built
    when the checks reach it, so a file with 100,000 mistakes stops being read once
    the 200-problem cap is hit (`access` turns its errors into `YamlProblem` too)."""
    guarded = _check_depth(text, path)
    _local.composed = None
    try:
        if len(text) > LAZY_MIN:
            with access(path):
                lazy = _load_lazy(text, guarded)
            if lazy is not None:
                return lazy
        data = _load_data(text, guarded)
    except _TooDeep:
        _check_depth(text, path, force=True)  # raises with the position
        raise YamlProblem(Diagnostic(  # (the walk always finds it: defensive)
            path, "yaml-too-deep", f"YAML nesting is deeper than {MAX_DEPTH} levels")) from None
    except DuplicateKeyError as exc:
        raise YamlProblem(_duplicate(exc, path)) from None
    except MarkedYAMLError as exc:
        raise YamlProblem(_syntax(exc, path, text)) from None
    except YAMLError as exc:
        raise YamlProblem(Diagnostic(path, "yaml-syntax", _one_line(str(exc)))) from None
    except RecursionError:
        raise YamlProblem(
            Diagnostic(path, "yaml-too-deep", "YAML nesting is too deep")
        ) from None
    except _BadValue as exc:
        raise YamlProblem(exc.diagnostic(path)) from None
    except _VALUE_ERRORS as exc:  # a mapping key, or the pure-Python loader's errors
        raise YamlProblem(_BadValue(None, exc).diagnostic(path)) from None
    if isinstance(data, _Built):
        return data.value
    try:
        return _plain(data, 0, set(), [MAX_VALUES])
    except _Limit as exc:
        if exc.code == "yaml-too-deep":
            _check_depth(text, path, force=True)  # raises with the position when it can
        raise YamlProblem(Diagnostic(path, exc.code, exc.message)) from None


class _Built(NamedTuple):
    """A document `_direct` built: plain already."""
    value: Any


def _load_data(text: str, guarded: bool) -> Any:
    """The document as `_fast().load` constructs it, or `_Built` when `_direct` could
    build it plain in one pass."""
    y = _fast(guarded)
    if y.Parser.__name__ != "CParser":
        return y.load(text)
    constructor, parser = y.get_constructor_parser(text)
    try:
        root = constructor.composer.get_single_node()
    finally:
        parser.dispose()
    if root is None:
        return None
    try:
        return _Built(_direct(root, constructor, 0, [MAX_VALUES], set()))
    except _Unusual:  # afresh: a node that failed is marked as under construction
        constructor.constructed_objects, constructor.recursive_objects = {}, {}
        return constructor.construct_document(root)


class _Unusual(Exception):
    """Something `_direct` leaves to ruamel's constructor and `_plain`."""


_MAP_TAG = "tag:yaml.org,2002:map"
_SEQ_TAG = "tag:yaml.org,2002:seq"
# Scalars whose constructed value `_plain` keeps as it is (but a float's inf and nan).
_PLAIN_SCALARS = frozenset({"tag:yaml.org,2002:int", "tag:yaml.org,2002:float",
                            "tag:yaml.org,2002:bool", "tag:yaml.org,2002:null"})


def _scalar(node: Any, constructor: Any, *, key: bool = False) -> Any:
    if node.ctag.trval not in _PLAIN_SCALARS:  # dates, binary, merge keys, own tags
        raise _Unusual
    try:
        value = constructor.construct_object(node)
    except Exception:  # the stock path reports it (the first in its order)
        raise _Unusual from None
    if not key and isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return value


def _direct(node: Any, constructor: Any, depth: int, budget: list[int],
            active: set[int]) -> Any:
    """The plain value of a composed node in one pass, for documents made of plain
    mappings, sequences and scalars: what `construct_document` then `_plain` make of
    it, without ruamel's per-node generators and the second walk (a third of
    validate's load time). An alias is copied where it is used, counted against the
    budget and the depth there, as `_plain` copies it. Merge keys, duplicate or
    non-scalar keys, other tags, a mapping inside itself, nesting past MAX_DEPTH,
    more than MAX_VALUES values or any error: `_Unusual`, so the stock path reads
    the document and reports what it finds, as before."""
    budget[0] -= 1
    if budget[0] < 0:
        raise _Unusual
    cls = node.__class__
    if cls is ScalarNode:
        return node.value if _is_str(node.ctag) else _scalar(node, constructor)
    if depth >= MAX_DEPTH or id(node) in active:
        raise _Unusual
    tag = node.ctag
    # A string among the items or values is taken here, not in a call of its own
    # (most of a document's nodes); each still counts against the budget.
    if cls is SequenceNode and (tag is _SEQ or tag.trval == _SEQ_TAG):
        active.add(id(node))
        items: list[Any] = []
        strings = 0
        for v in node.value:
            if v.__class__ is ScalarNode and v.ctag is _STR:
                items.append(v.value)
                strings += 1
            else:
                items.append(_direct(v, constructor, depth + 1, budget, active))
        active.discard(id(node))
        return _counted(items, strings, budget)
    if cls is not MappingNode or not (tag is _MAP or tag.trval == _MAP_TAG):
        raise _Unusual
    active.add(id(node))
    out: dict[Any, Any] = {}
    strings = 0
    for key_node, value_node in node.value:
        if key_node.__class__ is not ScalarNode:
            raise _Unusual
        key = key_node.value if _is_str(key_node.ctag) \
            else _scalar(key_node, constructor, key=True)  # `1:`, `true:`: as constructed
        if key in out:  # a duplicate: the constructor's error, with its position
            raise _Unusual
        if value_node.__class__ is ScalarNode and value_node.ctag is _STR:
            out[key] = value_node.value
            strings += 1
        else:
            out[key] = _direct(value_node, constructor, depth + 1, budget, active)
    active.discard(id(node))
    return _counted(out, strings, budget)


def _counted(value: Any, strings: int, budget: list[int]) -> Any:
    """`value`, with the strings `_direct` took in place counted against the budget."""
    budget[0] -= strings
    if budget[0] < 0:
        raise _Unusual
    return value


def _is_str(tag: Any) -> bool:
    return tag is _STR or tag.trval == _STR_TAG


# Past this size `nodes:` is built node by node as the checks walk it.
LAZY_MIN = 256 * 1024


class LazyNodes(dict[str, Any]):
    """`nodes:` of a big file: keys now, each value built (and made plain) on access.

    Only `items()` and item access are used by the checks (parse.py `_nodes`); the
    underlying dict holds the composed YAML nodes."""

    def __init__(self, pairs: list[tuple[str, Any]], build: Any) -> None:
        super().__init__(pairs)
        self._build = build

    def __getitem__(self, key: str) -> Any:
        return self._build(super().__getitem__(key))

    def get(self, key: str, default: Any = None) -> Any:
        return self[key] if key in self else default  # noqa: SIM401 (this is get)

    def items(self) -> Iterator[tuple[str, Any]]:  # type: ignore[override]
        for key in self:
            yield key, self[key]

    def values(self) -> Iterator[Any]:  # type: ignore[override]
        for key in self:
            yield self[key]


def _load_lazy(text: str, guarded: bool) -> Any | None:
    """The document with a lazy `nodes:`, or None when the plain load should run
    (no top-level mapping with a plain `nodes:` mapping: merge keys, tagged or
    non-string or duplicate keys)."""
    y = _fast(guarded)
    constructor, parser = y.get_constructor_parser(text)
    try:
        root = constructor.composer.get_single_node()
    except (YAMLError, RecursionError, *_VALUE_ERRORS):
        return None  # the plain load reports it, with its position
    finally:
        parser.dispose()
    if not isinstance(root, MappingNode) or root.tag != "tag:yaml.org,2002:map":
        return None
    found = [(k, v) for k, v in root.value
             if isinstance(k, ScalarNode) and k.value == "nodes" and not k.style]
    top_keys = [k.value for k, _v in root.value if isinstance(k, ScalarNode)]
    if len(found) != 1 or len(set(top_keys)) != len(root.value):
        return None
    _local.composed = (text, root)  # NodePositionMap places this text's problems from it
    key_node, nodes = found[0]
    if not isinstance(nodes, MappingNode) or nodes.tag != "tag:yaml.org,2002:map":
        return None
    keys: list[str] = []
    for k, _v in nodes.value:
        if not isinstance(k, ScalarNode) or k.tag != _STR_TAG or k.style \
                or k.value == "<<":
            return None
        keys.append(k.value)
    if len(set(keys)) != len(keys):
        return None  # the plain load reports the duplicate with its position
    rest = MappingNode(root.tag, [(k, v) for k, v in root.value if v is not nodes],
                       root.start_mark, root.end_mark)
    budget = [MAX_VALUES]
    try:
        data = _direct(rest, constructor, 0, budget, set())
    except _Unusual:  # the stock path, afresh
        budget[0] = MAX_VALUES
        constructor.constructed_objects, constructor.recursive_objects = {}, {}
        try:
            data = _plain(constructor.construct_document(rest), 0, set(), budget)
        except (YAMLError, RecursionError, _Limit, *_VALUE_ERRORS):
            return None

    def build(node: Any) -> Any:
        left = budget[0]
        try:
            return _direct(node, constructor, 2, budget, set())
        except _Unusual:  # the stock path, afresh (its count, no node left half-built)
            budget[0] = left
            constructor.recursive_objects = {}
        try:
            value = constructor.construct_object(node, deep=True)
            return _plain(value, 2, set(), budget)
        except _VALUE_ERRORS as exc:
            raise _BadValue(node, exc) from None

    data[key_node.value] = LazyNodes(list(zip(keys, (v for _k, v in nodes.value),
                                              strict=True)), build)
    return data


class access:
    """Turns what loading raises (now, or later from a `LazyNodes` value) into
    `YamlProblem`, with the same diagnostics as a plain load."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: Any, exc: BaseException | None, tb: Any) -> None:
        if exc is None or isinstance(exc, YamlProblem):
            return
        path = self.path
        if isinstance(exc, DuplicateKeyError):
            raise YamlProblem(_duplicate(exc, path)) from None
        if isinstance(exc, MarkedYAMLError):
            raise YamlProblem(Diagnostic(path, "yaml-syntax", _one_line(str(exc)))) from None
        if isinstance(exc, YAMLError):
            raise YamlProblem(Diagnostic(path, "yaml-syntax", _one_line(str(exc)))) from None
        if isinstance(exc, RecursionError):
            raise YamlProblem(Diagnostic(path, "yaml-too-deep", "YAML nesting is too deep")) \
                from None
        if isinstance(exc, _BadValue):
            raise YamlProblem(exc.diagnostic(path)) from None
        if isinstance(exc, _Limit):
            raise YamlProblem(Diagnostic(path, exc.code, exc.message)) from None


MAX_VALUES = 1_000_000


def _check_depth(text: str, path: str, force: bool = False) -> bool:
    """Refuse very deep nesting before the C composer recurses into it.

    libyaml's parser keeps its own stack, but the composer recurses in C and
    crashes the process (SIGSEGV) somewhere past ~25,000 levels, far sooner on
    small thread stacks. Nesting needs an opening bracket or one more column per
    level (two levels for a mapping holding a sequence), so most files are proven
    shallow by a cheap bound; the rest get their parse events counted, which
    never recurses. A text with no anchor (`&`) cannot hold an alias to a mapping
    around it, so with the C composer it needs no walk either: it is composed by
    `_fast(guarded=True)`, whose resolver stops the composer past MAX_DEPTH
    (`_TooDeep`), and only then does the walk run, to say where (the templates of a
    5,000-node workflow put 20,000 braces in it, and the walk was 1/3 of its YAML
    time). Returns whether the compose must be guarded.
    """
    if not force:
        bound = text.count("[") + text.count("{") + 2 * max(map(len, text.split("\n")))
        if bound <= 1000:
            return False
        if "&" not in text and _fast().Parser.__name__ == "CParser":
            return True
    depth = 0
    open_anchors: list[str | None] = []
    try:
        for event in _fast().parse(text):
            if isinstance(event, AliasEvent) and event.anchor in open_anchors:
                mark = event.start_mark
                raise YamlProblem(Diagnostic(
                    path, "yaml-too-deep", f"alias '*{event.anchor}' refers to a mapping or "
                    "list that contains it, which would nest forever",
                    line=mark.line + 1 if mark else 0, column=mark.column + 1 if mark else 0))
            if isinstance(event, CollectionStartEvent):
                open_anchors.append(event.anchor)
                depth += 1
                if depth > MAX_DEPTH:
                    mark = event.start_mark
                    raise YamlProblem(Diagnostic(
                        path, "yaml-too-deep", f"YAML nesting is deeper than {MAX_DEPTH} levels",
                        line=mark.line + 1 if mark else 0, column=mark.column + 1 if mark else 0))
            elif isinstance(event, CollectionEndEvent):
                open_anchors.pop()
                depth -= 1
    except YAMLError:
        pass  # the real load reports it, with its position
    return False


class _Limit(Exception):
    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def _plain(value: Any, depth: int, active: set[int], budget: list[int]) -> Any:
    """Dates become ISO strings so every loaded value survives JSON."""
    budget[0] -= 1
    if budget[0] < 0:
        raise _Limit("yaml-too-large", f"aliases expand to more than {MAX_VALUES:,} values")
    if isinstance(value, (dict, list)):
        if id(value) in active:
            raise _Limit("yaml-too-deep", "an alias refers to a mapping or list that contains "
                         "it, which would nest forever")
        if depth >= MAX_DEPTH:
            raise _Limit("yaml-too-deep", f"YAML nesting is deeper than {MAX_DEPTH} levels")
        active.add(id(value))
        try:
            if isinstance(value, dict):
                return {_key(k): _plain(v, depth + 1, active, budget)
                        for k, v in value.items()}
            return [_plain(v, depth + 1, active, budget) for v in value]
        finally:
            active.discard(id(value))
    if isinstance(value, (set, frozenset)):
        # `!!set {a, b}` is YAML for the mapping {a: null, b: null}; JSON has no sets.
        # Sorted, so the digest is the same in every process (sets follow the hash seed).
        budget[0] -= len(value)
        return {k: None for k in sorted((_key(k) for k in value), key=_order)}
    if isinstance(value, (datetime.date, datetime.datetime)):
        return value.isoformat()
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, bytes):
        return value.decode("latin-1")
    return value


def _order(k: Any) -> tuple[str, str]:
    return type(k).__name__, str(k)


def _key(k: Any) -> Any:
    if isinstance(k, (datetime.date, datetime.datetime)):
        return k.isoformat()
    if isinstance(k, (list, dict, tuple)):
        return str(k)
    return k


def _duplicate(exc: DuplicateKeyError, path: str) -> Diagnostic:
    mark = exc.problem_mark
    problem = (exc.problem or "duplicate key").split(" with value")[0]
    problem = problem.replace("found duplicate key", "duplicate key")
    return Diagnostic(
        path,
        "duplicate-key",
        f"{problem}; each key may appear once in a mapping",
        line=(mark.line + 1) if mark else 0,
        column=(mark.column + 1) if mark else 0,
    )


def _syntax(exc: MarkedYAMLError, path: str, text: str) -> Diagnostic:
    mark = exc.problem_mark or exc.context_mark
    line = (mark.line + 1) if mark else 0
    column = (mark.column + 1) if mark else 0
    problem = exc.problem or "invalid YAML"
    if "\t" in problem or "tab" in problem:
        return Diagnostic(
            path,
            "yaml-tab",
            "tab character where YAML expects spaces; indent with spaces",
            line=line,
            column=column,
        )
    lines = text.splitlines()
    if 0 < line <= len(lines) and "\t" in lines[line - 1][: max(column, 1)]:
        return Diagnostic(
            path,
            "yaml-tab",
            "tab character where YAML expects spaces; indent with spaces",
            line=line,
            column=lines[line - 1].index("\t") + 1,
        )
    context = f" {exc.context}" if exc.context else ""
    hint = None
    if "unexpected ':'" in problem:
        # `{call: ./hooks.py:score}`: in a flow mapping a bare ':' ends the key.
        hint = "quote a value that contains ':', like \"./hooks.py:score\""
    return Diagnostic(
        path, "yaml-syntax", _one_line(f"{problem}{context}"), line=line, column=column,
        hint=hint,
    )
