"""A shell step waits on the child's exit (a pidfd on Linux), not a poll of time."""

from __future__ import annotations

import subprocess
import sys

import pytest

from runner.engine._procs import _ExitWaiter


def _child(code: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE,
                            stdout=subprocess.DEVNULL, start_new_session=True)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="pidfd is Linux-only")
def test_linux_waits_on_a_pidfd() -> None:
    proc = _child("pass")
    assert proc.stdin is not None
    proc.stdin.close()
    waiter = _ExitWaiter(proc)
    try:
        assert waiter.poller is not None  # not the Popen.wait(timeout) sleep loop
        assert waiter(60.0)  # returns at the exit, long before the timeout
        assert proc.returncode == 0  # reaped
    finally:
        waiter.close()
    assert waiter.fd is None


def test_a_running_child_times_out_then_its_exit_is_seen() -> None:
    proc = _child("import sys; sys.stdin.read()")  # runs until its stdin closes
    waiter = _ExitWaiter(proc)
    try:
        assert not waiter(0.0)
        assert proc.returncode is None
        assert proc.stdin is not None
        proc.stdin.close()
        assert waiter(60.0)
        assert proc.returncode == 0
    finally:
        waiter.close()
        if proc.returncode is None:
            proc.kill()
            proc.wait()
        if proc.stdin is not None:
            proc.stdin.close()
