"""What the template budget costs and what it stops (issue 10 item 1, ADR 0006).

    .venv/bin/python bench/bench_templates.py
    .venv/bin/python bench/bench_templates.py --smoke   # 3 renders per sample

Figures, per render (median of repeated runs):
- ordinary templates through the guarded sandbox vs Jinja's plain immutable sandbox
  (the cost of the checks);
- one render in a fresh `python -c` subprocess (what the rejected alternative,
  a subprocess per untrusted render, would cost before rendering anything);
- how long each abuse payload takes to be refused, and the peak RSS of this process.
"""

from __future__ import annotations

import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from jinja2 import StrictUndefined
from jinja2.sandbox import ImmutableSandboxedEnvironment

from runner.compiler._templates import TemplateError, render_text

CTX: dict[str, Any] = {
    "input": {"task": "fix the bug", "items": [{"n": i, "name": f"item {i}"} for i in range(50)]},
    "outputs": {"plan": {"steps": ["a", "b", "c"]}}, "results": {}, "run": {"id": "r1"},
}
ORDINARY = {
    "prompt": "Task: {{ input.task }}\nPlan: {{ outputs.plan.steps | join(', ') }}\n",
    "loop": "{% for it in input['items'] %}- {{ it.name | upper }} ({{ it.n * 2 }})\n"
            "{% endfor %}",
    "json": "{{ outputs.plan | tojson }} {{ '%05d' % 42 }}",
}
ABUSE = [
    "{{ 7**999999999 }}", "{{ lipsum(10**6) }}", "{{ 'a' * 10**10 }}",
    "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
    "{{ input.task * 10**9 }}", "{{ '%0999999999d' % 1 }}",
]


def _median(fn: Any, n: int) -> float:
    samples = []
    for _ in range(5):
        t = time.perf_counter()
        for _ in range(n):
            fn()
        samples.append((time.perf_counter() - t) / n)
    return statistics.median(samples)


def main() -> None:
    renders = 3 if "--smoke" in sys.argv[1:] else 300
    plain = ImmutableSandboxedEnvironment(undefined=StrictUndefined, autoescape=False)
    print("ordinary renders (µs per render): guarded / plain sandbox / overhead")
    for name, text in ORDINARY.items():
        compiled = plain.from_string(text)
        render_text(text, CTX)  # compile and cache
        guarded = _median(lambda text=text: render_text(text, CTX), renders) * 1e6
        bare = _median(lambda compiled=compiled: compiled.render(**CTX), renders) * 1e6
        print(f"  {name:8s} {guarded:8.1f} {bare:8.1f} {guarded - bare:+8.1f}")
    t = time.perf_counter()
    subprocess.run([sys.executable, "-c", "import jinja2.sandbox as s; "
                    "print(s.ImmutableSandboxedEnvironment().from_string('{{ 1 }}').render())"],
                   check=True, capture_output=True)
    print(f"one render in a fresh subprocess: {(time.perf_counter() - t) * 1e3:.0f} ms")
    print("abuse refused (ms until the error):")
    for text in ABUSE:
        t = time.perf_counter()
        try:
            render_text(text, CTX)
            outcome = "RENDERED"
        except TemplateError as exc:
            outcome = str(exc)[:70]
        print(f"  {(time.perf_counter() - t) * 1e3:8.1f}  {text[:45]:45s}  {outcome}")
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"peak RSS of this process: {peak:.0f} MiB")


if __name__ == "__main__":
    main()
