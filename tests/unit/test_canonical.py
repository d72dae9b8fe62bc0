"""One canonical JSON encoding (runner._canonical): stable bytes under key order, plain
JSON only, and the same bytes the store, the bundles and the digests always wrote."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from runner._canonical import canonical_bytes, canonical_json, fingerprint
from runner.compiler import _jsonschemas as jsonschemas
from runner.compiler._compile import digest_of
from runner.controllers import _effects as effects
from runner.engine._bundlefmt import dumps
from runner.store import _records as records

pytestmark = pytest.mark.timeout(30)

SETTINGS = settings(max_examples=200, deadline=None, database=None)

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda children: st.lists(children, max_size=4)
    | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=20,
)


def _shuffled(value: Any, rnd: Any) -> Any:
    if isinstance(value, dict):
        items = list(value.items())
        rnd.shuffle(items)
        return {k: _shuffled(v, rnd) for k, v in items}
    if isinstance(value, list):
        return [_shuffled(v, rnd) for v in value]
    return value


@given(json_values, st.randoms())
@SETTINGS
def test_canonical_json_is_stable_under_key_order(value: Any, rnd: Any) -> None:
    again = _shuffled(value, rnd)
    assert canonical_json(again) == canonical_json(value)
    assert fingerprint(again) == fingerprint(value)
    assert json.loads(canonical_json(value)) == value


def test_canonical_json_is_sorted_compact_and_keeps_unicode() -> None:
    assert canonical_json({"b": [1, 2.5, None], "a": {"é": "😀", "z": True}}) == (
        '{"a":{"z":true,"é":"😀"},"b":[1,2.5,null]}')
    assert canonical_bytes({"é": 1}) == '{"é":1}'.encode()
    assert fingerprint({"a": 1}) == "sha256:" + hashlib.sha256(b'{"a":1}').hexdigest()


@pytest.mark.parametrize("value", [
    float("nan"), float("inf"), -float("inf"), {"x": [float("nan")]},
    {1, 2}, {"x": frozenset()}, b"bytes", object(), {("a", "b"): 1},
])
def test_values_that_are_not_plain_json_are_refused(value: object) -> None:
    with pytest.raises(ValueError, match="not plain JSON"):
        canonical_json(value)
    with pytest.raises(ValueError, match="not plain JSON"):
        fingerprint(value)


def test_a_circular_value_is_refused() -> None:
    loop: list[Any] = []
    loop.append(loop)
    with pytest.raises(ValueError, match="not plain JSON"):
        canonical_json(loop)


@given(json_values)
@SETTINGS
def test_every_caller_writes_the_bytes_it_always_wrote(value: Any) -> None:
    # The old encoders, byte for byte: trace lines, store columns, schema cache keys and
    # definition digests must not change when they move to the one module.
    before = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    assert dumps(value) == before
    assert records.canonical_json(value) == before
    assert jsonschemas.canonical(value) == before
    snapshot = {"definition": value}
    assert digest_of(snapshot) == "sha256:" + hashlib.sha256(json.dumps(
        snapshot, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()).hexdigest()


@given(json_values)
@SETTINGS
def test_effect_records_fingerprinted_before_the_one_encoder_still_match(value: Any) -> None:
    # Effect fingerprints used to escape non-ASCII text; a record written then must still
    # be recognised as the same request (not a reused key) after the change.
    old = "sha256:" + hashlib.sha256(json.dumps(
        value, sort_keys=True, separators=(",", ":"), allow_nan=False).encode()).hexdigest()
    new = effects.request_fingerprint(value)
    assert effects._same_request(old, new, value)
    assert effects._same_request(new, new, value)
    assert not effects._same_request(fingerprint(["something else", value]), new, value)


def test_the_store_names_what_it_refused() -> None:
    with pytest.raises(ValueError, match="launch input is not plain JSON"):
        records.canonical_json({"x": {1, 2}}, what="launch input")
