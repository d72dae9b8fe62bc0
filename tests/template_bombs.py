"""Template payloads that make one C-level call allocate gigabytes (issue 35 item 3),
shared by tests/unit/compiler/test_template_bombs.py and bench/bench_template_bombs.py.

`N` in a payload is the size the attacker picks: `input.n` at run time, or the number
itself written into the YAML (a constant, tried at validate time). At N = 10^10 each
would build 10 GB or more; every intermediate value fits the default budget, so only a
check made before the last call can refuse it.
"""

from __future__ import annotations

from typing import Any

BOMB_N = 10**10

PAYLOADS: dict[str, str] = {
    # a precision and a width nested in the format spec, from the arguments
    "format_precision": "{{ '{:.{p}f}'.format(1.5, p=N) }}",
    "format_width": "{{ '{0:{1}}'.format('a', N) }}",
    "format_map_width": "{{ '{x:>{w}}'.format_map({'x': 'a', 'w': N}) }}",
    # four fields of 10 M characters each: every one fits, their sum does not
    "format_fields": "{% set s = 'x' * (N // 1000) %}{{ '{0}{0}{0}{0}'.format(s) }}",
    # 1,000 characters, each replaced by 10 M
    "translate": "{{ ('a' * 1000).translate({97: 'x' * (N // 1000)}) }}",
    # doubled by `%` each step: the result of `%` was never checked
    "percent_doubling": "{% set ns = namespace(x='ab') %}"
                        "{% for i in range([N // 10**8, 64] | min) %}"
                        "{% set ns.x = '%s%s' % (ns.x, ns.x) %}{% endfor %}{{ ns.x | length }}",
    # 16 M characters fit; 16 M one-character objects in a list are over 1 GB
    "list_of_chars": "{{ (('\u2603' * (N // 20000)) * 32) | list | length }}",
    "split": "{{ (('ab' * (N // 20000)) * 16).split('a') | length }}",
    # escapes and case mappings make several characters of one
    "escape": "{{ ('&' * (N // 1000)) | escape | length }}",
    "upper": "{{ ('\u00df' * (N // 1000)).upper() | length }}",
    # 100,000 lines each indented by 100,000 spaces
    "indent": "{{ ('a\\n' * (N // 10**5)) | indent(N // 10**5) | length }}",
    # a lazy input joined with a long separator
    "join_lazy": "{{ range(10000) | map('string') | join('x' * (N // 10000)) }}",
}


def runtime(payload: str) -> str:
    """The payload with N from the run's input."""
    return payload.replace("N", "input.n")


def constant(payload: str, n: int = BOMB_N) -> str:
    """The payload with N written in: a constant the validator tries."""
    return payload.replace("N", str(n))


def context(n: int = BOMB_N) -> dict[str, Any]:
    return {"input": {"n": n}}
