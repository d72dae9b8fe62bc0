"""One bounded loader for JSON from outside (issue 35.6): depth, finite numbers, line size;
and a ratchet that keeps every outside text going through it."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from runner import _jsonin as jsonin

RUNNER = Path(__file__).resolve().parents[2] / "runner"

# Files whose `json.loads` reads only what wfrun itself wrote (bundles, store rows, its
# own registry) or round-trips a value it holds: no outside text reaches them.
OWN_DATA = {
    "engine/_bundle.py", "engine/_bundlefmt.py", "engine/_bundleread.py", "engine/_dbbundle.py",
    "engine/_reader.py", "engine/_processes.py",
    "engine/_engine.py", "engine/_nodecontext.py", "engine/_agent.py", "launch/_queue.py",
    "compiler/_jsonschemas.py", "store/_records.py", "store/domain/_launch_queries.py",
    "store/domain/_intents.py", "store/domain/_controller_events.py",
    "store/domain/_controller_resources.py", "_jsonin.py",
    "host/_queuewatch.py",  # the queued launches' workflow_source_json, a store column
    # Store columns and bundles wfrun wrote itself: audit detail, rerun links, the step
    # cache, a trigger's kept event, the definition snapshot, a launch row's input.
    "store/domain/_audit.py", "store/domain/_operations.py", "launch/_triggers.py",
    "engine/_rerun.py", "ui/_data.py", "launch/_activator.py",
    "launch/_items.py",  # fan-out item outputs and errors, fanout_items columns it wrote
}


def test_every_json_loads_outside_wfrun_s_own_data_goes_through_jsonin() -> None:
    offenders = []
    for path in sorted(RUNNER.rglob("*.py")):
        rel = path.relative_to(RUNNER).as_posix()
        if rel not in OWN_DATA and re.search(r"\bjson\.loads?\(", path.read_text()):
            offenders.append(rel)
    assert offenders == [], ("JSON from outside must go through runner._jsonin.loads (depth "
                             f"and number bounds): {offenders}")


@pytest.mark.parametrize("depth", [101, 1000, 100_000])
def test_too_deep_is_a_decode_error_at_the_bracket(depth: int) -> None:
    for opener, closer in (("[", "]"), ('{"a":', "}")):
        text = opener * depth + "1" + closer * depth
        with pytest.raises(json.JSONDecodeError) as exc:
            jsonin.loads(text)
        assert exc.value.msg == "nested deeper than 100 levels"
        assert exc.value.pos == len(opener) * 100


def test_exactly_the_limit_parses_and_brackets_in_strings_do_not_count() -> None:
    assert jsonin.loads("[" * 100 + "]" * 100) is not None
    assert jsonin.loads(json.dumps({"s": "[" * 500 + '\\"{{'})) == {"s": "[" * 500 + '\\"{{'}
    assert jsonin.loads(b'{"a": [1, 2.5]}') == {"a": [1, 2.5]}


@pytest.mark.parametrize("text", ["1e400", "-1e400", "NaN", "[Infinity]", '{"id": -Infinity}'])
def test_non_finite_numbers_are_refused(text: str) -> None:
    with pytest.raises(json.JSONDecodeError, match="is not finite"):
        jsonin.loads(text)


@given(st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False,
                    allow_infinity=False) | st.text(),
                    lambda kids: st.lists(kids) | st.dictionaries(st.text(), kids),
                    max_leaves=30))
@settings(max_examples=200, deadline=None, database=None)
def test_ordinary_json_parses_as_json_loads_does(value: object) -> None:
    text = json.dumps(value)
    assert jsonin.loads(text) == json.loads(text)
    assert not jsonin.too_deep(value)


def test_too_deep_walks_any_depth_without_recursion() -> None:
    value: object = 1
    for _ in range(50_000):
        value = [value]
    assert jsonin.too_deep(value)
    assert not jsonin.too_deep([[1]], max_depth=2)
    assert jsonin.too_deep([[[1]]], max_depth=2)


def test_read_line_drops_a_long_line_in_pieces() -> None:
    stream = io.BytesIO(b"x" * 100 + b"\nok\n" + b"y" * 30)
    assert jsonin.read_line(stream, 10) is jsonin.TOO_LONG
    assert jsonin.read_line(stream, 10) == b"ok\n"
    assert jsonin.read_line(stream, 10) is jsonin.TOO_LONG  # no newline at the end either
    assert jsonin.read_line(stream, 10) is None
