"""YAML loading: a fast C loader for the happy path, positions on demand.

The safe C loader reads a typical file several times faster than the
round-trip loader, but it forgets where things were. Positions are only needed
for files that have diagnostics, so `locate` re-reads just those files with the
round-trip loader and maps key paths to 1-based lines and columns.
"""

from __future__ import annotations

import datetime
import math
import threading
from collections.abc import Iterator, Sequence
from functools import lru_cache
from typing import Any, NamedTuple

from ruamel.yaml import YAML
from ruamel.yaml.constructor import DuplicateKeyError, SafeConstructor
from ruamel.yaml.error import MarkedYAMLError, YAMLError
from ruamel.yaml.events import AliasEvent, CollectionEndEvent, CollectionStartEvent
from ruamel.yaml.nodes import MappingNode, ScalarNode, SequenceNode
from ruamel.yaml.resolver import VersionedResolver
from ruamel.yaml.tag import Tag

from ._diagnostics import Diagnostic, KeyPath

_local = threading.local()


class _Resolver(VersionedResolver):
    """ruamel's resolver, answering the C composer's per-scalar question cheaply.

    The composer asks for every scalar (~90,000 in a 200-file corpus), and the stock
    answer takes a version look-up (two caught exceptions), a list concatenation and a
    fresh `Tag` each time: a third of the compose. Here, with the same rules: a quoted
    scalar, or a plain one whose first character starts no implicit rule (most text),
    is a string at once; the rest are matched once per distinct text per load. Only
    used with the C parser, which builds a fresh loader for each load; documents whose
    rules this cannot mirror (path resolvers, a rule for any first character) take the
    stock path.
    """

    _rules: dict[Any, list[tuple[str, Any]]] | None = None  # per load (an instance's)
    _seen: dict[str, Any]

    def resolve(self, kind: Any, value: Any, implicit: Any) -> Any:
        rules = self._rules
        if rules is None:
            rules = self._rules = self._plain_rules()
            self._seen = {}
        if not rules:
            return super().resolve(kind, value, implicit)
        if kind is not ScalarNode:
            return _MAP if kind is MappingNode else _SEQ
        if not implicit[0] or value[:1] not in rules:
            return _STR
        tag = self._seen.get(value)
        if tag is None:
            tag = _STR
            for name, regexp in rules[value[:1]]:
                if regexp.match(value):
                    tag = _tag(name)
                    break
            self._seen[value] = tag
        return tag

    def _plain_rules(self) -> dict[Any, list[tuple[str, Any]]]:
        """The implicit rules by first character (`""` for the empty text), or {}
        when the stock resolve must run."""
        rules: dict[Any, list[tuple[str, Any]]] = self.versioned_resolver
        if self.yaml_path_resolvers or rules.get(None):  # None: rules for any start
            return {}
        return dict(rules)


class _GuardedResolver(_Resolver):
    """The same, also counting the composer's nesting as it works (see
    `_check_depth`): it announces each node it enters and leaves, so a document
    nested past MAX_DEPTH stops here, long before the C recursion could exhaust the
    stack. (Only for texts that need it: the count costs ~20 % of a compose.)"""

    _depth = 0

    def descend_resolver(self, current_node: Any, current_index: Any) -> None:
        if self.yaml_path_resolvers:
            super().descend_resolver(current_node, current_index)
        self._depth += 1
        if self._depth > MAX_DEPTH + 1:  # nodes: the collections on the way, a scalar
            raise _TooDeep

    def ascend_resolver(self) -> None:
        if self.yaml_path_resolvers:
            super().ascend_resolver()
        self._depth -= 1


@lru_cache(maxsize=64)
def _tag(name: str) -> Tag:
    """One `Tag` per implicit tag name: nodes share it (ruamel only caches in it)."""
    return Tag(suffix=name)


class _TooDeep(Exception):
    """The C composer went past MAX_DEPTH (the event walk says where)."""


_STR_TAG = "tag:yaml.org,2002:str"


