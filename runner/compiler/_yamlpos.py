"""Where things are in a YAML text: 1-based positions of key paths, for the diagnostics
that carry only a path. Only files with such diagnostics are read again: with the
round-trip loader, or past ROUND_TRIP_MAX from the C composer's nodes."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ruamel.yaml.error import YAMLError
from ruamel.yaml.nodes import MappingNode, ScalarNode, SequenceNode

from ._diagnostics import Diagnostic, KeyPath
from ._yamlfast import _VALUE_ERRORS, _fast, _local, _round_trip, _TooDeep


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
