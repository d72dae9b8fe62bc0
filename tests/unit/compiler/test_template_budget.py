"""The template budget (issue 10 item 1): an abuse corpus of time, memory and escape
payloads, rejected at validate time where their values are constant and bounded at
run time always; cancel, park and a node's timeout stop a render."""

from __future__ import annotations

import subprocess
import threading
from typing import Any

import pytest

from runner.clock import FakeClock, SystemClock
from runner.compiler._budget import (
    CEILING,
    TemplateBudget,
    budget_from_yaml,
    weight,
)
from runner.compiler._template_checks import check_budget
from runner.compiler._templates import (
    Scope,
    TemplateBudgetExceeded,
    TemplateError,
    TemplateStopped,
    TemplateTimedOut,
    render_native,
    render_text,
)

# Each payload would hang or allocate gigabytes without the budget.
CONSTANT_ABUSE = [
    "{{ 7**999999999 }}",
    "{{ 2 ** (2 ** (2 ** 5)) }}",
    "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
    "{% for i in range(100000) %}{% for j in range(100000) %}{{ input.x }}{% endfor %}"
    "{% endfor %}",
    "{{ lipsum(10**6) }}",
    "{{ lipsum(n=1000, max=100000) }}",
    "{{ 'a' * 10**9 }}",
    "{{ [0] * 10**9 }}",
    "{{ [[1] * 1000] * 100000 }}",
    "{{ 'a' | center(10**10) }}",
    "{{ 'x'.ljust(10**9) }}",
    "{{ 'x'.zfill(10**9) }}",
    "{{ '\t'.expandtabs(10**9) }}",
    "{{ '%0999999999d' % 1 }}",
    "{{ '%*d' % (999999999, 1) }}",
    "{{ '{:>999999999}'.format(1) }}",
    "{{ '%0999999999d' | format(1) }}",
    "{{ range(100000) | join('x' * 1000) }}",
    "{{ 'ab' | replace('', 'x' * 10**7) }}",
    "{{ ('a' * 10**6).replace('a', 'b' * 100) }}",
    "{{ 'x' | indent('y' * 10**9) }}",
    "{% set ns = namespace(s='a') %}{% for i in range(80) %}{% set ns.s = ns.s ~ ns.s %}"
    "{% endfor %}{{ ns.s | length }}",
    "{% set ns = namespace(s='a') %}{% for i in range(80) %}{% set ns.s = ns.s + ns.s %}"
    "{% endfor %}",
    "{% set ns = namespace(x=3) %}{% for i in range(64) %}{% set ns.x = ns.x * ns.x %}"
    "{% endfor %}",
    "{% set ns = namespace(a=[1]) %}{% for i in range(64) %}{% set ns.a = [ns.a, ns.a] %}"
    "{% endfor %}{{ ns.a }}",
    "{{ range(1) | batch(10**9, 0) | list }}",
    "{{ range(10) | slice(10**9) | list }}",
]

# The same shapes with the sizes coming from the run: nothing to see at validate time.
RUNTIME_ABUSE = [
    "{{ input.s * input.n }}",
    "{{ input.n * input.s }}",
    "{{ [input.s] * input.n }}",
    "{{ input.s | center(input.n) }}",
    "{{ input.s.ljust(input.n) }}",
    "{{ lipsum(input.n) }}",
    "{{ input.k ** input.n }}",
    "{% for i in range(input.r) %}{% for j in range(input.r) %}{{ i }}{% endfor %}{% endfor %}",
    "{% for i in input.l %}{% for j in input.l %}{% for k in input.l %}{% endfor %}{% endfor %}"
    "{% endfor %}",
    "{{ input.s | replace('', input.s * 100000) }}",
    "{{ input.fmt % 1 }}",
    "{{ input.fmt | format(1) }}",
]
RUNTIME_INPUT = {"s": "ab" * 8, "n": 10**9, "k": 7, "r": 100000, "l": list(range(1000)),
                 "fmt": "%0999999999d", "x": "y"}

# Sandbox escapes: refused, and nothing of Python's internals leaks into the output.
ESCAPES = [
    "{{ ''.__class__.__mro__[1].__subclasses__() }}",
    "{{ cycler.__init__.__globals__.os.system('id') }}",
    "{{ lipsum.__globals__['os'].popen('id').read() }}",
    "{{ range.__self__ }}",
    "{{ namespace.__init__.__globals__ }}",
    "{{ joiner.__init__.__globals__ }}",
    "{{ self._TemplateReference__context }}",
    "{{ ''.format.__globals__ }}",
    "{{ '{0.__class__}'.format('') }}",
    "{{ (input | attr('__class__')) }}",
    "{{ input.update({'x': 1}) }}",
    "{{ [].append(1) }}",
    "{% set x = [] %}{{ x.append(1) }}",
]


