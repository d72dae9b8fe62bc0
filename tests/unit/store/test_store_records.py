"""Canonical JSON, byte bounds, ids and the exception messages."""

from __future__ import annotations

import pytest

from runner.store import StoreUnavailable
from runner.store._errors import RESET_INSTRUCTION, IncompatibleLayout, InputCleared
from runner.store._records import (
    LaunchRecord,
    bounded_message,
    canonical_json,
    check_error_code,
    check_id,
    json_object,
    lease_ms,
    new_claim_token,
)


def test_canonical_json_sorts_keys_and_drops_whitespace() -> None:
    assert canonical_json({"b": [1, {"d": 1, "c": 2}], "a": "é"}) == (
        '{"a":"é","b":[1,{"c":2,"d":1}]}'
    )


@pytest.mark.parametrize("value", [float("nan"), float("inf"), {1j: 1}, {"x": {1, 2}}, b"x"])
def test_canonical_json_refuses_values_that_are_not_plain_json(value: object) -> None:
    with pytest.raises(ValueError, match="not plain JSON"):
        canonical_json(value, what="input")


def test_canonical_json_enforces_a_byte_bound() -> None:
    assert canonical_json("é" * 4, max_bytes=10) == '"éééé"'  # 10 bytes
    with pytest.raises(ValueError, match="11 bytes"):
        canonical_json("é" * 4 + "x", max_bytes=10)


def test_json_object_wants_a_mapping() -> None:
    assert json_object({"a": 1}, what="source") == '{"a":1}'
    with pytest.raises(ValueError, match="source must be a JSON object"):
        json_object([1], what="source")


def test_bounded_message_is_one_line_within_the_byte_limit() -> None:
    assert bounded_message("a\n  b\tc") == "a b c"
    long = "é" * 300  # 600 bytes
    cut = bounded_message(long)
    assert len(cut.encode()) <= 500
    assert cut.endswith("…")
    assert cut.startswith("é" * 200)
    assert bounded_message("x" * 500) == "x" * 500


def test_error_codes_are_the_stable_set() -> None:
    assert check_error_code("source_changed") == "source_changed"
    with pytest.raises(ValueError, match="unknown launch error code"):
        check_error_code("Source_Changed")


def test_leases_are_positive_milliseconds() -> None:
    assert lease_ms(30) == 30_000
    assert lease_ms(0.0001) == 1
    for bad in (0, -1, float("nan")):
        with pytest.raises(ValueError, match="positive"):
            lease_ms(bad)


def test_ids_are_single_line_and_bounded() -> None:
    assert check_id("run-1", "run_id") == "run-1"
    for bad in ("", "a\nb", "x" * 513, None, 3):
        with pytest.raises(ValueError, match="run_id"):
            check_id(bad, "run_id")


def test_claim_tokens_are_unique_and_long() -> None:
    tokens = {new_claim_token() for _ in range(100)}
    assert len(tokens) == 100
    assert all(len(t) == 32 for t in tokens)


def test_incompatible_layout_is_one_line_with_the_reset_instruction() -> None:
    err = IncompatibleLayout("/p/.wfrun/state/store.sqlite3", "table x:\n missing column y")
    assert str(err) == (
        "incompatible store layout at /p/.wfrun/state/store.sqlite3: table x: missing column y. "
        + RESET_INSTRUCTION
    )
    assert err.detail == "table x: missing column y"
    assert StoreUnavailable().message == "The store is unavailable; try again later."


def test_a_cleared_input_cannot_be_read() -> None:
    record = LaunchRecord(
        run_id="r",
        workflow_ref="w",
        workflow_path=None,
        source={},
        definition_digest="d",
        input_json=None,
        options_json=None,
        status="running",
        runner_id="h",
        claim_token="t",
        claim_expires_at=10,
        epoch=1,
        affinity_runner_id=None,
        origin_session_id=None,
        parent_run_id=None,
        error_code=None,
        error_message=None,
        created_at=0,
        updated_at=0,
        started_at=0,
        finished_at=None,
    )
    assert record.input_cleared
    assert record.options() is None
    with pytest.raises(InputCleared, match="cleared"):
        record.input()
    assert record.lease_live(9)
    assert not record.lease_live(10)
