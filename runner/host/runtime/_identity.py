"""Who this runner is: its id (host:pid), whether a named runner is dead, and the
environment secrets it redacts. Read by every role's builder (coordinators.py) and
by the views, so it imports nothing heavier than the root policies."""

from __future__ import annotations

import os

from runner._safety import MIN_SECRET_CHARS, secret_env_values


def runner_id() -> str:
    import socket  # here: `status` never names a runner (cold start)

    return f"{socket.gethostname()}:{os.getpid()}"


def dead_local_runner(runner: str | None) -> str | None:
    """`runner` if it names a process of this machine that no longer exists."""
    if runner is None:
        return None
    import socket

    host, _, pid = runner.rpartition(":")
    if host != socket.gethostname() or not pid.isdigit():
        return None
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return runner
    except PermissionError:
        return None  # alive, someone else's
    try:
        # A killed runner whose parent died too stays a zombie where nothing reaps
        # orphans (a container without an init): dead all the same.
        with open(f"/proc/{pid}/stat", encoding="utf-8", errors="replace") as fh:
            state = fh.read().rsplit(")", 1)[-1].split()[0]
    except (OSError, IndexError):
        return None
    return runner if state in ("Z", "X") else None


def environment_secrets() -> tuple[str, ...]:
    """Values of this process's secret-named environment variables (redacted wherever
    they would be persisted or shown to a model), by the one policy in runner/_safety.py."""
    return tuple(v for v in secret_env_values(os.environ) if len(v) >= MIN_SECRET_CHARS)
