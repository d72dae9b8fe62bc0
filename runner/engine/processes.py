"""A file-backed registry of child process groups, so a new host can reap orphans.

SIGKILL of a host does not kill the process groups its shell nodes started
(each runs in its own session). The host records every group it starts in
`host.children.json`; the next host kills the groups still alive. A group is
identified by its leader's pid *and* its kernel start time, so a recycled pid
is never killed by mistake.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import threading
from pathlib import Path
from typing import Any

from runner.private import private_dirs


def _start_time(pid: int) -> str | None:
    """The process start time in clock ticks since boot (field 22 of /proc/PID/stat)."""
    try:
        data = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (field 2) may contain spaces; fields resume after the last ')'.
    rest = data.rsplit(")", 1)[-1].split()
    return rest[19] if len(rest) > 19 else None


class ProcessRegistry:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._groups: dict[int, dict[str, Any]] = {}

    def add(self, pgid: int, **info: Any) -> None:
        with self._lock:
            # Nothing calls `remove` when a command ends (its group is killed then), so
            # drop the groups whose leader is gone: the file stays as small as what runs.
            self._groups = {g: e for g, e in self._groups.items()
                            if e.get("start") is not None and _start_time(g) == e["start"]}
            self._groups[pgid] = {"pgid": pgid, "start": _start_time(pgid), **info}
            self._save()

    def remove(self, pgid: int) -> None:
        with self._lock:
            if self._groups.pop(pgid, None) is not None:
                self._save()

    def _save(self) -> None:
        private_dirs(self.path.parent)
        tmp = self.path.with_name(self.path.name + ".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.write(fd, json.dumps(list(self._groups.values())).encode())
        finally:
            os.close(fd)
        os.replace(tmp, self.path)


def reap_orphans(path: Path) -> list[int]:
    """Kill the process groups a dead host left behind; returns the pgids killed."""
    try:
        entries = json.loads(path.read_text())
    except (OSError, ValueError):
        return []
    killed = []
    for entry in entries if isinstance(entries, list) else []:
        pgid = entry.get("pgid") if isinstance(entry, dict) else None
        if not isinstance(pgid, int) or pgid <= 1:
            continue
        start = _start_time(pgid)
        if start is None or start != entry.get("start"):
            continue  # gone, or the pid now belongs to someone else
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, signal.SIGKILL)
            killed.append(pgid)
    with contextlib.suppress(OSError):
        path.unlink()
    return killed


def registry_for_this_process(folder: Path) -> ProcessRegistry:
    """A registry file named after this process, under `folder` (one file per runner)."""
    return ProcessRegistry(folder / f"{os.getpid()}.json")


def reap_dead_registries(folder: Path) -> list[int]:
    """Reap the groups recorded by runners that are no longer alive."""
    killed: list[int] = []
    try:
        names = os.listdir(folder)
    except OSError:
        return killed
    for name in names:
        stem = name.removesuffix(".json")
        if not name.endswith(".json") or not stem.isdigit():
            continue
        pid = int(stem)
        if pid == os.getpid() or _alive(pid):
            continue
        killed.extend(reap_orphans(folder / name))
    return killed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie is dead for our purposes (its children are orphans now).
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()[0]
    except OSError:
        return False
    return state != "Z"