@pytest.mark.parametrize("payload", CONSTANT_ABUSE)
def test_constant_abuse_is_rejected_at_validate_time(payload: str) -> None:
    problem = check_budget(payload)
    assert problem is not None, payload
    line, message = problem
    assert line == 1
    assert "budget" in message or "4,300" in message or "take over" in message


@pytest.mark.parametrize("payload", CONSTANT_ABUSE + RUNTIME_ABUSE)
def test_abuse_is_bounded_at_run_time(payload: str) -> None:
    # The default budget's million iterations take seconds per render; the loops
    # here meet a smaller one (the default is covered at validate time above).
    budget = TemplateBudget(max_iterations=20_000)
    with Scope(budget, SystemClock().monotonic):
        for render in (render_text, render_native):
            with pytest.raises(TemplateBudgetExceeded, match=r"budget|4,300"):
                render(payload, {"input": RUNTIME_INPUT})


@pytest.mark.parametrize("payload", RUNTIME_ABUSE)
def test_runtime_shapes_pass_validate_and_fit_when_small(payload: str) -> None:
    assert check_budget(payload) is None  # they depend on the run: nothing to try early
    small = {"s": "ab", "n": 3, "k": 7, "r": 3, "l": [1, 2], "fmt": "%03d"}
    render_text(payload, {"input": small})  # well within the budget: renders


@pytest.mark.parametrize("payload", ESCAPES)
def test_escapes_are_refused(payload: str) -> None:
    try:
        out = render_text(payload, {"input": {"a": 1}})
    except TemplateError:
        return
    # Rendering "succeeded" only by printing an undefined-free, internals-free value.
    for leak in ("class", "function", "module"):
        assert leak not in out, out


def test_ordinary_templates_are_unaffected() -> None:
    ctx: dict[str, Any] = {"input": {"items": [{"n": i} for i in range(200)], "name": "x"}}
    text = ("{% for it in input['items'] %}{{ it.n }},{% endfor %} {{ input.name | upper }} "
            "{{ '%05.1f' % 3.14159 }} {{ '{:>8}'.format('r') }} {{ 'ab' * 3 }} {{ 2 ** 64 }}")
    out = render_text(text, ctx)
    assert out.startswith("0,1,2,")
    assert "X" in out
    assert " 003.1 " in out
    assert "       r" in out
    assert "ababab" in out
    assert str(2**64) in out
    assert render_native("{{ {'a': input.name, 'b': range(3) | list} }}", ctx) == \
        {"a": "x", "b": [0, 1, 2]}
    for fine in ("{{ range(10) | join(',') }}", "{{ 'a' * 100 }}", "{{ lipsum(2) }}",
                 "{% for i in range(1000) %}{% for j in range(100) %}{% endfor %}{% endfor %}"):
        assert check_budget(fine) is None, fine


def test_a_workflow_budget_tightens_and_loosens_the_limits() -> None:
    tight = TemplateBudget(max_size=100, max_output=50, max_iterations=10)
    assert check_budget("{{ 'a' * 200 }}", tight) is not None
    assert check_budget("{{ 'a' * 200 }}") is None
    clock = FakeClock()
    with Scope(tight, clock.monotonic):
        with pytest.raises(TemplateBudgetExceeded, match="max_output"):
            render_text("{% for i in range(9) %}{{ 'x' * 9 }}{% endfor %}", {})
        with pytest.raises(TemplateBudgetExceeded, match="max_iterations"):
            render_text("{% for i in range(11) %}{% endfor %}", {})
    loose = TemplateBudget(max_size=CEILING.max_size, max_output=CEILING.max_output)
    with Scope(loose, clock.monotonic):
        assert len(render_text("{{ 'a' * input.n }}", {"input": {"n": 20_000_000}})) == \
            20_000_000


def test_budget_keys_are_checked_against_the_ceiling() -> None:
    budget, problems = budget_from_yaml({"seconds": 2, "max_size": 1000})
    assert budget.seconds == 2.0
    assert budget.max_size == 1000
    assert not problems
    _, problems = budget_from_yaml({"seconds": 301, "max_output": 0, "max_size": True,
                                    "nope": 1})
    assert sorted(p[0][0] for p in problems) == ["max_output", "max_size", "nope", "seconds"]
    assert any("at most 300" in p[1] for p in problems)
    _, problems = budget_from_yaml([1])
    assert problems
    assert "mapping" in problems[0][1]


