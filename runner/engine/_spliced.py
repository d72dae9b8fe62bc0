"""Canonical JSON of a run's records, each long list encoded once (`Spliced`).

A 1,000-item map's output list is in its node's end event, in the run's ending and
three times in state.json (`outputs`, `results`, `final_output`): the same list object
each time (a recorded value is never changed in place, and the ending passes the
recorded output on as it is: `RunDriver.finish`). A bundle's `Spliced` keeps the
canonical text of each long list it has encoded (by identity, holding the list so its
id stays its own) and splices that text where the list appears again. Canonical JSON
is compositional: a dict's text is `{`, its `"key":value` pairs in key order joined by
`,`, then `}`; so what is built here is, byte for byte, `canonical_json` of the whole
(tests/unit/engine/test_spliced.py). Only lists are kept: RunState's own dicts
(`outputs`, `results`) change in place, its lists never do (it holds none of its own).
"""

from __future__ import annotations

from json.encoder import encode_basestring  # how the canonical encoder quotes a key
from typing import Any

from runner._canonical import canonical_json

LONG = 64  # a list this long is encoded once per bundle and spliced after
KEEP = 8  # lists kept, the latest: a map's output and its items' summary, a few ends
# Dict levels looked into: state.json, its `results`, a node's result, then the lists
# in it; an event, its payload, a parallel node's output by branch.
DEPTH = 3
#: Events that may carry a long list (an output, a map's item summary): any other is
#: encoded whole without a look (a map's end writes 1,000 `node_log` events).
CARRIERS = frozenset({"node_finished", "node_failed", "run_completed", "run_failed",
                      "run_timed_out", "run_cancelled", "run_waiting", "run_started",
                      "include_exited"})


class Spliced:
    def __init__(self) -> None:
        self._texts: dict[int, tuple[list[Any], str]] = {}

    def line(self, event: dict[str, Any]) -> str:
        """One trace event's text."""
        if event.get("type") in CARRIERS:
            return self.dumps(event)
        return canonical_json(event)

    def dumps(self, value: Any) -> str:
        """`canonical_json(value)`, with the text of a long list met before spliced in;
        `ValueError` when it is not plain JSON, as there."""
        if type(value) is dict and _holds(value, DEPTH):
            return self._compose(value, DEPTH)
        return canonical_json(value)

    def _compose(self, value: dict[str, Any], depth: int) -> str:
        if any(type(k) is not str for k in value):
            return canonical_json(value)  # the encoder's own key rules (and refusals)
        parts = []
        for key, v in sorted(value.items()):  # keys differ: values are never compared
            if type(v) is list and len(v) >= LONG:
                text = self._kept(v)
            elif type(v) is dict and depth > 1 and _holds(v, depth - 1):
                text = self._compose(v, depth - 1)
            else:
                text = canonical_json(v)
            parts.append(encode_basestring(key) + ":" + text)
        return "{" + ",".join(parts) + "}"

    def _kept(self, value: list[Any]) -> str:
        got = self._texts.get(id(value))
        if got is not None and got[0] is value:
            return got[1]
        text = canonical_json(value)
        if len(self._texts) >= KEEP:
            del self._texts[next(iter(self._texts))]
        self._texts[id(value)] = (value, text)
        return text


def _holds(value: dict[str, Any], depth: int) -> bool:
    """Whether `value` holds a long list, in it or in its dicts `depth` - 1 levels down."""
    for v in value.values():
        kind = type(v)
        if kind is list:
            if len(v) >= LONG:
                return True
        elif kind is dict and depth > 1 and _holds(v, depth - 1):
            return True
    return False
