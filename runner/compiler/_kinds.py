"""The node-kind table: the one place a node kind is declared.

The parser (`parse.py`) dispatches a node's kind key through it, the published
JSON Schema (`schema.py`) lists its body schemas, `wfrun graph` and the web view
take its icons, the graph checks and the run loop read its `ends`/`retries`/
`effects`, and the engine's executor table (`runner/engine/_nodes.py`) must
cover every kind in it (checked when the engine loads).

Adding a kind:
1. Write its spec (a frozen dataclass with `to_json`), its body parser
   (`Checker`, body, key path -> `Parsed | None`) and its body schema, and make a
   `KindDef` of them, in a module of its own (see `builtin_kinds.py`). A body that
   holds nodes refers to one as `{"$ref": schema.NODE_REF}`; the shape of every
   body is checked from the schema before its parser runs (docshape.py), so the
   parser only converts and checks formats and rules across fields.
2. List the `KindDef` in `_ROWS` below (or call `register_kind` before compiling).
3. Give the engine its executor: `@executes("name")` on a function
   `(NodeContext) -> NodeResult` (runner/engine/_nodes.py shows the built-ins; the
   context is runner/engine/_nodecontext.py).
Nothing else names kinds: the schema, the parser's 'did you mean', the graph
icons and the digest all follow from the row.
"""

from __future__ import annotations

from ._builtin_kinds import BUILTIN_KINDS
from ._fanout import FANOUT_KINDS
from ._kinddef import KindDef

_ROWS: tuple[KindDef, ...] = (*BUILTIN_KINDS, *FANOUT_KINDS)
KINDS: dict[str, KindDef] = {k.name: k for k in _ROWS}


_version = [0]  # moves when the table changes: what is derived from it is rebuilt


def register_kind(kind: KindDef) -> KindDef:
    """Add a kind to the table (before any workflow using it is compiled)."""
    if kind.name in KINDS and KINDS[kind.name] is not kind:
        raise ValueError(f"node kind '{kind.name}' is already registered")
    KINDS[kind.name] = kind
    _version[0] += 1
    return kind


def unregister_kind(name: str) -> None:
    """Remove a kind added with `register_kind` (tests, plugins unloading)."""
    if KINDS.pop(name, None) is not None:
        _version[0] += 1


def table_version() -> int:
    return _version[0]


def authored_kinds() -> tuple[str, ...]:
    """The kind keys a workflow file may write, in table order."""
    return tuple(k.name for k in KINDS.values() if k.authored)


def kind_of(name: str) -> KindDef | None:
    return KINDS.get(name)


def icon(name: str) -> str:
    row = KINDS.get(name)
    return row.icon if row is not None else "?"


def ends(name: str) -> str | None:
    """`wait`, `fail` or None: what the node's end does to the run (KindDef.ends)."""
    row = KINDS.get(name)
    return row.ends if row is not None else None
