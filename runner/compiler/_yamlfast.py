"""The fast YAML loader's parts: a resolver and a constructor for ruamel's C loader,
one loader per thread, and the shared per-thread state the loads and the position maps
use (`_local`)."""

from __future__ import annotations

import threading
from functools import lru_cache
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.constructor import SafeConstructor
from ruamel.yaml.nodes import MappingNode, ScalarNode
from ruamel.yaml.resolver import VersionedResolver
from ruamel.yaml.tag import Tag

from ._diagnostics import Diagnostic

_local = threading.local()

# The tags `_Resolver` gives untagged strings, lists and mappings (shared objects, so
# an identity test answers for most nodes); an explicit `!!str` is a tag of its own.
_STR, _SEQ, _MAP = (VersionedResolver.DEFAULT_SCALAR_TAG, VersionedResolver.DEFAULT_SEQUENCE_TAG,
                    VersionedResolver.DEFAULT_MAPPING_TAG)

# Deeper than any real workflow, shallow enough for every later recursive walk
# (JSON Schema checks, canonical JSON); aliases must not expand without bound.
MAX_DEPTH = 64


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


def _one_line(message: str) -> str:
    parts = [p.strip() for p in message.splitlines() if p.strip()]
    return "; ".join(parts)[:300]
