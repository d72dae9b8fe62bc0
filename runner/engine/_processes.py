"""A file-backed registry of child process groups, so a new host can reap orphans.

SIGKILL of a host does not kill the process groups its shell nodes started
(each runs in its own session). The host records every group it starts in
`host.children.json`; the next host kills the groups still alive. A group is
identified by its leader's pid *and* its kernel start time, so a recycled pid
is never killed by mistake.

The file is a log of JSON lines, one per group started, appended through a
descriptor kept open: recording a group is one `write` (a fan-out host starts
hundreds a second; rewriting the whole file and renaming it cost a tenth of a
shell item's CPU). An ended group stays in the log until the log is compacted (at
PRUNE_AT lines) or the registry empties (the file goes): a reaper skips it, its
leader being gone or its pid another process's (another start time). A line is
written whole by one system call, so a runner killed mid-write leaves at worst a
torn last line, which readers skip.

A host killed between starting a command and recording its group leaves a group
no file names. So every command also carries a mark in its environment (the
folder, the runner's pid and start time; inherited by all it spawns), and reaping
also looks through /proc for marks of this folder whose runner is gone.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import signal
import threading
from pathlib import Path
from typing import Any

from runner._private import private_dirs


def _start_time(pid: int) -> str | None:
    """The process start time in clock ticks since boot (field 22 of /proc/PID/stat)."""
    try:  # os.open and one read: no file object (once per command a host starts)
        fd = os.open(f"/proc/{pid}/stat", os.O_RDONLY)
    except OSError:
        return None
    try:
        data = os.read(fd, 4096)
    except OSError:
        return None
    finally:
        os.close(fd)
    # The command name (field 2) may contain spaces; fields resume after the last ')'.
    rest = data.rsplit(b")", 1)[-1].split()
    return rest[19].decode() if len(rest) > 19 else None


MARK_ENV = "WFRUN_RUNNER_MARK"
#: Lines in the log past which `add` rewrites it with only the groups still recorded
#: (ended ones a reaper would skip anyway: their leader's start time no longer matches).
PRUNE_AT = 64


def read_groups(path: Path) -> list[dict[str, Any]]:
    """The groups a registry file records, in order: its JSON lines (a torn or foreign
    line skipped), or the JSON list an older runner wrote."""
    try:
        text = path.read_text()
    except (OSError, ValueError):
        return []
    if text.lstrip().startswith("["):  # the format before the log
        try:
            entries = json.loads(text)
        except ValueError:
            return []
        return [e for e in entries if isinstance(e, dict)] if isinstance(entries, list) \
            else []
    out: list[dict[str, Any]] = []
    for line in text.splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue  # a line torn by a runner killed as it wrote
        if isinstance(entry, dict):
            out.append(entry)
    return out


def _folder_key(folder: Path) -> str:
    return hashlib.sha256(os.path.realpath(folder).encode()).hexdigest()[:16]


class ProcessRegistry:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._groups: dict[int, str | None] = {}  # pgid -> its leader's start time
        self._fd: int | None = None  # the log, open for appends while it exists
        self._lines = 0  # lines in the log (ended groups included)
        self._folder_made = False
        me = os.getpid()
        # Set in every command's environment (see the module doc).
        self.mark = f"{_folder_key(path.parent)}:{me}:{_start_time(me)}"

    def add(self, pgid: int) -> None:
        """Record a group by its leader's pid and start time: nothing else. A command's
        argv holds rendered secrets, and this file outlives the run (issue 34.2)."""
        start = _start_time(pgid)
        with self._lock:
            self._groups[pgid] = start
            # A log someone removed (a prune of state) is written anew: a line appended
            # to an unlinked file would reach no reaper.
            if self._fd is None or self._lines >= PRUNE_AT or os.fstat(self._fd).st_nlink == 0:
                self._rewrite()  # the groups still recorded, ended ones dropped
            else:
                os.write(self._fd, _line(pgid, start))
                self._lines += 1

    def remove(self, pgid: int) -> None:
        """Forget an ended group. While others run, the log keeps its line until it is
        compacted: a reaper finds its leader gone (or its pid reused: another start
        time) and leaves it, so a busy runner's step costs one write, its `add`. The
        last one out removes the file: a runner that ended leaves nothing in
        `children/`."""
        with self._lock:
            if self._groups.pop(pgid, None) is None or self._groups:
                return
            self._close()
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.path)

    def _rewrite(self) -> None:
        """Write the log anew (atomically: a reaper reads the old one or the new one)
        with the groups recorded now, and keep it open for appends."""
        if not self._folder_made:
            private_dirs(self.path.parent)
            self._folder_made = True
        self._groups = {g: s for g, s in self._groups.items()
                        if s is not None and _start_time(g) == s}
        tmp = self.path.with_name(self.path.name + ".tmp")
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o600)
        except FileNotFoundError:  # the folder went away (a prune of state): again
            private_dirs(self.path.parent)
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o600)
        try:
            os.write(fd, b"".join(_line(g, s) for g, s in self._groups.items()))
            os.replace(tmp, self.path)
        except BaseException:
            os.close(fd)
            raise
        self._close()
        self._fd, self._lines = fd, len(self._groups)

    def _close(self) -> None:
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._fd)
            self._fd = None
            self._lines = 0

    def close(self) -> None:
        """Let the log's descriptor go (the file stays: its groups may still run)."""
        with self._lock:
            self._close()


def _line(pgid: int, start: str | None) -> bytes:
    return json.dumps({"pgid": pgid, "start": start}, separators=(",", ":")).encode() + b"\n"


def reap_orphans(path: Path) -> list[int]:
    """Kill the process groups a dead host left behind; returns the pgids killed."""
    killed = []
    for entry in read_groups(path):
        pgid = entry.get("pgid")
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
        # No registry yet: a runner killed between starting its first command and
        # recording it made none. Its marked groups are found all the same.
        names = []
    for name in names:
        stem = name.removesuffix(".json")
        if not name.endswith(".json") or not stem.isdigit():
            continue
        pid = int(stem)
        if pid == os.getpid() or _alive(pid):
            continue
        killed.extend(reap_orphans(folder / name))
    killed.extend(_reap_marked(folder))
    return killed


def _reap_marked(folder: Path) -> list[int]:
    """Kill the groups of processes marked by a runner of `folder` that is gone (its
    pid dead or now another process's): those started but never recorded."""
    prefix = f"{MARK_ENV}={_folder_key(folder)}:".encode()
    mine = {os.getpid(), os.getpgrp()}
    killed: list[int] = []
    try:
        pids = [int(n) for n in os.listdir("/proc") if n.isdigit()]
    except OSError:
        return killed
    for pid in pids:
        if pid in mine:
            continue
        try:
            environ = Path(f"/proc/{pid}/environ").read_bytes()
        except OSError:  # gone, or another user's
            continue
        mark = next((v for v in environ.split(b"\0") if v.startswith(prefix)), None)
        if mark is None:
            continue
        runner_pid, _, start = mark[len(prefix):].decode(errors="replace").partition(":")
        if not runner_pid.isdigit() or (_start_time(int(runner_pid)) == start
                                        and _alive(int(runner_pid))):
            continue  # its runner still lives (a zombie runner counts as gone)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            pgid = os.getpgid(pid)
            if pgid > 1 and pgid not in mine and pgid not in killed:
                os.killpg(pgid, signal.SIGKILL)
                killed.append(pgid)
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