class _Constructor(SafeConstructor):
    """The safe constructor, returning plain strings (most scalars) directly.

    Same value as the stock path (str tag -> construct_yaml_str -> node.value),
    without its five calls and two tag-to-text conversions per scalar.
    """

    def construct_object(self, node: Any, deep: bool = False) -> Any:
        if node.__class__ is ScalarNode and node.ctag.trval == _STR_TAG:
            return node.value
        try:
            return super().construct_object(node, deep)
        except _VALUE_ERRORS as exc:
            raise _BadValue(node, exc) from None


# What ruamel's constructors raise for a tag whose text does not fit it (`!!float ""`,
# `!!int "0x"`, an integer past 4,300 digits, a mapping as a key), instead of a
# YAMLError: each becomes one positioned diagnostic.
_VALUE_ERRORS = (ValueError, TypeError, IndexError, KeyError, OverflowError, AttributeError)


class _BadValue(Exception):
    def __init__(self, node: Any, exc: BaseException) -> None:
        super().__init__(str(exc))
        self.mark = getattr(node, "start_mark", None)
        tag = str(getattr(getattr(node, "ctag", None), "trval", "") or getattr(node, "tag", ""))
        self.tag = tag.replace("tag:yaml.org,2002:", "!!")
        value = getattr(node, "value", None)
        self.text = value if isinstance(value, str) else None
        self.exc = exc

    def diagnostic(self, path: str) -> Diagnostic:
        if isinstance(self.exc, TypeError) and "unhashable" in str(self.exc):
            message = "a mapping or list cannot be a mapping key; use a string"
        elif "integer string conversion" in str(self.exc):
            message = "an integer longer than 4,300 digits cannot be read; quote it as a string"
        elif self.text is not None:
            shown = _one_line(self.text)[:40] or "an empty string"
            shown = shown if shown == "an empty string" else f"'{shown}'"
            message = (f"{shown} is not a valid {self.tag or 'tagged'} value; remove the tag "
                       "or fix the value")
        else:
            message = (f"this {self.tag or 'tagged'} value cannot be read "
                       f"({_one_line(str(self.exc))[:120]}); remove the tag or fix the value")
        line = self.mark.line + 1 if self.mark is not None else 0
        column = self.mark.column + 1 if self.mark is not None else 0
        return Diagnostic(path, "yaml-value", message, line=line, column=column)


def _fast(guarded: bool = False) -> YAML:
    """The C loader (`guarded`: one whose composer stops past MAX_DEPTH)."""
    attr = "guarded" if guarded else "fast"
    y: YAML | None = getattr(_local, attr, None)
    if y is None:
        y = YAML(typ="safe", pure=False)
        if y.Parser.__name__ == "CParser":
            y.Resolver = _GuardedResolver if guarded else _Resolver
            y.Constructor = _Constructor
        setattr(_local, attr, y)
    return y


def _round_trip() -> YAML:
    y: YAML | None = getattr(_local, "rt", None)
    if y is None:
        y = YAML(typ="rt")
        _local.rt = y
    return y


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


# The tags `_Resolver` gives untagged strings, lists and mappings (shared objects, so
# an identity test answers for most nodes); an explicit `!!str` is a tag of its own.
_STR, _SEQ, _MAP = (VersionedResolver.DEFAULT_SCALAR_TAG, VersionedResolver.DEFAULT_SEQUENCE_TAG,
                    VersionedResolver.DEFAULT_MAPPING_TAG)


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


# Deeper than any real workflow, shallow enough for every later recursive walk
# (JSON Schema checks, canonical JSON); aliases must not expand without bound.
MAX_DEPTH = 64
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


def _one_line(message: str) -> str:
    parts = [p.strip() for p in message.splitlines() if p.strip()]
    return "; ".join(parts)[:300]


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


