"""Validate parses each template once and finds the names it reads by walking that
tree (issue 34 item 18: Jinja's code generator ran per template, three parses each)."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
from jinja2 import meta

from runner.compiler import Compiler
from runner.compiler._template_ast import free_names, parsed
from runner.compiler._templates import _Guarded, _text_env

TEMPLATES = [
    "{{ a.b }} plain",
    "{% for k, v in outputs.items() %}{{ k }}{{ v }}{{ loop.index }}{% endfor %}{{ k }}",
    "{% set x = 1 %}{{ x }}{{ y }}",
    "{{ x }}{% set x = 1 %}",
    "{% for x in xs if x > lim %}{{ x }}{% else %}{{ x }}{% endfor %}",
    "{% with a = b, c = a %}{{ a }}{{ c }}{{ d }}{% endwith %}{{ a }}",
    "{% macro m(p, q=r) %}{{ p }}{{ q }}{{ s }}{{ caller() }}{% endmacro %}{{ m(1) }}",
    "{% call m(1) %}{{ z }}{% endcall %}",
    "{% set ns = namespace(n=0) %}{% for i in range(3) %}{% set ns.n = ns.n + i %}"
    "{% endfor %}{{ ns.n }}",
    "{% set blk %}{{ u }}{% endset %}{{ blk }}",
    "{% filter upper %}{{ w }}{% endfilter %}",
    "{% if a %}{{ b }}{% elif c %}{{ d }}{% else %}{{ e }}{% endif %}",
    "{% for i in range(2) %}{% set inner = i %}{% endfor %}{{ inner }}",
    "{{ (input.paths | default([])) | length }} {{ x if y else z }} {{ [p, q] }} {{ {'k': v} }}",
    "{% set a, b = 1, 2 %}{{ a }}{{ b }}",
]


@pytest.mark.parametrize("text", TEMPLATES)
def test_free_names_are_what_jinja_finds(text: str) -> None:
    tree = parsed(text).tree
    assert tree is not None
    env_globals = set(_text_env().globals)
    assert free_names(tree) - env_globals == meta.find_undeclared_variables(tree) - env_globals


def test_a_syntax_error_is_a_problem_not_a_tree() -> None:
    result = parsed("{% for x in %}")
    assert result.tree is None
    assert result.problem is not None
    assert result.problem[0] == 1


def test_validate_parses_each_template_once(tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    token = uuid.uuid4().hex  # texts no earlier test in this process parsed (caches)
    seen: list[str] = []
    original = _Guarded._parse

    def counting(self: _Guarded, source: str, name: str | None,
                 filename: str | None) -> Any:
        if token in source:
            seen.append(source)
        return original(self, source, name, filename)

    monkeypatch.setattr(_Guarded, "_parse", counting)
    path = tmp_path / "w.yaml"
    path.write_text(f"""\
start: a
nodes:
  a: {{compute: "{{% for i in range(3) %}}{{{{ i }}}}{{% endfor %}} {token}"}}
  b: {{compute: "{{{{ outputs.a[:1] | length if outputs.a else 0 }}}} {token}"}}
edges:
  - {{from: a, to: b}}
""")
    result = Compiler(None).compile_path(path)
    assert result.valid, result.diagnostics
    assert len(seen) == 2 == len(set(seen))
