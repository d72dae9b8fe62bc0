"""YAML documents built plain in one pass (issue 34 item 18).

`yamlio._direct` builds a composed document's plain value itself instead of
ruamel's constructor followed by `_plain`'s second walk; whatever it does not know
it leaves to that stock path. Each text below, and every YAML file in fixtures/,
loads to the same value, or the same diagnostic, both ways.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

from runner.compiler import _yamlfast, _yamlio
from runner.compiler._yamlio import YamlProblem, load

REPO = Path(__file__).resolve().parents[3]
FIXTURES = sorted(p for p in (REPO / "fixtures").rglob("*") if p.suffix in (".yaml", ".yml"))

TEXTS = [
    "a: 1\nb: [x, 2, 3.5, true, null, ~, '']\nc: {d: {e: f}}\n",
    "1: one\nfalse: no\n2.5: x\nnull: n\n",  # keys that are no strings
    "x: .inf\ny: -.inf\nz: .nan\n.inf: key\n",  # non-finite floats (strings as values)
    "x: 0x1F\ny: 0o17\nz: 1_000\nw: 1e3\nv: +12\n",
    "when: 2024-01-02\nat: 2024-01-02T03:04:05Z\n2024-01-02: date key\n",  # dates
    "a: &x {b: 1}\nc: *x\nd: *x\n",  # aliases: each copied
    "a: &x [1, 2]\nb: [*x, *x]\n",
    "s: &s text\nt: *s\n",  # an aliased scalar
    "base: &b {x: 1, y: 2}\nnode:\n  <<: *b\n  y: 3\n",  # a merge key
    "a: 1\na: 2\n",  # a duplicate key
    "m: {a: 1, a: 2}\n",
    "1: a\n1: b\n", "true: a\n1: b\n",  # duplicates after construction
    "x: !!str 12\ny: !!int '7'\nz: !!float '1'\nb: !!binary aGVsbG8=\n",
    "s: !!set {a, b}\no: !!omap [{a: 1}]\np: !!pairs [{a: 1}]\n",
    "x: !!int 'nope'\n", "x: !!float ''\n", "x: !custom 1\n",
    "[1, 2]: x\n", "{a: 1}: x\n",  # collection keys
    "a: &a [*a]\n", "a: &a {b: [1, *a]}\n",  # an alias inside itself
    "a: &l [" + ", ".join(["x"] * 10) + "]\nb: &m [" + ", ".join(["*l"] * 10) + "]\n"
    "c: &n [" + ", ".join(["*m"] * 10) + "]\nd: [" + ", ".join(["*n"] * 10) + "]\n"
    "e: [" + ", ".join(["*n"] * 1000) + "]\n",  # aliases past MAX_VALUES: yaml-too-large
    "a: &l [" + ", ".join(["x"] * 10) + "]\nb: &m [" + ", ".join(["*l"] * 10) + "]\n"
    "c: [" + ", ".join(["*m"] * 10) + "]\n",  # 1,000 values: loads
    "- 1\n- [2, [3, [4]]]\n", "just text\n", "", "---\n", "42\n",
    "x: " + "[" * 70 + "]" * 70 + "\n",  # deeper than MAX_DEPTH
    "a: {b: [c, {d: e}]}\n" * 1,
    "a: b\n---\nc: d\n",  # two documents
    "a: [1, 2\n", "a:\n\t- b\n", "a: 'unterminated\n",  # syntax errors
]


def _outcome(text: str) -> Any:
    try:
        return "value", load(text, "w.yaml")
    except YamlProblem as exc:
        return "problem", exc.diagnostic


def _stock(text: str, monkeypatch: pytest.MonkeyPatch) -> Any:
    def unusual(*_args: Any) -> Any:
        raise _yamlio._Unusual

    with monkeypatch.context() as m:
        m.setattr(_yamlio, "_direct", unusual)
        return _outcome(text)


def _same(a: Any, b: Any) -> bool:
    """Equal, with nan equal to nan (a float key or value `.nan` is kept as is)."""
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    if isinstance(a, dict) and isinstance(b, dict):
        return len(a) == len(b) and all(
            _same(ka, kb) and _same(va, vb)
            for (ka, va), (kb, vb) in zip(a.items(), b.items(), strict=True))
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b) and type(a) is type(b)


@pytest.mark.parametrize("text", TEXTS)
def test_a_text_loads_as_the_stock_path_loads_it(text: str,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    assert _same(_outcome(text), _stock(text, monkeypatch)), text


def test_every_fixture_loads_as_the_stock_path_loads_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    assert len(FIXTURES) > 50
    for path in FIXTURES:
        text = path.read_text(encoding="utf-8", errors="replace")
        assert _same(_outcome(text), _stock(text, monkeypatch)), path


def test_the_one_pass_builds_the_usual_documents(monkeypatch: pytest.MonkeyPatch) -> None:
    """The plain documents are built by `_direct` (the stock path not asked), so the
    comparison above compares two paths, not one with itself."""
    def stock(*_args: Any) -> Any:
        raise AssertionError("the stock constructor ran")

    monkeypatch.setattr(_yamlfast._Constructor, "construct_document", stock)
    assert load(TEXTS[0], "w.yaml") == {"a": 1, "b": ["x", 2, 3.5, True, None, None, ""],
                                        "c": {"d": {"e": "f"}}}
    assert load(TEXTS[1], "w.yaml") == {1: "one", False: "no", 2.5: "x", None: "n"}


def _materialized(outcome: Any) -> Any:
    kind, value = outcome
    if kind == "value" and isinstance(value, dict) and "nodes" in value:
        value = {**value, "nodes": dict(value["nodes"].items())}
    return kind, value


@pytest.mark.parametrize(("node", "top"), [
    ("{compute: x, when: 2024-01-02}", "edges: [{from: n0, to: n1}]"),  # a date
    ("{compute: !!float ''}", "edges: [{from: n0, to: n1}]"),  # a bad value
    ("{compute: *shared}", "edges: [{from: n0, to: n1, k: *shared}]"),  # aliases
    ("{compute: {a: 1, a: 2}}", "edges: []"),  # a duplicate in a node
    ("{compute: x}", "edges: [{from: n0, from: n1}]"),  # a duplicate outside the nodes
    ("{compute: x}", "when: 2024-01-02"),  # a date outside them
])
def test_a_big_file_builds_each_node_as_the_stock_path(node: str, top: str,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """Past LAZY_MIN `nodes:` is built node by node, the rest of the document at
    once; the same both ways."""
    lines = [top, "start: n0", "nodes:", "  n0: {compute: &shared {a: [1, .inf]}}"]
    lines += [f"  n{i}: {{compute: '{{{{ outputs.n{i - 1} }}}}', 'k': {i}}}"
              for i in range(1, 9000)]
    lines.append(f"  last: {node}")
    text = "\n".join(lines) + "\n"
    assert len(text) > _yamlio.LAZY_MIN

    def both(text: str) -> tuple[Any, Any]:
        def go() -> Any:
            try:
                with _yamlio.access("w.yaml"):  # what a lazy node's build raises
                    return _materialized(_outcome(text))
            except YamlProblem as exc:
                return "problem", exc.diagnostic

        new = go()
        with monkeypatch.context() as m:
            m.setattr(_yamlio, "_direct", lambda *_a: (_ for _ in ()).throw(_yamlio._Unusual))
            old = go()
        return new, old

    new, old = both(text)
    assert _same(new, old)


# Plain scalars each implicit rule looks at (and near misses), quoted ones, tagged ones.
SCALARS = ["", "~", "null", "Null", "NULL", "nul", "none", "true", "True", "TRUE", "tRue",
           "false", "yes", "no", "on", "off", "y", "n", "n12", "0", "12", "-3", "+4", "1_000",
           "0x1F", "0o17", "0b101", "017", "1.5", ".5", "-.5", "1e3", "1.0e+3", ".inf",
           "-.Inf", "+.INF", ".nan", ".NaN", "2024-01-02", "2024-01-02T03:04:05Z",
           "2024-1-2", "<<", "=", "!x", "&", "*", "a", "text with 1", "T1", "F", "12:30",
           "1:20:30", "0.1.2", "'1'", '"true"', "'null'", "!!str 1", "!!int '7'"]


def _tags(node: Any) -> Any:
    if node is None or isinstance(node.value, str):
        return node and (node.tag, node.value)
    if node.value and isinstance(node.value[0], tuple):
        return (node.tag, [(_tags(k), _tags(v)) for k, v in node.value])
    return (node.tag, [_tags(v) for v in node.value])


def test_the_resolver_tags_every_scalar_as_ruamels_own() -> None:
    """`_Resolver` answers the composer's question without ruamel's version look-ups;
    every scalar gets the tag ruamel's own resolver gives it."""
    from ruamel.yaml import YAML
    from ruamel.yaml.error import YAMLError

    stock = YAML(typ="safe", pure=False)
    texts = [f"k: {s}\n{s or 'x'}: k\nl: [{s}]\n" for s in SCALARS if not s.startswith(("&", "*"))]
    texts += [t for t in TEXTS if "*" not in t]
    texts += [p.read_text(errors="replace") for p in FIXTURES[:80]]
    compared = 0
    for text in texts:
        try:
            ours = _yamlio._fast().compose(text)
        except YAMLError as exc:  # the stock compose must fail alike
            with pytest.raises(type(exc)):
                stock.compose(text)
            continue
        assert _tags(ours) == _tags(stock.compose(text)), text
        compared += 1
    assert compared > 100


