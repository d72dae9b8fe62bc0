"""Shape mistakes come from the published JSON Schema (compiler/_docshape.py): each at
its own key, named for its own node, even when nodes of one shape share a check."""

from __future__ import annotations

from pathlib import Path

from runner.compiler import Compiler


def _diags(tmp_path: Path, text: str) -> list[tuple[str, int, int, str, str | None]]:
    path = tmp_path / "wf.yaml"
    path.write_text(text)
    result = Compiler().compile_path(path)
    return sorted((d.code, d.line, d.column, d.message, d.hint) for d in result.diagnostics)


def test_nodes_of_one_shape_each_get_their_own_names_and_positions(tmp_path: Path) -> None:
    got = _diags(tmp_path, "start: a\nnodes:\n"
                 "  a: {compute: x, tmeout: 5s}\n"
                 "  b: {compute: y, tmeout: 5s}\n"
                 "  c: {retry: 3, timeout: 1s}\n"
                 "edges:\n  - {from: a, to: b}\n  - {from: b}\n")
    assert got == [
        ("edge-form", 8, 5, "an edge needs exactly one of 'to' or 'switch'", None),
        ("missing-kind", 5, 3, "node 'c' needs one kind key: agent, decision, compute, "
         "action, notify, checkpoint, fail, parallel, map", None),
        ("unknown-key", 3, 19, "unknown key 'tmeout' in node 'a'", "did you mean 'timeout'?"),
        ("unknown-key", 4, 19, "unknown key 'tmeout' in node 'b'", "did you mean 'timeout'?"),
        ("wrong-type", 5, 14, "retry must be a mapping, not an integer",
         "write `retry: {attempts: 3}`"),
    ]


def test_a_shorthand_kind_of_the_wrong_type_names_both_forms(tmp_path: Path) -> None:
    got = _diags(tmp_path, "start: a\nnodes:\n  a: {agent: [hi]}\n")
    assert got == [("wrong-type", 3, 14, "agent must be a string or a mapping, not a list",
                    None)]


def test_bounds_come_from_the_schema(tmp_path: Path) -> None:
    got = _diags(tmp_path, "start: a\nmax_steps: 2000000\nnodes:\n"
                 "  a: {action: {shell: [x], output_cap: 0}, retry: {attempts: 101}}\n")
    assert [(c, line, col, m) for c, line, col, m, _ in got] == [
        ("out-of-range", 2, 12, "max_steps must be between 1 and 1000000"),
        ("out-of-range", 4, 40, "output_cap must be between 1 and 67108864"),
        ("out-of-range", 4, 62, "retry attempts must be between 1 and 100"),
    ]
