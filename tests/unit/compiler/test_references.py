"""Static reference checks (issue 13 item 5): slips `validate` used to pass."""

from __future__ import annotations

from pathlib import Path

from runner.compiler import Compiler, CompileResult


def _compile(tmp_path: Path, text: str) -> CompileResult:
    path = tmp_path / "w.yaml"
    path.write_text(text)
    return Compiler(None).compile_path(path)


def _codes(result: CompileResult) -> list[tuple[str, str | None]]:
    return [(d.code, d.hint) for d in result.diagnostics]


def test_slips_get_did_you_mean(tmp_path: Path) -> None:
    result = _compile(tmp_path, """\
input: {type: object, properties: {target: {type: string}}}
start: plan
nodes:
  plan: {compute: "{{ inptu.target }}"}
  build: {compute: "{{ outputs.plna }} {{ input.targte }}"}
edges:
  - {from: plan, to: build}
""")
    found = _codes(result)
    assert ("unknown-name", "did you mean 'input'?") in found
    assert ("unknown-node-ref", "did you mean 'plan'?") in found
    # An open schema (no additionalProperties: false) makes an unknown key a warning.
    [warning] = [d for d in result.diagnostics if d.code == "unknown-input-key"]
    assert warning.severity == "warning"
    assert warning.hint == "did you mean 'target'?"


def test_what_is_right_passes(tmp_path: Path) -> None:
    result = _compile(tmp_path, """\
input: {type: object, properties: {n: {type: integer}}, additionalProperties: false}
start: loop
nodes:
  loop:
    compute: "{{ (outputs.loop | default(0)) + input.n }}"
  run:
    action:
      shell: [echo, "{{ outputs.loop }} {{ results.loop.outcome }} {{ run.id }}"]
      parse: "{{ {'n': stdout | length, 'code': exit_code} }}"
  done:
    compute: "{% for x in range(3) %}{% set y = x %}{{ y }}{% endfor %}{{ outputs.run.n }}"
edges:
  - {from: loop, switch: {on: $output, cases: {"3": run}, default: loop}}
  - {from: run, switch: {on: $result.exit_code, cases: {"0": done}, default: done}}
""")
    assert [d for d in result.diagnostics if d.severity == "error"] == []


def test_a_node_after_this_one_cannot_be_read_and_result_fields_are_known(
        tmp_path: Path) -> None:
    result = _compile(tmp_path, """\
start: a
nodes:
  a: {compute: "{{ outputs.b }}"}
  b: {compute: "1"}
edges:
  - {from: a, switch: {on: $result.outcom, cases: {ok: b}}}
""")
    found = _codes(result)
    assert ("node-not-before", None) in found
    assert ("unknown-result-field", "did you mean 'outcome'?") in found


def test_mapping_methods_iterate_and_get_names_a_node(tmp_path: Path) -> None:
    """`outputs.items()` used to be refused as a node named `items` (issue 34 item 18),
    which is what stopped bench/bench_compile.py."""
    result = _compile(tmp_path, """\
start: plan
nodes:
  plan: {compute: "{{ 1 }}"}
  done:
    notify:
      kind: final
      message: >-
        {% for k, v in outputs.items() %}{{ k }}={{ v }} {% endfor %}
        {{ outputs.keys() | list }} {{ results.values() | list | length }}
        {{ outputs.get('plan') }} {{ input.get('anything', 1) }}
edges:
  - {from: plan, to: done}
""")
    assert [d for d in result.diagnostics if d.severity == "error"] == []
    result = _compile(tmp_path, """\
start: plan
nodes:
  plan: {compute: "{{ 1 }}"}
  done: {compute: "{{ outputs.get('plna') }}"}
edges:
  - {from: plan, to: done}
""")
    assert _codes(result) == [("unknown-node-ref", "did you mean 'plan'?")]
