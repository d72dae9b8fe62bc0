"""Child processes in their own group, and the text they leave behind (DESIGN §9).

One process-group runner for every child wfrun starts: `run_group` (an argv list,
for the command executor) and `run_shell` (a shell action: argv or a shell line,
results as data) share one supervisor. The child runs with
`start_new_session=True`, so it and everything it spawns share one process group,
and one kill policy (`kill_group`) ends it: SIGTERM to the group, a grace period
on the Clock, then SIGKILL for whatever is left. The group is killed when the
caller stops it (cancel, park, deadline) and also when its leader exits, so a job
the child left behind can neither keep our pipes open nor outlive the step.
Pipes are drained by one poll loop on the caller's thread (no reader threads) with
byte bounds, so a chatty child can neither block on a full pipe nor grow our memory
without limit.

Text a child leaves behind is shaped by the one policy in `runner._safety`
(`redact`, `bound`), re-exported here for older imports, before it is recorded
anywhere (an error message, a log line).
"""

from __future__ import annotations

import contextlib
import math
import os
import select
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import IO, Literal

from runner._safety import REDACTED as REDACTED
from runner._safety import Keep
from runner._safety import bound as bound
from runner._safety import redact as redact
from runner._safety import secret_env_values as secret_env_values
from runner.clock import Clock, SystemClock

from ._control import RunControl
from ._processes import MARK_ENV, ProcessRegistry

KILL_GRACE = 1.0
POLL = 0.02
#: Seconds a shell step's supervisor waits on its child (pipes and exit wake it at
#: once) before it looks at the run's control again: how late a cancel or park can
#: reach a running command. A deadline is looked at when it comes, not later. Each look
#: is a wake of the step's thread (and a turn of the GIL among a host's 16 slots):
#: at 20 ms they were a tenth of a fan-out item's CPU.
STOP_LOOK = 0.1
# After the group is gone, give the pipes this long to reach EOF; a process that left
# the group (setsid) may hold them for ever, and its readers are abandoned.
DRAIN_GRACE = 0.5
Ending = Literal["exited", "timed_out", "stopped", "not_found", "error"]
Sink = Callable[[bytes], None]


def safe_text(text: str, limit: int, secrets: Iterable[str] = (), *, keep: Keep = "head") -> str:
    """Redact first (so a cut cannot split a secret past the masks), then bound to
    `limit` UTF-8 bytes; line breaks are kept (see `runner._safety.safe_message`)."""
    return bound(redact(text, secrets), limit, keep)


class _Capture:
    """One pipe read into memory by the supervisor's loop (no thread of its own),
    keeping the first (or last) `cap` bytes; `sink` sees each chunk as read."""

    def __init__(self, pipe: IO[bytes], cap: int, keep: str, sink: Sink | None = None) -> None:
        self.pipe = pipe
        self.fd = pipe.fileno()
        self.sink = sink  # each chunk as read (a live log), before any cut
        self.cap = cap
        self.keep = keep
        self.data = bytearray()
        self.truncated = False
        self.open = True

    def take(self) -> None:
        """One read of what the pipe holds (the poll said it would not block); at EOF
        the pipe is closed."""
        try:
            chunk = os.read(self.fd, 65536)
        except OSError:
            chunk = b""
        if not chunk:
            self.close()
            return
        if self.sink is not None:
            try:
                self.sink(chunk)
            except Exception:  # a broken live view must not lose the output
                self.sink = None
        self.data += chunk
        if len(self.data) > self.cap:
            self.truncated = True
            if self.keep == "tail":
                del self.data[: len(self.data) - self.cap]
            else:
                del self.data[self.cap:]

    def close(self) -> None:
        if self.open:
            self.open = False
            with contextlib.suppress(OSError):
                self.pipe.close()


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


def kill_group(proc: subprocess.Popen[bytes], grace: float = KILL_GRACE,
               settled: Callable[[], bool] | None = None, *,
               clock: Clock | None = None) -> None:
    """SIGTERM the child's process group, then SIGKILL whatever is left after `grace`
    seconds on `clock` (default: the system clock).

    The wait ends early once the leader has exited and the group is empty, or
    `settled()` says so (the caller may know better: a group whose members are
    zombies nobody reaps still "exists" for the kernel). On a test's FakeClock the
    grace passes as virtual time, like every other wait of the run.
    """
    clock = clock or SystemClock()
    pgid = proc.pid  # start_new_session made the child the group leader
    try:
        os.killpg(pgid, signal.SIGTERM)
    except ProcessLookupError:
        # No member left, not even the leader's zombie: it was reaped (a step that
        # exited and left no job, each fan-out item's case) and there is nothing to
        # wait for or kill.
        if proc.poll() is not None:
            return
    except PermissionError:
        pass
    end = clock.monotonic() + grace
    while clock.monotonic() < end:
        # Polling also reaps the leader, so it does not keep the group alive as a zombie.
        if proc.poll() is not None and (_group_gone(pgid) or (settled and settled())):
            break
        clock.sleep(POLL)
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


