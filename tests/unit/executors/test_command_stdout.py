"""How the command executor reads an agent CLI's stdout (without running one)."""

from __future__ import annotations

import pytest

from runner.engine.executors._command import (
    SUBMISSION_PREFIX,
    CommandExecutor,
    is_tool_call,
    submission_lines,
)


def test_submission_lines_are_parsed_in_order() -> None:
    out = ("thinking...\n"
           f'{SUBMISSION_PREFIX}{{"action": "update", "step": "s", "attempt": "a"}}\n'
           "  WFRUN_STEP_SUBMISSION {\"indented\": true}\n"
           f'{SUBMISSION_PREFIX}{{"action": "submit", "step": "s", "attempt": "a", '
           '"output": 1}\n')
    calls = submission_lines(out)
    assert calls == [{"action": "update", "step": "s", "attempt": "a"},
                     {"action": "submit", "step": "s", "attempt": "a", "output": 1}]


def test_malformed_submission_line_is_kept_as_text_for_refusal() -> None:
    assert submission_lines(f"{SUBMISSION_PREFIX}{{oops\n") == ["{oops"]


def test_no_submission_lines_is_none() -> None:
    assert submission_lines('{"action": "submit"}\nWFRUN_STEP_SUBMISSIONX {}') is None
    assert submission_lines("") is None


@pytest.mark.parametrize(("value", "expected"), [
    ({"action": "submit", "output": 1}, True),
    ({"action": "update"}, True),
    ({"action": "start"}, False),
    ({"verdict": "pass"}, False),
    (["submit"], False),
    ("submit", False),
])
def test_is_tool_call(value: object, expected: bool) -> None:
    assert is_tool_call(value) is expected


@pytest.mark.parametrize("argv", [[], ["ok", 3]])
def test_argv_must_be_a_non_empty_list_of_strings(argv: list[object]) -> None:
    with pytest.raises(ValueError, match="argv"):
        CommandExecutor(argv)  # type: ignore[arg-type]


def test_executor_names_itself_command() -> None:
    ex = CommandExecutor(["agent-cli", "--print"])
    assert ex.name == "command"
    assert ex.argv == ["agent-cli", "--print"]
    assert ex.last_error is None
