"""runner.engine._procs: one process-group runner, one kill policy (issue 9).

Shell actions (`run_shell`) and the command executor (`run_group`) share it: the
group gets SIGTERM, a grace on the caller's Clock, then SIGKILL, both when the
caller stops it and when the leader exits leaving a job behind.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from waiting import wait_until

from runner.clock import FakeClock, SystemClock
from runner.engine import RunControl
from runner.engine import _shell as shell_module
from runner.engine._procs import ShellResult, run_group, run_shell

pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc")


def _running(pid: int) -> bool:
    """Running, as opposed to gone or a zombie waiting for a reaper."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False
    return state != "Z"


def _shell(command: str, tmp_path: Path, *, clock: FakeClock | SystemClock | None = None,
           deadline: float | None = None, control: RunControl | None = None) -> ShellResult:
    return run_shell(["sh", "-c", command], use_shell=False, cwd=str(tmp_path), env=None,
                     stdin=None, deadline=deadline, cap=10_000,
                     control=control or RunControl(), clock=clock or SystemClock())


def test_a_job_left_behind_by_a_shell_action_is_killed_with_its_group(tmp_path: Path) -> None:
    # The job does not hold our pipes, so nothing but the group kill can end it.
    res = _shell("sleep 30 >/dev/null 2>&1 & echo $! > bg.pid; echo done", tmp_path)
    assert (res.ending, res.exit_code, res.stdout) == ("exited", 0, "done\n")
    pid = int((tmp_path / "bg.pid").read_text())
    wait_until(lambda: not _running(pid), what="the left-behind job to be killed")


def test_a_job_left_behind_by_a_command_is_killed_with_its_group(tmp_path: Path) -> None:
    started = time.monotonic()
    res = run_group(["sh", "-c", "sleep 30 & echo $! > bg.pid; echo answer"], stdin=None,
                    cwd=str(tmp_path), env=None, should_stop=lambda: False)
    assert (res.returncode, res.stdout, res.stopped) == (0, "answer\n", False)
    assert time.monotonic() - started < 15  # the job held stdout: not waited out
    pid = int((tmp_path / "bg.pid").read_text())
    wait_until(lambda: not _running(pid), what="the left-behind job to be killed")


def test_the_kill_grace_is_measured_on_the_callers_clock(tmp_path: Path) -> None:
    clock = FakeClock()
    control = RunControl()
    ready = tmp_path / "sh.pid"

    def stop_once_trapped() -> bool:
        if ready.exists():
            control.cancel("test")
        return control.stopping

    before = clock.monotonic()
    res = run_group(["sh", "-c", "trap '' TERM; echo $$ > sh.pid; sleep 30"], stdin=None,
                    cwd=str(tmp_path), env=None, should_stop=stop_once_trapped, grace=1.0,
                    clock=clock)
    assert res.stopped
    assert res.returncode == -9  # SIGTERM was ignored: SIGKILL after the grace
    # The one-second grace passed as virtual time, not as a second of real waiting.
    assert clock.monotonic() - before == pytest.approx(1.0, abs=0.05)
    assert not _running(int(ready.read_text()))


def test_a_deadline_on_the_clock_times_a_shell_action_out(tmp_path: Path) -> None:
    clock = SystemClock()
    res = _shell("sleep 30", tmp_path, clock=clock, deadline=clock.monotonic() + 0.2)
    assert res.ending == "timed_out"
    assert res.signal is not None


def test_the_shell_module_names_are_the_procs_ones() -> None:
    assert shell_module.run_shell is run_shell
    assert shell_module.ShellResult is ShellResult