@dataclass
class _Ran:
    """What the supervisor leaves: the reaped leader and its drained pipes."""

    proc: subprocess.Popen[bytes]
    out: _Capture
    err: _Capture
    stopped: bool


def _supervise(proc: subprocess.Popen[bytes], *, stdin: str | None, out_cap: int,
               err_cap: int, err_keep: str, should_stop: Callable[[], bool], grace: float,
               clock: Clock, sinks: tuple[Sink, Sink] | None = None,
               look_in: Callable[[], float] = lambda: POLL) -> _Ran:
    """Drain, wait, and kill the group by the one policy (on a stop, and once the
    leader has exited, so no straggler survives it). `look_in()`: seconds until the
    next look at `should_stop`.

    One loop on the caller's thread polls both pipes and the child's exit (a pidfd):
    a step costs no reader threads (a fan-out host runs hundreds of steps a second,
    and each thread was a start, a GIL hand-off per chunk and a join)."""
    assert proc.stdout is not None
    assert proc.stderr is not None
    # 4 bytes per character is the UTF-8 worst case; the text is cut to characters later.
    out = _Capture(proc.stdout, out_cap * 4, "head", sinks[0] if sinks else None)
    err = _Capture(proc.stderr, err_cap * 4, err_keep, sinks[1] if sinks else None)
    if stdin is not None and proc.stdin is not None:
        threading.Thread(target=_feed, args=(proc.stdin, stdin.encode()), daemon=True).start()
    pipes = _Pipes(proc, (out, err))
    # Without a pidfd the exit wakes nothing: it is looked for as often as before.
    bounded = pipes.pidfd is None
    stopped = False
    try:
        while not pipes.wait(min(look_in(), POLL) if bounded else look_in()):
            if should_stop():
                stopped = True
                break
        # Stopped: the whole group goes. Exited: whatever the leader left in its group
        # (a background job) goes too; an empty group costs three system calls. While
        # the grace runs, what the group prints is still read (`settled` reads it).
        kill_group(proc, grace, pipes.drained, clock=clock)
        # Real time, as a thread's join was: a process that left the group (setsid) may
        # hold a pipe for ever; after DRAIN_GRACE its end is closed (it sees EPIPE).
        until = time.monotonic() + DRAIN_GRACE
        while not pipes.drained() and time.monotonic() < until:
            pipes.wait(max(until - time.monotonic(), 0.0))
    finally:
        pipes.close()
    return _Ran(proc, out, err, stopped)


class _Pipes:
    """The poll set of one child: its two output pipes and its exit. On Linux a pidfd
    becomes readable the moment the child exits, so a step ends without the latency
    of `Popen.wait(timeout)`, which sleeps in growing steps between checks."""

    def __init__(self, proc: subprocess.Popen[bytes], captures: tuple[_Capture, ...]) -> None:
        self.proc = proc
        self.poller = select.poll()
        self.captures = {c.fd: c for c in captures}
        for fd in self.captures:
            self.poller.register(fd, select.POLLIN)
        self.pidfd: int | None = None
        with contextlib.suppress(AttributeError, OSError):  # no pidfd: Popen.poll
            self.pidfd = os.pidfd_open(proc.pid)
            self.poller.register(self.pidfd, select.POLLIN)
        self.exited = False

    def wait(self, timeout: float) -> bool:
        """Read what the pipes hold until the child exits (True: it did, and is
        reaped) or `timeout` seconds pass (False)."""
        if self.exited:  # only the pipes are left to read
            self._read(self.poller.poll(math.ceil(timeout * 1000)))
            return True
        for _ in range(2):  # one wait; then at once whatever else is ready
            ready = self.poller.poll(0 if _ else math.ceil(timeout * 1000))
            if not ready:
                break
            self._read(ready)
        if self.pidfd is None and self.proc.poll() is not None:
            self.exited = True
        return self.exited

    def _read(self, ready: list[tuple[int, int]]) -> None:
        for fd, _event in ready:
            if fd == self.pidfd:
                self.poller.unregister(fd)
                self.proc.wait()  # exited: the reap returns at once
                self.exited = True
                continue
            capture = self.captures.get(fd)
            if capture is not None and capture.open:
                capture.take()
                if not capture.open:
                    self.poller.unregister(fd)

    def drained(self) -> bool:
        """Read what is there now; True once nothing alive holds either pipe (the group
        has wound down)."""
        if any(c.open for c in self.captures.values()):
            self._read(self.poller.poll(0))
        return not any(c.open for c in self.captures.values())

    def close(self) -> None:
        for capture in self.captures.values():
            capture.close()
        if self.pidfd is not None:
            with contextlib.suppress(OSError):
                os.close(self.pidfd)
            self.pidfd = None


