"""Who this runner is: its id (host:pid), whether a named runner is dead, and the
environment secrets it redacts. Read by every role's builder (coordinators.py) and
by the views, so it imports nothing heavier than the root policies."""

from __future__ import annotations

import os

from runner._safety import MIN_SECRET_CHARS, secret_env_values


def _hostname() -> str:
    # The name gethostname() returns (it reads uname's node name): without importing
    # `socket` (~1 ms of a host's start-up, and nothing else of a `host --once` uses it).
    return os.uname().nodename


def runner_id() -> str:
    return f"{_hostname()}:{os.getpid()}"


def dead_local_runner(runner: str | None) -> str | None:
    """`runner` if it names a process of this machine that no longer exists."""
    if runner is None:
        return None
    host, _, pid = runner.rpartition(":")
    if host != _hostname() or not pid.isdigit():
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
