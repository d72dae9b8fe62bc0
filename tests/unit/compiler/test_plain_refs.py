"""Plain references (`{{ event.body.ref }}`) rendered without Jinja give exactly what
the sandbox gives: the same value of the same type, or the same error in the same
words. Each case renders both ways side by side."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from jinja2 import StrictUndefined

from runner.clock import SystemClock
from runner.compiler import _plainrefs, _templates
from runner.compiler._budget import TemplateBudget
from runner.compiler._templates import Scope, TemplateError, render_native


def _outcome(render: Any, text: str, context: Mapping[str, Any]) -> tuple[str, str]:
    """(repr of the value with its types, or the error's class and message)."""
    try:
        return "value", _typed(render(text, context))
    except TemplateError as exc:
        return type(exc).__name__, str(exc)


def _typed(value: Any) -> str:
    if isinstance(value, dict):
        return "{" + ", ".join(f"{_typed(k)}: {_typed(v)}" for k, v in value.items()) + "}"
    if isinstance(value, (list, tuple, set, frozenset)):
        return f"{type(value).__name__}[" + ", ".join(_typed(v) for v in value) + "]"
    return f"{type(value).__name__}:{value!r}"


def _jinja(text: str, context: Mapping[str, Any]) -> Any:
    """`text` rendered by the sandbox, as `render_native` does past a plain reference."""
    return _templates._render(text, context, native=True)


def _side_by_side(text: str, context: Mapping[str, Any]) -> tuple[str, str]:
    plain = _outcome(render_native, text, context)
    assert plain == _outcome(_jinja, text, context), text
    return plain


def _event(body: Any) -> dict[str, Any]:
    return {"trigger": {"name": "push", "workflow": "hooked", "slot": None,
                        "kind": "webhook", "key": "delivery:d-1"},
            "event": {"body": body, "delivery": "d-1",
                      "headers": {"content-type": "application/json", "x-n": "7"}}}


BODY = {"ref": "refs/heads/main", "n": 7, "f": 1.5, "ok": True, "nothing": None,
        "pull_request": {"number": 12, "labels": ["a", "b"], "head": {"sha": "ab12"}},
        "list": [1, "2", [3]], "items": "an items key", "keys": 1, "_private": "p",
        "numeric": "42", "listy": "[1, 2]", "quoted": "'q'", "truthy": "True",
        "spaced": " 42", "hexy": "0x10", "setty": "set()", "bytes": "b'x'",
        "negative": "-3", "complex": "1+2j", "empty": "", "fstring": "f'x'",
        "commented": "#c\n42", "continued": "\\\n42", "tilde": "~1", "under": "_1",
        "word": "refs/heads/main", "setx": "setx", "prefixed": "rb'x'", "uu": "uu'x'",
        "deep": {"a": {"b": {"c": [{"d": "e"}]}}}}

#: Every shape a trigger's or a node's input maps: the existing trigger input
#: tests' templates first, then the edges where a shortcut could differ.
TEMPLATES = [
    "{{ event.body.ref }}", "{{ event.delivery }}", "{{ trigger.slot }}",
    "{{ trigger.key }}", "{{ event.paths }}", "{{ event.body }}", "{{ event }}",
    "{{event.body.n}}", "{{  event.body.f  }}", "{{ event.body.ok }}",
    "{{ event.body.nothing }}", "{{ event.body.pull_request.number }}",
    "{{ event.body.pull_request.labels }}", "{{ event.body.pull_request.labels[0] }}",
    "{{ event.body.pull_request.labels[-1] }}", "{{ event.body.pull_request.labels[2] }}",
    "{{ event.body.pull_request.labels[-3] }}", "{{ event.body['ref'] }}",
    '{{ event.body["pull_request"]["head"]["sha"] }}', "{{ event.body['items'] }}",
    "{{ event.body.items }}", "{{ event.body.keys }}", "{{ event.headers.get }}",
    "{{ event.body._private }}", "{{ event.body.__class__ }}", "{{ event.body.nope }}",
    "{{ event.body.ref.upper }}", "{{ event.body.ref[0] }}", "{{ event.body.n.real }}",
    "{{ event.body.list[1] }}", "{{ event.body.list[2][0] }}", "{{ event.body.list.0 }}",
    "{{ event.body.deep.a.b.c[0].d }}", "{{ event.body['nope'] }}", "{{ nope }}",
    "{{ nope.x }}", "{{ event.body.numeric }}", "{{ event.body.listy }}",
    "{{ event.body.quoted }}", "{{ event.body.truthy }}", "{{ event.body.spaced }}",
    "{{ event.body.hexy }}", "{{ event.body.setty }}", "{{ event.body.bytes }}",
    "{{ event.body.negative }}", "{{ event.body.complex }}", "{{ event.body.empty }}",
    "{{ event.body.fstring }}", "{{ event.body.commented }}", "{{ event.body.continued }}",
    "{{ event.body.tilde }}", "{{ event.body.under }}", "{{ event.body.word }}",
    "{{ event.body.setx }}", "{{ event.body.prefixed }}", "{{ event.body.uu }}",
    "{{ event.headers['x-n'] }}", "{{ true }}",
    "{{ none }}", "{{ self }}", "{{ range }}", "{{ loop }}", "{{ event.body.if }}",
    "{{- event.body.ref -}}", "{{ event.body.ref }}\n", " {{ event.body.ref }}",
    "pr{{ event.body.pull_request.number }}", "{{ event.body.ref }}{{ event.body.n }}",
    "{{ event.body.ref | upper }}", "{{ event . body . ref }}", "{{ event.body.list[01] }}",
]


@pytest.mark.parametrize("text", TEMPLATES)
def test_each_template_renders_as_the_sandbox_does(text: str) -> None:
    _side_by_side(text, _event(BODY))


def test_plain_references_are_the_ones_resolved_without_jinja() -> None:
    plain = {t for t in TEMPLATES if _plainrefs.parse(t) is not None}
    assert "{{ event.body.ref }}" in plain
    assert "{{event.body.n}}" in plain
    assert '{{ event.body["pull_request"]["head"]["sha"] }}' in plain
    for text in ("pr{{ event.body.pull_request.number }}", "{{ true }}", "{{ self }}",
                 "{{- event.body.ref -}}", "{{ event.body.ref | upper }}",
                 "{{ event.body.list.0 }}", "{{ event.body.list[01] }}"):
        assert text not in plain, text


def test_a_plain_reference_does_not_go_through_jinja(monkeypatch: pytest.MonkeyPatch
                                                     ) -> None:
    def jinja(*_: Any, **__: Any) -> Any:
        raise AssertionError("rendered by Jinja")
    monkeypatch.setattr(_templates, "_render", jinja)
    context = _event(BODY)
    assert render_native({"ref": "{{ event.body.ref }}", "n": "{{ event.body.numeric }}",
                          "sha": "{{ event.body.pull_request.head['sha'] }}"},
                         context) == {"ref": "refs/heads/main", "n": 42, "sha": "ab12"}


def test_a_mapping_context_or_subclassed_values_go_to_jinja() -> None:
    class Lazy(Mapping[str, Any]):
        def __init__(self, data: dict[str, Any]) -> None:
            self.data = data

        def __getitem__(self, key: str) -> Any:
            return self.data[key]

        def __iter__(self) -> Iterator[str]:
            return iter(self.data)

        def __len__(self) -> int:
            return len(self.data)

    class Sub(dict[str, Any]):
        pass

    class Text(str):
        pass

    assert _plainrefs.resolve(("event", ()), Lazy(_event(BODY))) is _plainrefs.MISS
    context = {"event": Sub(body={"ref": "x"}), "u": StrictUndefined(name="u"),
               "nested": {"u": [StrictUndefined(name="inner")]},
               "texts": {"n": Text("42"), "word": Text("main"), "t": (1, "2")}}
    for text in ("{{ event.body.ref }}", "{{ event.get }}", "{{ u }}", "{{ nested }}",
                 "{{ nested.u }}", "{{ texts.n }}", "{{ texts.word }}", "{{ texts.t }}"):
        _side_by_side(text, context)
    _side_by_side("{{ event.body.ref }}", Lazy(_event(BODY)))


def test_the_budget_holds_for_a_plain_reference() -> None:
    big = {"body": {"text": "x" * 5000, "many": list(range(3000))}}
    tight = Scope(TemplateBudget(max_size=1000), SystemClock().monotonic)
    with tight:
        for text in ("{{ event.body.text }}", "{{ event.body.many }}", "{{ event.body }}"):
            kind, message = _side_by_side(text, {"event": big})
            assert kind == "TemplateBudgetExceeded", message
    stopped = Scope(TemplateBudget(), SystemClock().monotonic, stop=SimpleNamespace(stopping=True))
    with stopped:
        assert _side_by_side("{{ event.body.text }}", {"event": big})[0] == "TemplateStopped"


_JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False)
                     | st.text(max_size=12),
                     lambda inner: st.lists(inner, max_size=4)
                     | st.dictionaries(st.text(max_size=6), inner, max_size=4),
                     max_leaves=12)
_KEYS = st.sampled_from(["a", "b", "items", "get", "ref", "0", "_x", "true"])


@settings(max_examples=400, deadline=None)
@given(st.text(max_size=24) | st.from_regex(r"[ -~\n\\#]{0,3}(True|None|set|rb?|[0-9])"
                                            r"[ -~\n]{0,12}"))
def test_any_string_reads_as_the_sandbox_reads_it(raw: str) -> None:
    """Jinja's native mode reads a lone string as a Python literal where it is one."""
    _side_by_side("{{ event.v }}", {"event": {"v": raw}})


@settings(max_examples=300, deadline=None)
@given(_JSON, st.lists(st.one_of(_KEYS.map(lambda k: f".{k}"),
                                 _KEYS.map(lambda k: f"['{k}']"),
                                 st.integers(-3, 3).map(lambda i: f"[{i}]")), max_size=4))
def test_any_path_over_any_json_renders_as_the_sandbox_does(body: Any, steps: list[str]
                                                              ) -> None:
    _side_by_side("{{ event.body" + "".join(steps) + " }}", {"event": {"body": body}})
