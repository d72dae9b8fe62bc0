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
from typing import Literal

from runner.clock import Clock

from .control import RunControl
from .processes import ProcessRegistry
from .procs import _Drain, _feed, kill_group

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
    # 4 bytes per character is the UTF-8 worst case; the text is cut to characters below.
    out, err = _Drain(proc.stdout, cap * 4, "head"), _Drain(proc.stderr, cap * 4, "head")
    out.start()
    err.start()
    if stdin is not None and proc.stdin is not None:
        threading.Thread(target=_feed, args=(proc.stdin, stdin.encode()),
                         daemon=True).start()
    ending: Ending = "exited"
    while proc.poll() is None:
        if control.stopping:
            ending = "stopped"
            kill_group(proc)
            break
        if deadline is not None and clock.monotonic() >= deadline:
            ending = "timed_out"
            kill_group(proc)
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
    stdout, stdout_cut = _text(out, cap)
    stderr, stderr_cut = _text(err, cap)
    return ShellResult(
        ending=ending,
        exit_code=code if code is not None and code >= 0 else None,
        signal=-code if code is not None and code < 0 else None,
        stdout=stdout,
        stderr=stderr,
        stdout_truncated=stdout_cut,
        stderr_truncated=stderr_cut,
        duration_ms=int((clock.monotonic() - start) * 1000),
    )


def _text(drain: _Drain, cap: int) -> tuple[str, bool]:
    """The captured bytes as at most `cap` characters, and whether anything was cut."""
    text = bytes(drain.data).decode("utf-8", errors="replace")
    return text[:cap], drain.truncated or len(text) > cap


def _failed(ending: Ending, message: str, start: float, clock: Clock) -> ShellResult:
    return ShellResult(ending, None, None, "", "", False, False,
                       int((clock.monotonic() - start) * 1000), message)
