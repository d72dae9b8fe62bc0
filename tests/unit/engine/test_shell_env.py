"""A shell step's environment: ours (as it is now, not as it was when a step last
copied it), the step's own variables over it, and the runner's mark."""

from __future__ import annotations

import pytest

from runner.clock import SystemClock
from runner.engine._control import RunControl
from runner.engine._processes import MARK_ENV
from runner.engine._procs import run_shell


def _printenv(*names: str, env: dict[str, str] | None = None) -> list[str]:
    res = run_shell(["sh", "-c", " ; ".join(f'echo "${n}"' for n in names)], use_shell=False,
                    cwd=None, env=env, stdin=None, deadline=None, cap=10_000,
                    control=RunControl(), clock=SystemClock())
    assert res.ending == "exited", res.error
    return res.stdout.splitlines()


def test_a_change_to_our_environment_reaches_the_next_step(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WFRUN_TEST_INHERITED", "one")
    assert _printenv("WFRUN_TEST_INHERITED") == ["one"]
    monkeypatch.setenv("WFRUN_TEST_INHERITED", "two")  # the kept copy is stale now
    assert _printenv("WFRUN_TEST_INHERITED") == ["two"]
    monkeypatch.delenv("WFRUN_TEST_INHERITED")
    assert _printenv("WFRUN_TEST_INHERITED") == [""]


def test_the_steps_own_variables_win_and_leave_ours_alone(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WFRUN_TEST_INHERITED", "ours")
    assert _printenv("WFRUN_TEST_INHERITED", "WFRUN_TEST_OWN",
                     env={"WFRUN_TEST_INHERITED": "step's", "WFRUN_TEST_OWN": "é"}) \
        == ["step's", "é"]
    assert _printenv("WFRUN_TEST_INHERITED", "WFRUN_TEST_OWN") == ["ours", ""]
    assert _printenv(MARK_ENV) == [""]  # no registry: no mark
