"""Templates validate reads without Jinja's parser (issue 34 item 18).

A 5,000-node chain of `{{ outputs.nX + 1 }}` spent 3/4 of its compile in the parser,
and a corpus of dict literals half its validate. A text whose every tag is an
expression `_simple_tags`' descent reads skips the parse; these tests hold the
descent to what the parse would find: no syntax problem, the same names read, the
same references, nothing constant to try under the budget. Named texts are compared
with the parse, texts it must leave to the parser are named, and a seeded generator
checks both ways: each generated text the descent takes reads as the parse reads it,
and each text of its grammar that the parse takes (with a name read and nothing
constant) the descent takes too.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from jinja2 import nodes

from runner.compiler import Compiler
from runner.compiler._budget import DEFAULT_BUDGET
from runner.compiler._simple_tags import _NOT_A_NAME, simple_names
from runner.compiler._template_ast import parsed, summary, walk
from runner.compiler._template_checks import _is_constant, _is_risky, constant_problem


def same_as_the_parse(text: str, *, try_budget: bool = True) -> None:
    names = simple_names(text)
    assert names is not None, text
    full = summary(text)
    assert full.problem is None, (text, full.problem)
    assert names.free == full.free, text
    assert sorted(names.refs) == sorted(full.refs), text
    # Nothing the budget check would try (what it walks for; the run's part is skipped)
    assert full.free, text
    assert not _constant_risky(text), text
    if try_budget:
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
    # dict and list literals, filter and call arguments (the bench corpus's templates)
    "{{ {'part': 3, 'task': input.task | upper, 'in': 'wf-001', "
    "'n': (input.paths | default([])) | length} }}",
    "{{ project.root | default('.') }}",
    "{{ outputs.get('plan') }} {{ outputs['review'].verdict }} {{ results\n['build'] }}",
    "{{ outputs.get('a', {}).b }} {{ outputs.items() | list }} {{ x.y(1, k=2,) }}",
    "{{ [x, 1, 'a',] }} {{ (x, 2) }} {{ (x,) }} {{ {x: 1, 'b': [y]} }} {{ () ~ x }}",
    "{{ not x }} {{ -x }} {{ +x | abs }} {{ x - -1 }} {{ true and x }} {{ x == none }}",
    "{{ x if y else 'z' }} {{ x if y }} {{ 'a' 'b' ~ x }} {{ 'a' ~ 'b' ~ x }}",
    "{{ x is defined }} {{ x is not none and y is divisibleby 3 }} {{ x is sameas outputs.a }}",
    "{{ x in [1, 2] }} {{ x not in y }} {{ 1 < x < 3 }} {{ x | a.b }} {{ x | f(1) }}",
    "{{ x | join(', ') | replace('a', 'b') }} {{ x | default(none) }} {{ x, y }}",
    "{{ {'a': {'b': x}} }} {{ x['}}'] }}",
    "done: {% for k, v in outputs.items() %}{{ k }} {{ v | tojson }} {% endfor %}",
    "{% for x in y if x.a %}{{ x ~ loop.index }}{% for z in x %}{{ z }}{% endfor %}"
    "{% endfor %}{{ x }} {% for outputs in [y] %}{{ outputs.n }}{% endfor %}",
])
def test_the_shortcut_finds_what_the_parse_finds(text: str) -> None:
    same_as_the_parse(text)


@pytest.mark.parametrize("text", [
    "{{ 2 * 3 }}", "{{ x + 2 * 3 }}", "{{ 'a' * 100000000 ~ x }}",  # constant parts: tried
    "{{ 'ab' | upper ~ x }}",  # a filter on a literal: constant
    "{{ x | f(1 + 2) }}", "{{ [1 + 1, x] }}", "{{ [1 and 2, x] }}", "{{ x(y | f, 'a' ~ 'b') }}",
    "{{ {'a': 1} }}", "{{ [1] }} {{ 'x' }}",  # no name read: the whole text is constant
    "{{ range(3) }}", "{{ x + range }}", "{{ x + in }}", "{{ if }}",
    "{{ x + and }}", "{{ dict }}", "{{ x | default(namespace) }}",  # keywords, globals
    "{{ x ** 2 }}", "{{ x + 007 }}", "{{ x + 1.5 }}", "{{ x + 1_0 }}", "{{ x + 0x1 }}",
    "{{ x[0:1] }}", "{{ x[0, 1] }}", "{{ x[] }}", "{{ x.0 }}", "{{ f(*x) }}",
    "{{ f(a=1, x) }}", "{{ x is y is z }}", "{{ x y }}", "{{ x | upperand y }}", "{{ }}",
    "{{- x }}", "{{+ x }}", "{{ x -}}", "{{ x }", "{{ (x }}", "{{ x) }}", "{{ [x}] }}",
    "{{ x ; y }}", "{{ 'a\\'' ~ x }}", "{{ 'a\nb' ~ x }}", "{{ 'a\rb' ~ x }}", "{{ xé }}",
    "{{ x\xa0}}", "{% if x %}{{ y }}{% endif %}", "{# c #}{{ x }}", "{{ x }}{{",
    "{{ [x,,] }}",
    "{% for x in [1, 2] %}{{ x }}{% endfor %}",  # a constant loop: its length is counted
    "{% for x in y %}{{ x }}", "{{ x }}{% endfor %}", "{% for x in y %}{% else %}{% endfor %}",
    "{% for x in y -%}{{ x }}{% endfor %}", "{% for x in y recursive %}{% endfor %}",
    "{% for x in y %}{{ x }}{% endfor x %}", "{% if x %}{% endif %}", "{% set x = 1 %}",
    "{% for (a, b) in y %}{% endfor %}", "{% for x in y: %}{% endfor %}",
])
def test_what_the_shortcut_leaves_to_the_parser(text: str) -> None:
    assert simple_names(text) is None


# -- generated texts: the descent against Jinja's parser -------------------------------

_NAMES = ["x", "y", "android", "inputs", "project", "k", "v", "loop.index"]
_ROOT_READS = ["input.task", "outputs.n1", "results.a.outcome", "outputs.items",
               "outputs.get('plan')", "outputs['n2']", "results.b['x']", "input.get(k)"]
_LITERALS = ["0", "7", "12", "'a'", '"b c"', "''", "true", "None", "'}}'", "'a' 'b'"]
_SYMBOL_OPS = ["+", "-", "*", "/", "//", "%", "~", "==", "!=", "<", "<=", ">", ">="]
_WORD_OPS = ["and", "or", "in", "not in"]
# Outside the descent's grammar (or not Jinja at all): the shortcut must refuse them.
_OUTSIDE = ["1.5", "x ** 2", "x[1:2]", "f(*y)", "range(2)", "x.0", "007", "'a\\'b'",
            "not", "in", "(", "x y", "[1,,]", "{1}", "f(a=1, 2)", "x is y is z", "dict"]


class _Gen:
    """Random expressions from the descent's grammar; `outside` turns true when a
    piece from outside it went in."""

    def __init__(self, rng: random.Random) -> None:
        self.rng, self.outside = rng, False

    def gap(self) -> str:
        return self.rng.choice(["", "", " ", "  ", "\n"])

    def space(self) -> str:
        return self.rng.choice([" ", "\n "])

    def expr(self, depth: int) -> str:
        rng = self.rng
        if depth <= 0 or rng.random() < 0.3:
            return self.atom()
        g, s = self.gap, self.space

        def e() -> str:
            return self.expr(depth - 1)

        choice = rng.randrange(13)
        if choice == 0:
            return e() + g() + rng.choice(_SYMBOL_OPS) + g() + e()
        if choice == 1:
            return e() + s() + rng.choice(_WORD_OPS) + s() + e()
        if choice == 2:
            return rng.choice(["-", "+", "not "]) + g() + e()
        if choice == 3:
            args = rng.choice(["", "(" + e() + ")", "(" + e() + ", k=" + e() + ",)", "()"])
            return e() + g() + "|" + g() + rng.choice(["upper", "default", "a.b", "f"]) + args
        if choice == 4:
            return e() + s() + "is" + s() + rng.choice(["defined", "not none",
                                                         "divisibleby 3", "sameas(y)"])
        if choice == 5:
            return "[" + g() + (", " + g()).join(e() for _ in range(rng.randrange(3))) + "]"
        if choice == 6:
            pairs = [e() + g() + ":" + g() + e() for _ in range(rng.randrange(3))]
            return "{" + g() + ("," + g()).join(pairs) + rng.choice(["", ","]) + g() + "}"
        if choice == 7:
            items = [e() for _ in range(rng.randrange(3))]
            return "(" + ", ".join(items) + rng.choice(["", ","]) + ")"
        if choice == 8:
            return e() + s() + "if" + s() + e() + rng.choice(["", " else " + e()])
        if choice == 9:
            return rng.choice(_NAMES) + "." + rng.choice(["a", "get", "if"]) + \
                rng.choice(["", "(" + e() + ")", "['k']", "[" + e() + "]"])
        if choice == 10:
            return "(" + e() + ")" + rng.choice([".a", "['k']", "(1)"])
        if choice == 11 and rng.random() < 0.15:
            self.outside = True
            return rng.choice(_OUTSIDE)
        return self.atom()

    def atom(self) -> str:
        return self.rng.choice(self.rng.choice([_NAMES, _ROOT_READS, _LITERALS]))

    def tags(self, depth: int) -> str:
        rng = self.rng
        tags = []
        for _ in range(rng.randint(1, 3)):
            if depth and rng.random() < 0.2:
                tags.append(self.loop(depth - 1))
                continue
            body = self.expr(rng.randint(0, 4))
            front, back = self.gap(), self.gap()
            if not front and body[:1] in "-+":
                self.outside = True  # `{{-` is whitespace control, not a minus
            tags.append("{{" + front + body + back + "}}")
        return "\n".join(tags)

    def loop(self, depth: int) -> str:
        rng, s = self.rng, self.space
        targets = rng.choice(["k", "k, v", "x", "loop", "k,v"])
        test = rng.choice(["", "", f"{s()}if{s()}{self.expr(1)}"])
        head = f"{{%{s()}for {targets} in{s()}{self.expr(2)}{test}{s()}%}}"
        if rng.random() < 0.1:
            self.outside = True
            head = rng.choice([head.replace("%}", "-%}"), head.replace("for", "if", 1),
                               "{% for k in x recursive %}", "{% for 1 in x %}"])
        end = "{% endfor %}"
        if rng.random() < 0.1:
            self.outside = True
            end = rng.choice(["", "{% else %}{% endfor %}", "{% endfor k %}", "{%- endfor %}"])
        return head + self.tags(depth) + end

    def text(self) -> str:
        return self.rng.choice(["", "hi ", "a\n"]) + self.tags(2)


def _constant_risky(text: str) -> bool:
    """Whether the budget check would try a part of `text` (tree from the parse)."""
    tree = parsed(text).tree
    assert tree is not None
    return any(isinstance(n, nodes.Expr) and _is_constant(n) and _is_risky(n)
               for n in walk(tree))


def test_the_descent_takes_exactly_what_it_claims_and_reads_it_as_the_parse() -> None:
    """Every generated text the descent takes, Jinja parses with the same names,
    references and nothing constant to try; every text made only of the descent's
    grammar that Jinja parses, with a name read and nothing constant to try, the
    descent takes (it refuses only what it says it leaves to the parse)."""
    rng = random.Random(3418)
    taken = inside_refused = 0
    for _ in range(2500):
        gen = _Gen(rng)
        text = gen.text()
        if simple_names(text) is not None:
            taken += 1
            same_as_the_parse(text, try_budget=False)
            continue
        if gen.outside:
            continue
        full = summary(text)
        if full.free & _NOT_A_NAME:  # Jinja read a keyword as a name (`x is y not in z`)
            continue
        if full.problem is None and full.free and not _constant_risky(text):
            raise AssertionError(f"the descent refused a text of its grammar: {text!r}")
        inside_refused += 1  # a syntax error, a constant part or no name read
    assert taken > 1000, taken
    assert inside_refused > 100, inside_refused  # the refusals are exercised too


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