def _text(drain: _Capture, cap: int, keep: str = "head") -> tuple[str, bool]:
    """The captured bytes as at most `cap` characters, and whether anything was cut."""
    text = bytes(drain.data).decode("utf-8", errors="replace")
    cut = drain.truncated or len(text) > cap
    return (text[-cap:] if keep == "tail" else text[:cap]), cut


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
    clock: Clock | None = None,
    sinks: tuple[Sink, Sink] | None = None,
) -> GroupResult:
    """Run `argv` to completion or until `should_stop()`; raises OSError if it cannot
    start. `env` None inherits ours; a mapping replaces it. Keeps the head of stdout
    and the tail of stderr; `sinks` (stdout, stderr) see every chunk as it is read."""
    clock = clock or SystemClock()
    start = clock.monotonic()
    proc = subprocess.Popen(
        list(argv),
        cwd=cwd,
        env=dict(env) if env is not None else None,
        stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    ran = _supervise(proc, stdin=stdin, out_cap=stdout_cap, err_cap=stderr_cap,
                     err_keep="tail", should_stop=should_stop, grace=grace, clock=clock,
                     sinks=sinks)
    stdout, truncated = _text(ran.out, stdout_cap)
    stderr, _ = _text(ran.err, stderr_cap, "tail")
    return GroupResult(
        returncode=proc.returncode,
        stdout=stdout,
        stdout_truncated=truncated,
        stderr=stderr,
        stopped=ran.stopped,
        seconds=clock.monotonic() - start,
    )


_environ_lock = threading.Lock()
_environ_seen: dict[bytes, bytes] = {}  # os.environ as last copied, bytes to bytes


def _environ_bytes() -> dict[bytes, bytes]:
    """A copy of our environment as bytes, the form Popen hands the kernel. Copying
    `os.environ` decodes every variable and Popen encodes each again (~0.3 ms a step
    on a loaded machine, a tenth of a fan-out item's CPU): the bytes are kept and
    copied whole while the process environment equals them (one dict comparison)."""
    global _environ_seen
    data = getattr(os.environ, "_data", None)  # CPython's bytes mapping behind it
    if not isinstance(data, dict):
        return dict(os.environb)
    with _environ_lock:
        if data != _environ_seen:
            _environ_seen = dict(data)
        return dict(_environ_seen)


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
    grace: float = KILL_GRACE,
    sinks: tuple[Sink, Sink] | None = None,
) -> ShellResult:
    """A shell action: `command` (argv, or a shell line with `use_shell`) with `env`
    added to ours, until it exits, `control` stops it or `deadline` (on `clock`)
    passes. Never raises for a command that cannot start: that is a result. `sinks`
    (stdout, stderr) see every chunk as it is read: the live log."""
    start = clock.monotonic()
    full_env = _environ_bytes()
    for name, value in (env or {}).items():
        full_env[os.fsencode(name)] = os.fsencode(value)
    if registry is not None:  # found by the next runner even if `add` never happens
        full_env[MARK_ENV.encode()] = registry.mark.encode()
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
    except ValueError:  # a NUL byte in argv, env or cwd (nodes.py checks first, with detail)
        return _failed("error", "the command, its environment or working directory contains "
                       "a NUL byte", start, clock)
    if registry is not None:
        registry.add(proc.pid)
    why: list[Ending] = []

    def should_stop() -> bool:
        if control.stopping:
            why.append("stopped")
        elif deadline is not None and clock.monotonic() >= deadline:
            why.append("timed_out")
        return bool(why)

    def look_in() -> float:
        if deadline is None:
            return STOP_LOOK
        return min(STOP_LOOK, max(deadline - clock.monotonic(), 0.0))

    ran = _supervise(proc, stdin=stdin, out_cap=cap, err_cap=cap, err_keep="head",
                     should_stop=should_stop, grace=grace, clock=clock, sinks=sinks,
                     look_in=look_in)
    if registry is not None:  # `_supervise` killed its group: nothing left to reap
        registry.remove(proc.pid)
    code = proc.returncode
    stdout, stdout_cut = _text(ran.out, cap)
    stderr, stderr_cut = _text(ran.err, cap)
    return ShellResult(
        ending=why[0] if why else "exited",
        exit_code=code if code is not None and code >= 0 else None,
        signal=-code if code is not None and code < 0 else None,
        stdout=stdout,
        stderr=stderr,
        stdout_truncated=stdout_cut,
        stderr_truncated=stderr_cut,
        duration_ms=int((clock.monotonic() - start) * 1000),
    )


def _failed(ending: Ending, message: str, start: float, clock: Clock) -> ShellResult:
    return ShellResult(ending, None, None, "", "", False, False,
                       int((clock.monotonic() - start) * 1000), message)
