"""Child processes in their own group, and the text they leave behind (DESIGN §9).

`run_group` starts an argv list (never a shell unless the caller puts one in
argv) with `start_new_session=True`, so the child and everything it spawns
share one process group that we can kill as a whole: SIGTERM first, SIGKILL
for whatever is left after a grace period. Pipes are drained on threads with
byte bounds, so a chatty child can neither block on a full pipe nor grow our
memory without limit.

Text a child leaves behind is shaped by the one policy in `runner.safety`
(`redact`, `bound`), re-exported here for older imports, before it is recorded
anywhere (an error message, a log line).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import IO

from runner.safety import REDACTED as REDACTED
from runner.safety import Keep
from runner.safety import bound as bound
from runner.safety import redact as redact
from runner.safety import secret_env_values as secret_env_values

KILL_GRACE = 1.0
POLL = 0.02
# After the leader exits, give the pipes this long to reach EOF before killing
# stragglers that still hold them open (a background job the CLI forgot).
DRAIN_GRACE = 0.5


def safe_text(text: str, limit: int, secrets: Iterable[str] = (), *, keep: Keep = "head") -> str:
    """Redact first (so a cut cannot split a secret past the masks), then bound to
    `limit` UTF-8 bytes; line breaks are kept (see `runner.safety.safe_message`)."""
    return bound(redact(text, secrets), limit, keep)


class _Drain(threading.Thread):
    """Reads a pipe to EOF, keeping the first (or last) `cap` bytes."""

    def __init__(self, pipe: IO[bytes], cap: int, keep: str) -> None:
        super().__init__(daemon=True)
        self.pipe = pipe
        self.cap = cap
        self.keep = keep
        self.data = bytearray()
        self.truncated = False

    def run(self) -> None:
        with contextlib.suppress(OSError, ValueError):
            while True:
                chunk = self.pipe.read1(65536)  # type: ignore[attr-defined]
                if not chunk:
                    break
                self.data += chunk
                if len(self.data) > self.cap:
                    self.truncated = True
                    if self.keep == "tail":
                        del self.data[: len(self.data) - self.cap]
                    else:
                        del self.data[self.cap:]


def _feed(pipe: IO[bytes], data: bytes) -> None:
    # A child that never reads stdin, or exits early, is not an error for us.
    with contextlib.suppress(OSError, ValueError):
        pipe.write(data)
    with contextlib.suppress(OSError, ValueError):
        pipe.close()


@dataclass(frozen=True)
class GroupResult:
    returncode: int | None  # negative: killed by that signal
    stdout: str
    stdout_truncated: bool
    stderr: str  # the tail, which is where errors usually are
    stopped: bool  # True when `should_stop` made us kill the group
    seconds: float


def kill_group(proc: subprocess.Popen[bytes], grace: float = KILL_GRACE,
               settled: Callable[[], bool] | None = None) -> None:
    """SIGTERM the child's process group, then SIGKILL whatever is left after `grace`.

    The wait ends early once the leader has exited and the group is empty, or
    `settled()` says so (the caller may know better: a group whose members are
    zombies nobody reaps still "exists" for the kernel). Real (not engine) time
    on purpose: the grace is for the operating system's processes, which a
    fake clock cannot speed up.
    """
    pgid = proc.pid  # start_new_session made the child the group leader
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGTERM)
    end = time.monotonic() + grace
    while time.monotonic() < end:
        # Polling also reaps the leader, so it does not keep the group alive as a zombie.
        if proc.poll() is not None and (_group_gone(pgid) or (settled and settled())):
            break
        time.sleep(POLL)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=5)


def _group_gone(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except (ProcessLookupError, PermissionError):
        return True
    return False


def run_group(
    argv: Sequence[str],
    *,
    stdin: str | None,
    cwd: str | None,
    env: Mapping[str, str] | None,
    should_stop: Callable[[], bool],
    stdout_cap: int = 1_000_000,
    stderr_cap: int = 16_384,
    grace: float = KILL_GRACE,
) -> GroupResult:
    """Run `argv` to completion or until `should_stop()`; raises OSError if it cannot start."""
    start = time.monotonic()
    proc = subprocess.Popen(
        list(argv),
        cwd=cwd,
        env=dict(env) if env is not None else None,
        stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    assert proc.stdout is not None
    assert proc.stderr is not None
    # 4 bytes per character is the UTF-8 worst case; the text is cut to characters below.
    out = _Drain(proc.stdout, stdout_cap * 4, "head")
    err = _Drain(proc.stderr, stderr_cap * 4, "tail")
    out.start()
    err.start()
    if stdin is not None and proc.stdin is not None:
        threading.Thread(target=_feed, args=(proc.stdin, stdin.encode()), daemon=True).start()

    def pipes_closed() -> bool:
        # Nothing alive holds our stdout/stderr any more: the group has wound down.
        return not out.is_alive() and not err.is_alive()

    stopped = False
    while True:
        try:
            proc.wait(timeout=POLL)
            break
        except subprocess.TimeoutExpired:
            pass
        if should_stop():
            stopped = True
            kill_group(proc, grace, pipes_closed)
            break
    out.join(timeout=DRAIN_GRACE)
    err.join(timeout=DRAIN_GRACE)
    if not pipes_closed():
        kill_group(proc, grace, pipes_closed)
        # A process that left the group (setsid) may still hold the pipe; the daemon
        # readers are abandoned rather than letting it block the turn.
        out.join(timeout=DRAIN_GRACE)
        err.join(timeout=DRAIN_GRACE)
    for reader in (out, err):
        # Closing a buffered pipe waits for its lock, which a blocked reader holds.
        if not reader.is_alive():
            with contextlib.suppress(OSError):
                reader.pipe.close()
    text = bytes(out.data).decode("utf-8", errors="replace")
    truncated = out.truncated or len(text) > stdout_cap
    errtext = bytes(err.data).decode("utf-8", errors="replace")
    return GroupResult(
        returncode=proc.returncode,
        stdout=text[:stdout_cap],
        stdout_truncated=truncated,
        stderr=errtext[-stderr_cap:],
        stopped=stopped,
        seconds=time.monotonic() - start,
    )
