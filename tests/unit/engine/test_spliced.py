"""A bundle's records with each long list encoded once (`runner._canonical.Spliced`): the text is
`canonical_json`'s byte for byte, whether a list is met first or again, and a run's
files hold what a plain encoding would write; a long map's ending passes its output on
as the same object, so the bundle splices it."""

from __future__ import annotations

import json
from typing import Any

import pytest

from runner._canonical import LONG, Spliced, canonical_json


def _state(output: list[Any], items: list[Any]) -> dict[str, Any]:
    return {"schema": "s", "status": "completed", "final_output": output,
            "outputs": {"ls": [1, 2], "each": output, "z": None},
            "results": {"each": {"attempt": 1, "output": output, "items": items,
                                 "ünï": "ç\u2028\x00"},
                        "ls": {"output": [1, 2]}},
            "visits": {"each": 1}, "ratio": 0.1, "flag": True, "error": None}


def _output(n: int) -> list[Any]:
    return [{"command": ["sleep", "0.1"], "exit_code": 0, "stdout": f"out {i}\n",
             "ratio": i / 7, "nested": {"b": [i], "a": "é"}} for i in range(n)]


def test_a_long_list_met_first_or_again_encodes_as_canonical_json() -> None:
    output = _output(LONG + 3)
    items = [{"outcome": "ok", "starts": 1, "error": None}] * (LONG + 3)
    spliced = Spliced()
    event = {"type": "node_finished", "seq": 4, "payload": {"output": output,
                                                             "items": items}}
    ending = {"type": "run_completed", "seq": 5, "payload": {"final_output": output}}
    state = _state(output, items)
    # first in an event, then again in the ending and (three times) in the state
    assert spliced.line(event) == canonical_json(event)
    assert spliced.line(ending) == canonical_json(ending)
    assert spliced.dumps(state) == canonical_json(state)
    # a fresh one meets them first in the state: the same text
    assert Spliced().dumps(state) == canonical_json(state)


def test_a_short_list_a_wide_dict_and_other_values_encode_as_canonical_json() -> None:
    spliced = Spliced()
    for value in ([1, 2], {"a": [1] * (LONG - 1)}, "text", 3, None,
                  {str(i): [i] * LONG for i in range(40)},
                  {"deep": {"er": {"est": {"list": list(range(LONG))}}}},
                  [list(range(LONG))]):
        assert spliced.dumps(value) == canonical_json(value)


def test_the_same_list_changed_between_encodings_is_not_held_by_a_dict_of_the_state() -> None:
    """RunState's dicts change in place: only lists are kept, so a changed dict is
    encoded anew (the kept list in it is the same object, unchanged)."""
    output = _output(LONG)
    state = _state(output, [])
    spliced = Spliced()
    assert spliced.dumps(state) == canonical_json(state)
    state["outputs"]["later"] = {"x": 1}
    state["results"]["each"]["attempt"] = 2
    assert spliced.dumps(state) == canonical_json(state)


def test_keys_other_than_strings_and_values_that_are_not_json_are_treated_as_there() -> None:
    spliced = Spliced()
    with_int_keys = {2: list(range(LONG)), 1: "one"}
    assert spliced.dumps(with_int_keys) == canonical_json(with_int_keys)
    for bad in ({"a": list(range(LONG)), 1: "one"},  # keys that do not sort
                {"a": [*range(LONG), float("nan")]},
                {"a": list(range(LONG)), "b": {1, 2}}):
        with pytest.raises(ValueError, match="not plain JSON"):
            spliced.dumps(bad)


def test_a_long_map_writes_its_bundle_as_a_plain_encoding_would(env: Any) -> None:
    flow = f"""\
    start: each
    max_steps: 1000
    nodes:
      each:
        map:
          over: "{{{{ range({LONG * 2}) | list }}}}"
          do: {{compute: "{{{{ {{'i': item, 'word': 'w' ~ item}} }}}}"}}
    """
    out = env.engine().start(env.workflow(flow))
    assert out.status == "completed", out.error
    folder = env.runs / out.run_id
    lines = (folder / "trace.jsonl").read_text().splitlines()
    for line in lines:
        assert line == canonical_json(json.loads(line))
    state_text = (folder / "state.json").read_text()
    assert state_text == canonical_json(json.loads(state_text)) + "\n"
    state = json.loads(state_text)
    expected = [{"i": i, "word": f"w{i}"} for i in range(LONG * 2)]
    assert state["final_output"] == state["outputs"]["each"] == expected
    assert state["results"]["each"]["output"] == expected
    ending = json.loads(lines[-1])
    assert ending["type"] == "run_completed"
    assert ending["payload"]["final_output"] == expected
    # the ending's output is the node's recorded output, the same object: one encoding
    assert out.state.final_output is out.state.outputs["each"]
