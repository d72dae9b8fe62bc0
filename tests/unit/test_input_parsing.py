"""`--input` and `-i key=value`: strings unless the input schema types the field."""

from __future__ import annotations

import pytest

from runner.errors import InputError
from runner.host.runtime._local import parse_input

SCHEMA = {"type": "object", "properties": {"command": {"type": "string"},
                                           "n": {"type": "integer"}}}


def test_without_a_schema_pairs_are_strings() -> None:
    assert parse_input(None, ("n=3", "flag=true", "name=ada", "version=1.10")) == {
        "n": "3", "flag": "true", "name": "ada", "version": "1.10"}


def test_string_fields_keep_the_text_even_when_it_looks_like_json() -> None:
    value = parse_input(None, ("command=true", "n=3"), SCHEMA)
    assert value == {"command": "true", "n": 3}


def test_pairs_extend_an_input_object() -> None:
    assert parse_input('{"a": 1}', ("b=2",)) == {"a": 1, "b": "2"}


@pytest.mark.parametrize(("text", "pairs", "needle"), [
    ("{not json", (), "--input is not valid JSON"),
    (None, ("novalue",), "-i takes key=value"),
    ("[1, 2]", ("a=1",), "needs --input to be a JSON object"),
])
def test_bad_input_is_one_clear_error(text: str | None, pairs: tuple[str, ...],
                                      needle: str) -> None:
    with pytest.raises(InputError, match=needle):
        parse_input(text, pairs)
