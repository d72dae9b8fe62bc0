"""Waiting on events, never racing the wall clock (issue 9).

A test that needs something to have happened waits for evidence of it (a line a
child process printed, a file it wrote, a row in the store) with a generous
overall deadline, instead of sleeping for a guessed duration. A deadline only
bounds how long a broken run takes to fail; a healthy run never gets near it,
however loaded the machine is.

The same holds for the shell steps the tests hold at a gate: they poll the gate file
every 0.1 s (`while [ ! -e go ]; do sleep 0.1; done`), as each poll forks a process;
at 50-100 polls a second a few held steps took a core from the suite under load.

`DEADLINE` stays below pytest-timeout's 60 s per test (pyproject.toml) so that a
wait that runs out fails with a message naming what it waited for.
"""

from __future__ import annotations

import queue
import re
import subprocess
import threading
import time
from collections.abc import Callable
from typing import IO, TypeVar

T = TypeVar("T")
DEADLINE = 30.0
# The longest pause between two polls of `wait_until`: a few hundred polls over a long
# wait, not thousands (issue 34 item 11: the suite's CPU is what bounds it under load).
MAX_INTERVAL = 0.1


def wait_until(predicate: Callable[[], T], timeout: float = DEADLINE, interval: float = 0.01,
               what: str | Callable[[], str] = "", max_interval: float = MAX_INTERVAL) -> T:
    """Poll `predicate` until it returns something truthy and return that value;
    fail after `timeout` seconds, naming `what` (a text, or a callable for the
    state at the time of failure).

    The first pause is `interval`; each next one is 1.5 times longer, up to
    `max_interval`, and never shorter than the check itself took: a quick event is
    seen at once, a long wait polls a few times a second, and a costly check (a CLI
    process, a query) takes at most half a core from the processes it waits for."""
    end = time.monotonic() + timeout
    pause = interval
    while True:
        began = time.monotonic()
        value = predicate()
        if value:
            return value
        now = time.monotonic()
        if now > end:
            detail = what() if callable(what) else (what or getattr(predicate, "__name__", ""))
            raise AssertionError(f"timed out after {timeout} s waiting for {detail}")
        time.sleep(min(max(pause, now - began), max(end - now, 0.0) + 0.001))
        pause = min(pause * 1.5, max(max_interval, interval))


class LineReader:
    """Reads a text stream (a child's stdout or stderr pipe) on a daemon thread, so a
    test can wait for a line with a deadline while the child keeps writing."""

    def __init__(self, stream: IO[str]) -> None:
        self.lines: list[str] = []
        self._queue: queue.Queue[str | None] = queue.Queue()
        self._eof = False
        self._thread = threading.Thread(target=self._pump, args=(stream,), daemon=True)
        self._thread.start()

    def _pump(self, stream: IO[str]) -> None:
        try:
            for line in stream:
                self._queue.put(line.rstrip("\n"))
        except (OSError, ValueError):  # the pipe was closed under us
            pass
        finally:
            self._queue.put(None)

    def next_line(self, timeout: float = DEADLINE) -> str | None:
        """The next line, or None at end of stream; fails after `timeout` seconds."""
        if self._eof:
            return None
        try:
            line = self._queue.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(f"no line within {timeout} s; read so far: "
                                 f"{self.lines[-5:]}") from None
        if line is None:
            self._eof = True
            return None
        self.lines.append(line)
        return line

    def wait_for(self, pattern: str | re.Pattern[str], timeout: float = DEADLINE) -> str:
        """Read until a line matches `pattern` (re.search); returns that line."""
        regex = re.compile(pattern)
        end = time.monotonic() + timeout
        while True:
            left = end - time.monotonic()
            if left <= 0:
                raise AssertionError(f"no line matching {regex.pattern!r} within {timeout} s; "
                                     f"read so far: {self.lines[-5:]}")
            line = self.next_line(left)
            if line is None:
                raise AssertionError(f"the stream ended before a line matched "
                                     f"{regex.pattern!r}; read: {self.lines[-5:]}")
            if regex.search(line):
                return line

    def rest(self, timeout: float = DEADLINE) -> list[str]:
        """Every line still to come, until the stream ends."""
        out = []
        while (line := self.next_line(timeout)) is not None:
            out.append(line)
        return out


_readers: dict[int, tuple[IO[str], LineReader]] = {}


def wait_for_line(stream: IO[str], pattern: str | re.Pattern[str],
                  timeout: float = DEADLINE) -> str:
    """Wait for a line of `stream` matching `pattern`; repeated calls on one stream
    continue where the last one stopped (one `LineReader` per stream)."""
    entry = _readers.get(id(stream))
    if entry is None or entry[0] is not stream:
        entry = (stream, LineReader(stream))
        _readers[id(stream)] = entry
    return entry[1].wait_for(pattern, timeout)


def stop_process(proc: subprocess.Popen[str], timeout: float = 30) -> None:
    """A test's background process ended: killed if it still runs, reaped, its pipes
    closed (a test's `finally`, so a failed assertion leaves nothing behind)."""
    if proc.poll() is None:
        proc.kill()
    proc.wait(timeout=timeout)
    for pipe in (proc.stdout, proc.stderr):
        if pipe is not None:
            pipe.close()