class PositionMap:
    """Key path -> 1-based position, from a round-trip load of the same text."""

    def __init__(self, text: str) -> None:
        try:
            self._root: Any = _round_trip().load(text)
        except (YAMLError, RecursionError, *_VALUE_ERRORS):
            self._root = None

    def locate(self, key_path: KeyPath, at_key: bool) -> tuple[int, int]:
        node = self._root
        parent: Any = None
        last: str | int | None = None
        best = (1, 1) if node is not None else (0, 0)
        if hasattr(node, "lc"):
            best = (node.lc.line + 1, node.lc.col + 1)
        for part in key_path:
            in_map = isinstance(node, dict) and part in node
            if isinstance(node, dict) and not in_map and isinstance(part, str):
                # Validators name a `1:` or `true:` key by its text, as cases compare.
                part = next((k for k in node if _as_text(k) == part), part)
                in_map = part in node
            in_seq = (isinstance(node, Sequence) and not isinstance(node, str)
                      and isinstance(part, int) and 0 <= part < len(node))
            if in_map or in_seq:
                parent, last, node = node, part, node[part]
            else:
                break
            best = self._position(parent, last, at_key=False)
        if at_key and isinstance(parent, dict) and last is not None:
            best = self._position(parent, last, at_key=True)
        return best

    @staticmethod
    def _position(parent: Any, key: str | int, at_key: bool) -> tuple[int, int]:
        lc = getattr(parent, "lc", None)
        if lc is None:
            return (0, 0)
        try:
            if isinstance(key, int) and not isinstance(parent, dict):
                line, col = lc.item(key)
            elif at_key:
                line, col = lc.key(key)
            else:
                line, col = lc.value(key)
        except (KeyError, IndexError, TypeError):
            return (lc.line + 1, lc.col + 1)
        return (line + 1, col + 1)


def _as_text(key: Any) -> str:
    if key is None:
        return "null"
    if isinstance(key, bool):
        return "true" if key else "false"
    return str(key)


class NodePositionMap:
    """The same lookups from the C composer's nodes: for big files, where the pure-Python
    round-trip load costs a minute per few MiB (a generated 4 MiB file with 100,000
    mistakes took two minutes just to place its first 200 diagnostics)."""

    def __init__(self, text: str) -> None:
        composed = getattr(_local, "composed", None)
        _local.composed = None
        if composed is not None and composed[0] is text:  # the lazy load's own tree
            self._root: Any = composed[1]
            return
        try:
            self._root = _fast().compose(text)
        except (YAMLError, RecursionError, _TooDeep, *_VALUE_ERRORS):
            self._root = None

    def locate(self, key_path: KeyPath, at_key: bool) -> tuple[int, int]:
        node = self._root
        if node is None:
            return (0, 0)
        best = _mark(node)
        key_node: Any = None
        for part in key_path:
            nxt = None
            if isinstance(node, MappingNode):
                for k, v in node.value:
                    if isinstance(k, ScalarNode) and k.value == _as_text(part):
                        key_node, nxt = k, v
                        break
            elif isinstance(node, SequenceNode) and isinstance(part, int) \
                    and 0 <= part < len(node.value):
                key_node, nxt = None, node.value[part]
            if nxt is None:
                break
            node = nxt
            best = _mark(node)
        if at_key and key_node is not None and node is not None:
            best = _mark(key_node)
        return best


def _mark(node: Any) -> tuple[int, int]:
    mark = getattr(node, "start_mark", None)
    return (mark.line + 1, mark.column + 1) if mark is not None else (0, 0)


# Past this size positions come from the C composer (NodePositionMap).
ROUND_TRIP_MAX = 256 * 1024


def locate_all(diags: list[Diagnostic], text: str) -> list[Diagnostic]:
    """Fill in line/column for diagnostics that carry only a key path.

    The last word on the text's positions: the lazy load's node tree (kept for
    `NodePositionMap`) is let go here, whether it was needed or not (a 5,000-node
    file's is ~135,000 objects the collector would walk again after the compile)."""
    if not any(d.key_path is not None and not d.line for d in diags):
        _local.composed = None
        return diags
    positions: PositionMap | NodePositionMap = (
        PositionMap(text) if len(text) <= ROUND_TRIP_MAX else NodePositionMap(text))
    out = []
    for d in diags:
        if d.key_path is not None and not d.line:
            line, col = positions.locate(d.key_path, d.at_key)
            d = d.located(line, col)
        out.append(d)
    return out
