"""The project's host lock (`.wfrun/state/host.lock`): one `wfrun host` per project,
the holder's pid in the file; and the reaping of what a dead host left behind (its
shell process groups, and those of dead foreground runners)."""

from __future__ import annotations

import errno
import fcntl
import logging
import os
from pathlib import Path

from runner._private import private_dirs
from runner.engine._processes import reap_dead_registries, reap_orphans
from runner.errors import InputError, machine_fault

from .runtime._local import Workspace

log = logging.getLogger(__name__)
HOST_CHILDREN = "host.children.json"  # the host's own shell process groups, for reaping


class HostLock:
    """An exclusive advisory lock on the project; the holder's pid is in the file."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.fd: int | None = None

    def acquire(self) -> None:
        try:
            private_dirs(self.path.parent)
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        except OSError as exc:
            fault = machine_fault(exc, str(self.path))
            if fault is None:
                raise
            raise fault from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            holder = os.read(fd, 64).decode(errors="replace").strip()
            os.close(fd)
            if exc.errno in (errno.EAGAIN, errno.EACCES):
                # The README's "several hosts" made users start two here (issue 34).
                raise InputError("another wfrun host is running for this project"
                                 + (f" (pid {holder})" if holder else "")
                                 + "; stop it first, or give it more slots or cores "
                                 "(--max-runs, --processes); hosts share one queue only on "
                                 "Postgres, each in its own project folder") from None
            raise
        try:
            os.ftruncate(fd, 0)
            os.write(fd, str(os.getpid()).encode())
        except OSError as exc:  # a full disk: the pid is a courtesy, the flock is the lock
            log.warning("wfrun host: cannot write its pid to %s (%s)", self.path, exc.strerror)
        self.fd = fd

    def release(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


def host_lock(ws: Workspace) -> HostLock:
    if ws.project_root is None:
        raise InputError("wfrun host needs a project (a folder with .wfrun/); pass --project")
    return HostLock(ws.project_root / ".wfrun" / "state" / "host.lock")


def reap_leftovers(state_dir: Path, ws: Workspace) -> list[int]:
    """Kill the process groups of a dead host and of dead foreground runners."""
    return (reap_orphans(state_dir / HOST_CHILDREN)
            + reap_dead_registries(ws.children_dir))
