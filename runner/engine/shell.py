"""Shell actions: argv subprocesses in their own process group (DESIGN §9).

A child runs with `start_new_session=True`, so a timeout, cancel or park kills
the whole group (SIGTERM, then SIGKILL after a grace period), including
grandchildren a script started. Output is read on threads and capped.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import IO, Literal

from runner.clock import Clock

from .control import RunControl
from .processes import ProcessRegistry

KILL_GRACE = 1.0
POLL = 0.02
Ending = Literal["exited", "timed_out", "stopped", "not_found", "error"]


@dataclass(frozen=True)
class ShellResult:
    ending: Ending
    exit_code: int | None
    signal: int | None
    stdout: str
    stderr: str
    stdout_truncated: bool
    stderr_truncated: bool
    duration_ms: int
    error: str | None = None


class _Capture(threading.Thread):
    """Reads a pipe to EOF, keeping at most `cap` characters."""

    def __init__(self, pipe: IO[bytes], cap: int) -> None:
        super().__init__(daemon=True)
        self.pipe = pipe
        self.cap = cap
        self.chunks: list[bytes] = []
        self.size = 0
        self.truncated = False

    def run(self) -> None:
        with contextlib.suppress(OSError, ValueError):
            while True:
                chunk = self.pipe.read1(65536)  # type: ignore[attr-defined]
                if not chunk:
                    break
                room = self.cap * 4 - self.size  # bytes; trimmed to characters below
                if room > 0:
                    self.chunks.append(chunk[:room])
                    self.size += min(len(chunk), room)
                if len(chunk) > room:
                    self.truncated = True

    def text(self) -> str:
        out = b"".join(self.chunks).decode("utf-8", errors="replace")
        if len(out) > self.cap:
            self.truncated = True
            out = out[: self.cap]
        return out


def kill_group(proc: subprocess.Popen[bytes], clock: Clock, grace: float = KILL_GRACE) -> None:
    """SIGTERM the process group, then SIGKILL whatever is left after `grace`."""
    try:
        pgid = os.getpgid(proc.pid)
    except ProcessLookupError:
        pgid = proc.pid
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGTERM)
    end = clock.monotonic() + grace
    while proc.poll() is None and clock.monotonic() < end:
        clock.sleep(POLL)
    # Kill the group even if the leader exited: grandchildren may linger.
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=5)


def run_shell(
    command: list[str] | str,
    *,
    use_shell: bool,
    cwd: str | None,
    env: Mapping[str, str] | None,
    stdin: str | None,
    deadline: float | None,
    cap: int,
    control: RunControl,
    clock: Clock,
    registry: ProcessRegistry | None = None,
) -> ShellResult:
    start = clock.monotonic()
    full_env = dict(os.environ)
    if env:
        full_env.update(env)
    try:
        proc = subprocess.Popen(
            command,
            shell=use_shell,
            cwd=cwd,
            env=full_env,
            stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
    except FileNotFoundError as exc:
        missing = exc.filename or (command[0] if isinstance(command, list) else command)
        what = "working directory" if cwd and missing == cwd else "command"
        return _failed("not_found", f"{what} not found: {missing}", start, clock)
    except PermissionError as exc:
        return _failed("error", f"permission denied: {exc.filename}", start, clock)
    except OSError as exc:
        return _failed("error", f"cannot start command: {exc.strerror}", start, clock)
    if registry is not None:
        registry.add(proc.pid, command=str(command)[:200])
    assert proc.stdout is not None
    assert proc.stderr is not None
    out, err = _Capture(proc.stdout, cap), _Capture(proc.stderr, cap)
    out.start()
    err.start()
    if stdin is not None and proc.stdin is not None:
        threading.Thread(target=_feed, args=(proc.stdin, stdin), daemon=True).start()
    ending: Ending = "exited"
    while proc.poll() is None:
        if control.stopping:
            ending = "stopped"
            kill_group(proc, clock)
            break
        if deadline is not None and clock.monotonic() >= deadline:
            ending = "timed_out"
            kill_group(proc, clock)
            break
        control.stopped.wait(POLL)
    else:
        # The leader exited; make sure no stray group members keep pipes open.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
    out.join(timeout=5)
    err.join(timeout=5)
    for pipe in (proc.stdout, proc.stderr):
        with contextlib.suppress(OSError, ValueError):
            pipe.close()
    code = proc.returncode
    return ShellResult(
        ending=ending,
        exit_code=code if code is not None and code >= 0 else None,
        signal=-code if code is not None and code < 0 else None,
        stdout=out.text(),
        stderr=err.text(),
        stdout_truncated=out.truncated,
        stderr_truncated=err.truncated,
        duration_ms=int((clock.monotonic() - start) * 1000),
    )


def _feed(pipe: IO[bytes], text: str) -> None:
    with contextlib.suppress(OSError, ValueError):
        pipe.write(text.encode())
    with contextlib.suppress(OSError, ValueError):
        pipe.close()


def _failed(ending: Ending, message: str, start: float, clock: Clock) -> ShellResult:
    return ShellResult(ending, None, None, "", "", False, False,
                       int((clock.monotonic() - start) * 1000), message)
