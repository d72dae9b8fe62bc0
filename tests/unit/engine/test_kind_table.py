"""The node-kind table (runner/compiler/_kinds.py) is the one list of kinds: every
layer that names kinds follows it."""

from __future__ import annotations

from runner.compiler._kinds import KINDS, authored_kinds, icon
from runner.compiler._schema import workflow_schema
from runner.engine._nodes import EXECUTORS


def test_every_kind_a_node_can_run_as_has_an_executor() -> None:
    runnable = {k.node_kind for k in KINDS.values() if k.authored}
    assert runnable <= set(EXECUTORS), runnable - set(EXECUTORS)
    # The include kinds are the run loop's own; nothing else runs without a row.
    assert set(EXECUTORS) <= set(KINDS)


def test_the_schema_the_parser_and_the_icons_follow_the_table() -> None:
    node = workflow_schema()["$defs"]["node"]
    assert {k for k in node["properties"] if k in KINDS} == set(authored_kinds())
    assert [s["required"] for s in node["oneOf"]] == [[k] for k in authored_kinds()]
    assert all(icon(k) != "?" for k in KINDS)
    assert KINDS["decision"].node_kind == "agent"
    assert KINDS["checkpoint"].ends == "wait"
    assert KINDS["fail"].ends == "fail"
