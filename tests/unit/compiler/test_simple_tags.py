"""Templates validate reads without Jinja's parser (issue 34 item 18).

A 5,000-node chain of `{{ outputs.nX + 1 }}` spent 3/4 of its compile in the parser.
A text whose every tag is a simple expression over names skips it; these tests hold
the shortcut to what the parse would find: no syntax problem, the same names read,
the same references, nothing constant to try under the budget. Each accepted text
is compared with the full parse; texts the shortcut must leave to the parser are
named, and a seeded generator of near-miss texts checks every one it accepts.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from runner.compiler import Compiler
from runner.compiler._budget import DEFAULT_BUDGET
from runner.compiler._simple_tags import simple_names
from runner.compiler._template_ast import summary
from runner.compiler._template_checks import constant_problem


def same_as_the_parse(text: str) -> None:
    names = simple_names(text)
    assert names is not None, text
    full = summary(text)
    assert full.problem is None, (text, full.problem)
    assert names.free == full.free, text
    assert sorted(names.refs) == sorted(full.refs), text
    assert constant_problem(text, DEFAULT_BUDGET) is None, text


@pytest.mark.parametrize("text", [
    "{{ outputs.plan | tojson }}\n{{ input.task|upper }} {{ inptu.x }}",
    "Work on {{input.task}} ({{ run.id }}).\n\n{{ results.build.outcome }} {{ outputs.items }}",
    "{{ outputs }} {{ x }}",
    "{{ outputs.n41 + 1 }}",
    "{{ input.a ~ '-' ~ input.b }} and {{ 2 * outputs.count }}",
    "{{ outputs.a.b | length > 3 and input.flag }}",
    '{{ x // 2 }}{{ x % 2 }}{{ x != "y" }}{{ 1 <= x }}{{ x or y }}',
    "{{\n  outputs.late\n  + outputs.later\n}}",
    "{{ input.in + android }} {{ x.if }} {{ x.and }} {{ inputs.x }}",
    "{{ outputs.get }} {{ outputs.keys | list }}",
])
def test_the_shortcut_finds_what_the_parse_finds(text: str) -> None:
    same_as_the_parse(text)


@pytest.mark.parametrize("text", [
    "{{ 2 * 3 }}", "{{ x + 2 * 3 }}", "{{ 'a' * 100000000 ~ x }}",  # constant parts: tried
    "{{ 'ab' | upper ~ x }}",  # a filter on a literal: constant
    "{{ range(3) }}", "{{ x + range }}", "{{ true and x }}", "{{ not x }}", "{{ x + in }}",
    "{{ x + and }}", "{{ dict }}", "{{ None }}",  # keywords, constants, globals as names
    "{{ x ** 2 }}", "{{ x + 007 }}", "{{ x + 1.5 }}", "{{ x + 1_0 }}",
    "{{ x(1) }}", "{{ x[0] }}", "{{ x | f(1) }}", "{{ x | a.b }}", "{{ -x }}",
    "{{- x }}", "{{ x -}}", "{{ x }", "{{ x y }}", "{{ x | upperand y }}",
    "{% if x %}{{ y }}{% endif %}", "{# c #}{{ x }}", "{{ 'a{{' ~ x }}", "{{ x ~ '\\'' }}",
])
def test_what_the_shortcut_leaves_to_the_parser(text: str) -> None:
    assert simple_names(text) is None


def test_every_generated_text_the_shortcut_takes_parses_the_same() -> None:
    atoms = ["outputs.n1", "input.task", "x", "results.a.outcome", "outputs.items", "0", "7",
             "12", "'a'", '"b c"', "''", "android", "x.if", "inputs", "007", "1.5", "true",
             "and", "range", "not", "None"]
    ops = ["+", "-", "*", "/", "//", "%", "~", "==", "!=", "<", "<=", ">", ">=", "and", "or",
           "**", "in", "is", "|", ".", ""]
    filters = ["", " | tojson", "|upper", " | length", " | f(1)", "|and"]
    gaps = ["", " ", "  ", "\n"]
    rng = random.Random(34_18)
    taken = 0
    for _ in range(3000):
        parts = []
        for i in range(rng.randint(1, 4)):
            if i:
                parts.append(rng.choice(gaps) + rng.choice(ops) + rng.choice(gaps))
            parts.append(rng.choice(atoms) + rng.choice(filters))
        text = (rng.choice(["", "hi ", "a\n"]) + "{{" + rng.choice(gaps) + "".join(parts)
                + rng.choice(gaps) + rng.choice(["}}", "}}", "-}}", "}"])
                + rng.choice(["", " {{ y }}", " {% if z %}{% endif %}"]))
        if simple_names(text) is not None:
            taken += 1
            same_as_the_parse(text)
    assert taken > 100  # the generator reaches the shortcut often enough to mean something


def test_a_chain_of_sums_compiles_with_every_reference_checked(tmp_path: Path) -> None:
    """The shortcut keeps the reference checks: a sum naming a node that cannot have
    run before, or none at all, is still refused."""
    lines = ["start: n0", "nodes:", '  n0: {compute: "{{ 0 }}"}',
             '  n1: {compute: "{{ outputs.n0 + 1 }}"}',
             '  n2: {compute: "{{ outputs.n3 + 1 }}"}',
             '  n3: {compute: "{{ outputs.nope * 2 }}"}',
             "edges:", "  - {from: n0, to: n1}", "  - {from: n1, to: n2}",
             "  - {from: n2, to: n3}"]
    path = tmp_path / "chain.yaml"
    path.write_text("\n".join(lines) + "\n")
    result = Compiler(None).compile_path(path)
    codes = sorted((d.code, d.key_path[1] if d.key_path else None) for d in result.errors)
    assert codes == [("node-not-before", "n2"), ("unknown-node-ref", "n3")], result.diagnostics