DEEP = [
    "x: " + "[" * 2000 + "]" * 2000 + "\n",  # past the cheap bound, no anchor
    "a: " + "{b: " * 1500 + "1" + "}" * 1500 + "\n",
    "a: 1\nb:\n  c: " + "[" * 64 + "]" * 64 + "\n"  # just past the limit
    + "".join(f"d{i}: [x]\n" for i in range(1000)),
    "x: " + "[" * 200_000 + "]" * 200_000 + "\n",  # the C composer would crash
]


@pytest.mark.parametrize("text", DEEP, ids=["flow", "mapping", "just-past", "200k"])
def test_nesting_past_the_limit_is_stopped_in_the_compose_where_the_walk_says(
        text: str) -> None:
    """A text with no anchor is not walked before its compose: the guarded composer
    stops past MAX_DEPTH, and the diagnostic is the walk's (the same code, message and
    position as when every such text was walked first)."""
    assert _yamlio._check_depth(text, "w.yaml") is True  # no walk: the compose guards
    with pytest.raises(YamlProblem) as walked:
        _yamlio._check_depth(text, "w.yaml", force=True)
    with pytest.raises(YamlProblem) as loaded:
        load(text, "w.yaml")
    assert loaded.value.diagnostic == walked.value.diagnostic
    assert loaded.value.diagnostic.code == "yaml-too-deep"
    assert loaded.value.diagnostic.line


