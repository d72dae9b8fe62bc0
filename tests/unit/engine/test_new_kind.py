"""Adding a node kind is one row in the table and one executor: the parser, the
shape check, the published schema, the graph icon and the run loop all follow."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from runner.cli.graphfmt import render_graph
from runner.compiler import Compiler
from runner.compiler._checker import Checker
from runner.compiler._diagnostics import KeyPath
from runner.compiler._kinddef import TEMPLATE, KindDef, Parsed, obj
from runner.compiler._kinds import register_kind, unregister_kind
from runner.compiler._schema import workflow_schema
from runner.compiler._templates import render_text
from runner.engine._nodecontext import NodeContext, NodeResult
from runner.engine._nodes import EXECUTORS, executes


@dataclass(frozen=True)
class ShoutSpec:
    text: str

    def to_json(self) -> dict[str, Any]:
        return {"text": self.text}


def _parse(c: Checker, body: Any, kp: KeyPath) -> Parsed | None:
    text = body if isinstance(body, str) else body.get("text") if isinstance(body, dict) \
        else None
    if text is None:
        return None
    at: KeyPath = kp if isinstance(body, str) else (*kp, "text")
    return Parsed(ShoutSpec(c.string(text, at, "text", template=True) or ""))


SHOUT = KindDef("shout", "Says its text loudly.", "‼",
                {"anyOf": [TEMPLATE, obj({"text": TEMPLATE}, ("text",))]}, ("text",), _parse)


def _run(ctx: NodeContext) -> NodeResult:
    spec = ctx.node.spec
    assert isinstance(spec, ShoutSpec)
    return NodeResult("ok", render_text(spec.text, ctx.values).upper() + "!")


@pytest.fixture
def shout() -> Iterator[None]:
    register_kind(SHOUT)
    executes("shout")(_run)
    try:
        yield
    finally:
        unregister_kind("shout")
        EXECUTORS.pop("shout", None)


def test_a_registered_kind_parses_checks_draws_and_runs(shout: None, env: Any,
                                                       tmp_path: Path) -> None:
    assert "shout" in workflow_schema()["$defs"]["node"]["properties"]
    d = env.workflow("""
        start: a
        nodes:
          a: {shout: "hello {{ input.who }}"}
    """)
    assert render_graph(d, "text").splitlines()[2] == "‼ a [shout]"
    out = env.engine().start(d, {"who": "ada"})
    assert out.status == "completed"
    assert out.final_output == "HELLO ADA!"

    bad = tmp_path / "bad.yaml"
    bad.write_text("start: a\nnodes:\n  a: {shout: {txt: hi}}\n  b: {shuot: hi}\n")
    found = {(d.code, d.line, d.column, d.hint) for d in Compiler().compile_path(bad).diagnostics}
    assert ("unknown-key", 3, 15, "did you mean 'text'?") in found
    assert ("missing-key", 3, 7, None) in found
    assert ("unknown-key", 4, 7, "did you mean 'shout'?") in found


def test_without_the_row_the_key_is_unknown(tmp_path: Path) -> None:
    path = tmp_path / "wf.yaml"
    path.write_text("start: a\nnodes:\n  a: {shout: hi}\n")
    codes = {d.code for d in Compiler().compile_path(path).diagnostics}
    assert "unknown-key" in codes
