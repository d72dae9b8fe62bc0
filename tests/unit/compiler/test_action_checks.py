"""Action checks at validate time (issue 35 item 9): an `env:` key the OS cannot take
is an error at its position (it used to pass validate and fail the run as "contains a
NUL byte"); template values whose shell quoting does not hold are warnings."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from runner.compiler import Compiler
from runner.compiler._workflows import build_catalog


def _diagnostics(tmp_path: Path, body: str) -> list[tuple[str, str, int, int, str]]:
    folder = tmp_path / ".wfrun" / "workflows"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "wf.yaml"
    path.write_text("start: a\nnodes:\n  a:\n" + textwrap.indent(textwrap.dedent(body), "    "))
    result = Compiler(build_catalog("workflows", tmp_path, None)).compile_path(path)
    return [(d.code, d.severity, d.line, d.column, d.message) for d in result.diagnostics]


@pytest.mark.parametrize(("key", "why"), [("A=B", "'='"), ("", "empty"), ("A\\0B", "NUL")])
def test_an_env_key_the_os_cannot_take_is_an_error_at_the_key(tmp_path: Path, key: str,
                                                               why: str) -> None:
    found = _diagnostics(tmp_path, f"""\
        action:
          shell: [env]
          env: {{"{key}": x, GOOD: y}}
        """)
    assert [(c, s, line) for c, s, line, _col, _m in found] == [("invalid-name", "error", 6)]
    assert why in found[0][4]


def test_a_plain_env_key_passes(tmp_path: Path) -> None:
    assert _diagnostics(tmp_path, "action: {shell: [env], env: {GOOD_1: x, lower-dash: y}}\n") \
        == []


@pytest.mark.parametrize("shell", [
    'use_shell: true\nshell: \'echo "{{ input.x | shell_quote }}"\'',
    'use_shell: true\nshell: "echo {{ input.x | tojson }}"',
    "shell: [sh, -c, 'echo \"{{ input.x | shell_quote }}\"']",
    "shell: [/bin/bash, -ec, 'curl -d {{ input.x | tojson }} x']",
])
def test_quoting_that_does_not_hold_is_a_warning(tmp_path: Path, shell: str) -> None:
    found = _diagnostics(tmp_path, "action:\n" + textwrap.indent(shell, "  ") + "\n")
    assert [(c, s) for c, s, *_rest in found] == [("shell-quoting", "warning")], found
    assert found[0][2] > 3  # placed on the shell value


@pytest.mark.parametrize("shell", [
    'use_shell: true\nshell: "echo {{ input.x | shell_quote }}"',
    'use_shell: true\nshell: "echo {{ input.x | tojson | shell_quote }} \'a\\"b\'"',
    "shell: [echo, '\"{{ input.x | tojson }}\"']",  # not shell code: one argv item
    "shell: [python, -c, 'print({{ input.x | tojson }})']",
])
def test_quoting_that_holds_is_quiet(tmp_path: Path, shell: str) -> None:
    assert _diagnostics(tmp_path, "action:\n" + textwrap.indent(shell, "  ") + "\n") == []
