"""Templates are compiled once per process, not once per thread (a host run is a thread)."""

from __future__ import annotations

import threading
from types import SimpleNamespace
from typing import Any

import pytest

from runner.compiler import _templates as templates
from runner.compiler._budget import TemplateBudget
from runner.compiler._templates import Scope, TemplateBudgetExceeded, render_native, render_text


def _in_thread(fn: Any) -> Any:
    """fn's result in a new thread, or its exception raised here."""
    box: list[Any] = []

    def target() -> None:
        try:
            box.append((True, fn()))
        except Exception as exc:
            box.append((False, exc))

    t = threading.Thread(target=target)
    t.start()
    t.join()
    ok, value = box[0]
    if not ok:
        raise value
    return value


def test_a_new_thread_reuses_the_compiled_template(monkeypatch: pytest.MonkeyPatch) -> None:
    compiled: list[str] = []
    real = templates._Guarded.from_string

    def counting(self: Any, source: str, *args: Any, **kwargs: Any) -> Any:
        compiled.append(source)
        return real(self, source, *args, **kwargs)

    monkeypatch.setattr(templates._Guarded, "from_string", counting)
    text = "cache-probe {{ input.n }} of thread"  # unique to this test
    assert _in_thread(lambda: render_text(text, {"input": {"n": 1}})) == "cache-probe 1 of thread"
    assert _in_thread(lambda: render_text(text, {"input": {"n": 2}})) == "cache-probe 2 of thread"
    assert render_native("{{ input.n + 40 }}", {"input": {"n": 2}}) == 42
    assert _in_thread(lambda: render_native("{{ input.n + 40 }}", {"input": {"n": 3}})) == 43
    assert compiled.count(text) <= 1  # 0 if an earlier test already compiled it
    assert compiled.count("{{ input.n + 40 }}") <= 1


def test_the_shared_template_still_runs_under_each_renders_budget() -> None:
    text = "{{ 'x' * input.n }}"
    assert render_text(text, {"input": {"n": 3}}) == "xxx"

    def tight() -> str:
        with Scope(TemplateBudget(max_output=10), lambda: 0.0, None,
                   SimpleNamespace(stopping=False)):
            return render_text(text, {"input": {"n": 1000}})

    with pytest.raises(TemplateBudgetExceeded):
        _in_thread(tight)
    assert render_text(text, {"input": {"n": 5}}) == "xxxxx"  # the budget was per render