class _SteppingClock:
    """A monotonic clock that moves one second per read: time passes only as the
    render does work, so the deadline check is deterministic under any load."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        self.now += 1.0
        return self.now


def test_the_node_timeout_stops_a_render() -> None:
    clock = _SteppingClock()
    loop = "{% for i in range(100000) %}{% for j in range(9) %}{% endfor %}{% endfor %}"
    with Scope(TemplateBudget(seconds=300), clock, deadline=50.0), \
            pytest.raises(TemplateTimedOut):
        render_text(loop, {})
    assert clock.now < 60  # stopped at the deadline, not at the end of the loops


def test_the_budget_seconds_stop_a_render() -> None:
    clock = _SteppingClock()
    with Scope(TemplateBudget(seconds=20), clock), \
            pytest.raises(TemplateBudgetExceeded, match="longer than its budget of 20 s"):
        render_text("{% for i in range(100000) %}{{ i }}{% endfor %}", {})


def test_cancel_from_another_thread_stops_a_render() -> None:
    from runner.engine._control import RunControl

    control = RunControl()
    started = threading.Event()

    class Watched:
        """The run's control, read by the render: says when the render first asks."""

        @property
        def stopping(self) -> bool:
            started.set()
            return control.stopping

    outcome: list[BaseException] = []

    def render() -> None:
        # Unbounded in practice: 10^10 iterations would take hours; cancel ends it.
        big = TemplateBudget(seconds=300, max_iterations=CEILING.max_iterations)
        try:
            with Scope(big, FakeClock().monotonic, stop=Watched()):
                render_text("{% for i in range(100000) %}{% for j in range(100000) %}"
                            "{% endfor %}{% endfor %}", {})
        except BaseException as exc:
            outcome.append(exc)

    worker = threading.Thread(target=render)
    worker.start()
    assert started.wait(30)
    control.cancel("user asked")
    worker.join(30)
    assert not worker.is_alive()
    assert len(outcome) == 1
    assert isinstance(outcome[0], TemplateStopped)


def test_a_missing_key_inside_a_built_mapping_is_named() -> None:
    with pytest.raises(TemplateError, match=r"\$\.a\.b\[1\]: 'dict object' has no attribute "
                                            "'nope'"):
        render_native("{{ {'a': {'b': [1, input.nope]}} }}", {"input": {}})


def test_shell_quote_makes_one_word_for_a_real_shell() -> None:
    hostile = "a'b \"c\" $(touch /tmp/pwned) `id`; rm -rf ~ \n next"
    command = render_text("printf %s {{ input.v | shell_quote }}", {"input": {"v": hostile}})
    out = subprocess.run(["sh", "-c", command], capture_output=True, text=True, check=True,
                         timeout=30)
    assert out.stdout == hostile
    words = render_text("printf '%s|' {{ input.v | shell_quote }}",
                        {"input": {"v": ["x y", "$HOME", ""]}})
    out = subprocess.run(["sh", "-c", words], capture_output=True, text=True, check=True,
                         timeout=30)
    assert out.stdout == "x y|$HOME||"


class _Counted(list[Any]):
    """A list that counts how often it is walked."""

    walks = 0

    def __iter__(self) -> Any:
        _Counted.walks += 1
        return super().__iter__()


def test_a_shared_part_is_weighed_once_not_once_per_place() -> None:
    # `ns.a = [ns.a, ns.a]` 64 times: written out 2^64 items, held in 64 lists. Walking
    # every place took 16 million steps (seconds per render) before the limit.
    value: Any = _Counted([1])
    for _ in range(64):
        value = _Counted([value, value])
    _Counted.walks = 0
    heavy = weight(value, 16_777_216)  # (names, not the value: its repr never ends)
    walks = _Counted.walks
    assert heavy > 16_777_216
    assert walks <= 65
    # Exact below the limit: level k weighs 6 * 2^k - 3 (two of level k-1, plus 3).
    exact = weight(_Counted([value]), 2**70)
    assert exact == 6 * 2**64 - 3 + 2
    cycle: list[Any] = [1]
    cycle.append(cycle)
    assert weight(cycle, 1_000) > 1_000
