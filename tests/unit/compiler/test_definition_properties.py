"""What a compiled definition says of itself, worked out once (cached properties the run
path reads instead of walking the nodes per run): `Node.pure`,
`WorkflowDefinition.pure_run` and `write_only`."""

from __future__ import annotations

from pathlib import Path

import pytest

from runner.compiler import Compiler, WorkflowDefinition


def _compile(tmp_path: Path, text: str) -> WorkflowDefinition:
    path = tmp_path / "wf.yaml"
    path.write_text(text)
    result = Compiler().compile_path(path)
    assert result.valid, [d.message for d in result.errors]
    assert result.definition is not None
    return result.definition


CHAIN = """\
start: a
nodes:
  a: {compute: "{{ 1 }}"}
  b:
    compute: "{{ outputs.a + 1 }}"
    EXTRA
edges: [{from: a, to: b}]
"""


def test_a_chain_of_compute_expressions_is_a_pure_run(tmp_path: Path) -> None:
    d = _compile(tmp_path, CHAIN.replace("EXTRA", "description: plain"))
    assert d.nodes["a"].pure
    assert d.nodes["b"].pure
    assert d.pure_run
    assert d.pure_run is d.pure_run  # the same answer, not a fresh walk


@pytest.mark.parametrize("extra", ["cache: {ttl: 1h}", "retry: {attempts: 2}"])
def test_a_kept_or_retried_node_is_pure_but_its_run_is_not(tmp_path: Path,
                                                            extra: str) -> None:
    d = _compile(tmp_path, CHAIN.replace("EXTRA", extra))
    assert d.nodes["b"].pure  # running it again is still invisible
    assert not d.pure_run  # but its end is kept or waited on: written as it goes


def test_an_action_is_not_pure(tmp_path: Path) -> None:
    d = _compile(tmp_path, "start: a\nnodes:\n  a: {action: {shell: [true]}}\n")
    assert not d.nodes["a"].pure
    assert not d.pure_run


def test_write_only_lists_the_secret_input_fields_sorted(tmp_path: Path) -> None:
    d = _compile(tmp_path, """\
input:
  type: object
  properties:
    zeta: {type: string, writeOnly: true}
    alpha: {type: string, writeOnly: true}
    task: {type: string}
    open: {type: string, writeOnly: false}
start: a
nodes:
  a: {compute: "{{ input.task }}"}
""")
    assert d.write_only == ("alpha", "zeta")
    assert _compile(tmp_path, "start: a\nnodes:\n  a: {compute: '{{ 1 }}'}\n").write_only == ()