def test_a_big_file_nested_too_deep_is_stopped_too() -> None:
    text = "a: " + "[" * 3000 + "]" * 3000 + "\nnodes:\n" + "".join(
        f"  n{i}: {{compute: '{{{{ outputs.n{i} }}}}'}}\n" for i in range(9000))
    assert len(text) > _yamlio.LAZY_MIN
    with pytest.raises(YamlProblem) as loaded:
        load(text, "w.yaml")
    assert (loaded.value.diagnostic.code, loaded.value.diagnostic.line) == ("yaml-too-deep", 1)


def test_within_the_limit_the_guarded_compose_builds_the_same() -> None:
    text = "a: " + "[" * 62 + "x" + "]" * 62 + "\n" + "".join(
        f"b{i}: {{c: [1, 2]}}\n" for i in range(1000))
    assert _yamlio._check_depth(text, "w.yaml") is True
    assert load(text, "w.yaml") == _yamlio._plain(_yamlio._fast().load(text), 0, set(), [10**6])


def test_a_text_with_an_anchor_is_still_walked_first() -> None:
    """An alias inside the mapping it names is found by the walk (the composer would
    build a loop), so texts with `&` keep it."""
    text = "a: &x {b: [*x]}\n" + "".join(f"c{i}: [1]\n" for i in range(1100))
    with pytest.raises(YamlProblem) as walked:
        _yamlio._check_depth(text, "w.yaml")
    assert walked.value.diagnostic.code == "yaml-too-deep"
    assert "refers to a mapping or list that contains it" in walked.value.diagnostic.message
