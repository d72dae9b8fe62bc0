"""A shell step waits on the child's exit (a pidfd on Linux), not a poll of time, and
reads its pipes in the same loop on the caller's thread (no reader threads)."""

from __future__ import annotations

import subprocess
import sys
import threading

import pytest

from runner.clock import SystemClock
from runner.engine._control import RunControl
from runner.engine._procs import _Capture, _Pipes, run_shell


def _child(code: str) -> tuple[subprocess.Popen[bytes], _Pipes]:
    proc = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            start_new_session=True)
    assert proc.stdout is not None
    assert proc.stderr is not None
    captures = (_Capture(proc.stdout, 1000, "head"), _Capture(proc.stderr, 1000, "tail"))
    return proc, _Pipes(proc, captures)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="pidfd is Linux-only")
def test_linux_waits_on_a_pidfd() -> None:
    proc, pipes = _child("print('hi')")
    assert proc.stdin is not None
    assert proc.stdout is not None
    out = pipes.captures[proc.stdout.fileno()]
    proc.stdin.close()
    try:
        assert pipes.pidfd is not None  # not the Popen.wait(timeout) sleep loop
        while not pipes.wait(60.0):  # returns at the exit, long before the timeout
            pass
        assert proc.returncode == 0  # reaped
        while not pipes.drained():
            pipes.wait(1.0)
        assert bytes(out.data) == b"hi\n"
    finally:
        pipes.close()
    assert pipes.pidfd is None


def test_a_running_child_times_out_then_its_exit_is_seen() -> None:
    proc, pipes = _child("import sys; sys.stdin.read()")  # runs until its stdin closes
    try:
        assert not pipes.wait(0.0)
        assert proc.returncode is None
        assert proc.stdin is not None
        proc.stdin.close()
        while not pipes.wait(60.0):
            pass
        assert proc.returncode == 0
    finally:
        pipes.close()
        if proc.returncode is None:
            proc.kill()
            proc.wait()
        if proc.stdin is not None:
            proc.stdin.close()


def test_output_is_read_on_the_callers_thread() -> None:
    """Each chunk reaches the live log's sink on the step's own thread: a shell step
    starts no reader thread (a fan-out host runs hundreds of steps a second)."""
    seen: list[tuple[str, bytes]] = []
    me = threading.current_thread().name

    def sink(stream: str):  # type: ignore[no-untyped-def]
        return lambda chunk: seen.append((threading.current_thread().name + stream, chunk))

    res = run_shell([sys.executable, "-c", "import sys; print('out'); "
                     "print('err', file=sys.stderr)"], use_shell=False, cwd=None, env=None,
                    stdin=None, deadline=None, cap=1000, control=RunControl(),
                    clock=SystemClock(), sinks=(sink(":out"), sink(":err")))
    assert res.ending == "exited"
    assert res.exit_code == 0
    assert (res.stdout, res.stderr) == ("out\n", "err\n")
    assert {who for who, _ in seen} == {me + ":out", me + ":err"}
    assert b"".join(c for who, c in seen if who.endswith(":out")) == b"out\n"
