"""Template bombs (issue 35 item 3): each payload of tests/template_bombs.py, at
N = 10^10, is refused before the call that would allocate it. Each renders in its own
interpreter, whose peak RSS over its start is measured with getrusage; an address-space
cap keeps a regression from taking the machine's memory (it then fails as a MemoryError,
which is a failure here too). The same payloads written as constants are refused by
`check_budget`, which `wfrun validate` and the web view's catalog use."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from template_bombs import PAYLOADS, constant, context, runtime

from runner.compiler._template_checks import check_budget
from runner.compiler._templates import TemplateBudgetExceeded, render_text

REPO = Path(__file__).resolve().parents[3]

# One render in a fresh interpreter: its peak RSS before and after, and how it ended.
CHILD = """
import json, resource, sys
cap = 1536 * 2**20
resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
sys.path.insert(0, "tests")
from template_bombs import context, runtime
from runner.compiler._templates import TemplateError, render_text
payload = sys.argv[1]
render_text("{{ 1 }}", {})  # the imports and the environments, before the baseline
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
try:
    render_text(runtime(payload), context())
    ended = "rendered"
except TemplateError as exc:
    ended = str(exc)
except MemoryError:
    ended = "MemoryError"
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"ended": ended, "grew_kib": after - before}))
"""

# Well below the bombs (10 GB and more); the inputs the payloads build on the way, which
# fit the budget, are up to 32 MB (16 M characters of UCS-2).
MAX_GROWTH_MIB = 100


@pytest.mark.parametrize("name", sorted(PAYLOADS))
def test_each_bomb_is_refused_before_it_allocates(name: str) -> None:
    done = subprocess.run([sys.executable, "-c", CHILD, PAYLOADS[name]], cwd=REPO,
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    outcome = json.loads(done.stdout)
    assert outcome["ended"].startswith("over the template budget: "), outcome
    assert "template_budget." in outcome["ended"] or "take over" in outcome["ended"]
    assert outcome["grew_kib"] < MAX_GROWTH_MIB * 1024, outcome


@pytest.mark.parametrize("name", sorted(PAYLOADS))
def test_each_bomb_written_as_a_constant_is_refused_at_validate(name: str) -> None:
    problem = check_budget(constant(PAYLOADS[name]))
    assert problem is not None, name
    assert problem[0] == 1


@pytest.mark.parametrize("name", sorted(PAYLOADS))
def test_the_same_shapes_render_when_small(name: str) -> None:
    render_text(runtime(PAYLOADS[name]), context(10**4))
    assert check_budget(constant(PAYLOADS[name], 10**4)) is None


@pytest.mark.parametrize(("template", "expected"), [
    ("{{ '{:>{w}.{p}f}'.format(3.14159, w=9, p=2) }}", "     3.14"),
    ("{{ '{a}-{b!r}'.format_map({'a': 1, 'b': 'x'}) }}", "1-'x'"),
    ("{{ '{0:,}'.format(1234567) }}", "1,234,567"),
    ("{{ '%s=%05.1f' % ('pi', 3.14159) }}", "pi=003.1"),
    ("{{ '%(a)s' % {'a': 'b'} }}", "b"),
    ("{{ 'a-b-c'.split('-') | join('+') }}", "a+b+c"),
    ("{{ 'abc'.translate({97: 'xy', 98: none}) }}", "xyc"),
    ("{{ 'Straße'.upper() }}", "STRASSE"),
    ("{{ range(3) | map('string') | list }}", "['0', '1', '2']"),
    ("{{ '<a&b>' | escape }}", "&lt;a&amp;b&gt;"),
])
def test_ordinary_formatting_is_unchanged(template: str, expected: str) -> None:
    assert render_text(template, {}) == expected


def test_a_workflow_budget_raises_the_limit_for_big_lists() -> None:
    from runner.clock import FakeClock
    from runner.compiler._budget import CEILING, TemplateBudget
    from runner.compiler._templates import Scope

    text = "{{ (input.s | list | length) }}"
    big = {"input": {"s": "x" * 2_000_000}}
    with pytest.raises(TemplateBudgetExceeded, match="the result of 'list'"):
        render_text(text, big)
    with Scope(TemplateBudget(max_size=CEILING.max_size), FakeClock().monotonic):
        assert render_text(text, big) == "2000000"


def test_big_ordinary_values_near_the_budget_still_render() -> None:
    # The estimates are bounds, not guesses: 10 M ASCII characters upper-cased or
    # escaped, JSON of many multi-line strings, a million tab-separated lines joined.
    ctx = {"input": {"s": "a" * 10_000_000, "l": ["line\n" * 1000] * 500,
                     "lines": ["a\tb"] * 1_000_000}}
    assert render_text("{{ input.s | upper | length }}", ctx) == "10000000"
    assert render_text("{{ input.s.upper() | length }}", ctx) == "10000000"
    assert render_text("{{ input.s | escape | length }}", ctx) == "10000000"
    assert render_text("{{ input.l | tojson | length }}", ctx) == str(
        len(json.dumps(ctx["input"]["l"])))
    assert render_text("{{ input.lines | join('\\n') | length }}", ctx) == "3999999"
