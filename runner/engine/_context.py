"""Template context per scope: a child sees its own `input` and `outputs`.

`ScopedValues` keeps each scope's `outputs` and `results` (keyed by local id, values
as nodes see them) in step with the run state, event by event, so building a node's
context costs the same at node 5,000 as at node 5 (it used to re-scan every recorded
value twice per node: O(n²) per run).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ._state import RunState

Live = Callable[[Any], Any]
_NODE_ENDS = frozenset({"node_finished", "node_failed"})


def scoped(values: dict[str, Any], scope: str) -> dict[str, Any]:
    """Entries written in `scope`, keyed by their local ids.

    Root nodes have ids without '/'; a node of mount `fix` is `fix/plan`; the
    mount itself (`fix`) carries the exit output `{exit, output}` in its parent.
    """
    if not scope:
        return {k: v for k, v in values.items() if "/" not in k}
    prefix = scope + "/"
    cut = len(prefix)
    return {k[cut:]: v for k, v in values.items()
            if k.startswith(prefix) and "/" not in k[cut:]}


class ScopedValues:
    """Per-scope views of `RunState.outputs` / `results`, updated per applied event.

    A view handed to a node (`outputs(scope)`) is never changed afterwards: the next
    change to that scope copies it first (copy on write), so a context a node or hook
    holds on to stays the snapshot it was given.

    A key `fix/plan` is `plan` in scope `fix`; `plan` is in scope '' (`rpartition`).
    `live` reads a recorded value back as nodes see it; None while no recorded value
    holds an artifact ref or an escape (the driver sets it when one does).
    """

    def __init__(self, state: RunState, live: Live | None) -> None:
        self._state = state
        self.live = live
        self._outputs: dict[str, dict[str, Any]] = {}
        self._results: dict[str, dict[str, Any]] = {}
        self._lent: set[int] = set()  # ids of view dicts handed out since their last copy
        self._reset()

    def _reset(self) -> None:
        self._outputs, self._results, self._lent = {}, {}, set()
        live = self.live
        for key, value in self._state.outputs.items():
            scope, _, local = key.rpartition("/")
            self._outputs.setdefault(scope, {})[local] = value if live is None else live(value)
        for key, value in self._state.results.items():
            scope, _, local = key.rpartition("/")
            self._results.setdefault(scope, {})[local] = value if live is None else live(value)

    def outputs(self, scope: str) -> dict[str, Any]:
        view = self._outputs.setdefault(scope, {})
        self._lent.add(id(view))  # handed out: `_sync` copies it before it changes
        return view

    def results(self, scope: str) -> dict[str, Any]:
        view = self._results.setdefault(scope, {})
        self._lent.add(id(view))
        return view

    def _sync(self, table: dict[str, dict[str, Any]], source: dict[str, Any],
              key: str) -> None:
        scope, _, local = key.rpartition("/")
        view = table.get(scope)
        if view is None:
            view = table[scope] = {}
        elif id(view) in self._lent:  # handed out: copied before it changes
            self._lent.discard(id(view))
            view = table[scope] = dict(view)
        if key in source:
            value = source[key]
            view[local] = value if self.live is None else self.live(value)
        else:
            view.pop(local, None)

    def applied(self, event: dict[str, Any]) -> None:
        """Follow `RunState.apply(event)`, which has just run (the same keys change)."""
        kind = event["type"]
        node = event.get("node")
        st = self._state
        if kind in _NODE_ENDS and node:
            self._sync(self._outputs, st.outputs, node)
            self._sync(self._results, st.results, node)
        elif kind == "include_entered":
            mount = (event.get("payload") or {}).get("mount", "")
            prefix = mount + "/"
            # The state forgot every key under the mount: those scopes start empty again
            # (fresh dicts; a lent one stays as it was).
            for table in (self._outputs, self._results):
                for scope in [s for s in table if s == mount or s.startswith(prefix)]:
                    self._lent.discard(id(table[scope]))
                    table[scope] = {}
        elif kind == "include_exited":
            mount = (event.get("payload") or {}).get("mount", "")
            self._sync(self._outputs, st.outputs, mount)
        elif kind == "run_started":
            self._reset()
