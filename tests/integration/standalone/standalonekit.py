"""Helpers for the standalone host tests: real `wfrun host` processes on a temp project.

The `three` workflow has three shell nodes. Each appends a line to `log` once its
side effect is done (`a`, `b`, `c`), so the file counts how often each node really
completed; `b` also appends `b-start` when it begins and records the pid of the
waiter it runs in the background (a grandchild of the host) in `sleep.pid`. The
n-th attempt of `b` waits while the file `b.hold.<n>` exists (the `project`
fixture creates `b.hold.1`, so a test catches the first attempt inside b for as
long as it needs, however slow the machine), and first removes `b.hold.<n-1>`,
releasing the attempt before it: an orphaned first attempt still alive when b
reruns would write its `b` beside the rerun.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from waiting import DEADLINE, wait_until

from runner.clock import FakeClock
from runner.compiler import build_catalog
from runner.engine._bundlefmt import MANIFEST
from runner.engine._bundleread import read_json
from runner.engine._processes import read_groups
from runner.host.runtime._launches import detached_coordinator
from runner.host.runtime._local import Workspace
from runner.store import LaunchRecord, SqliteStore

THREE = """\
    start: a
    nodes:
      a:
        action: {use_shell: true, shell: "echo a >> log"}
      b:
        action:
          use_shell: true
          shell: >-
            echo b-start >> log; n=$(grep -c b-start log); rm -f b.hold.$((n - 1));
            (while [ -e b.hold.$n ]; do sleep 0.1; done) & echo $! > sleep.pid; wait;
            echo b >> log
      c:
        action: {use_shell: true, shell: "echo c >> log"}
    edges:
      - {from: a, to: b}
      - {from: b, to: c}
"""
TINY = """\
    input: {type: object, properties: {n: {type: integer}}}
    start: one
    nodes:
      one: {compute: "{{ input.n | default(0) }}"}
      two: {compute: "{{ outputs.one + 1 }}"}
      three: {compute: "{{ {'n': outputs.one, 'next': outputs.two} }}"}
    edges:
      - {from: one, to: two}
      - {from: two, to: three}
"""


def wait_for(what: str, check: Callable[[], Any], timeout: float = DEADLINE,
             every: float = 0.05) -> Any:
    return wait_until(check, timeout=timeout, interval=every, what=what)


def pid_gone(pid: int) -> bool:
    """No such process, or only its zombie is left (nothing reaps orphans in a container)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rsplit(")", 1)[-1].split()[0] == "Z"


def group_gone(pgid: int) -> bool:
    """No live (non-zombie) process is left in the process group."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[-1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            return False
    return True


def pgid_of(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()[2])


class Project:
    def __init__(self, root: Path) -> None:
        self.root = root
        (root / ".wfrun" / "workflows").mkdir(parents=True)
        self.hosts: list[subprocess.Popen[str]] = []

    def workflow(self, name: str, text: str) -> None:
        (self.root / ".wfrun" / "workflows" / f"{name}.yaml").write_text(textwrap.dedent(text))

    # -- processes ---------------------------------------------------------------
    def argv(self, *args: str) -> list[str]:
        return [sys.executable, "-m", "runner", "--project", str(self.root), *args]

    def env(self, **extra: str) -> dict[str, str]:
        return {**os.environ, "COLUMNS": "100", **extra}

    def wfrun(self, *args: str, timeout: float = 30,
              **env: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(self.argv(*args), capture_output=True, text=True,
                              timeout=timeout, cwd=self.root, env=self.env(**env))

    def host(self, *args: str, **env: str) -> subprocess.Popen[str]:
        """A long-running `wfrun host` (stdout/stderr to files; read them with `log_of`)."""
        n = len(self.hosts)
        out = open(self.root / f"host{n}.out", "w")  # noqa: SIM115  (closed by Popen's child)
        err = open(self.root / f"host{n}.err", "w")  # noqa: SIM115
        try:
            proc = subprocess.Popen(self.argv("host", *args), stdout=out, stderr=err,
                                    text=True, cwd=self.root, env=self.env(**env))
        finally:
            out.close()
            err.close()
        self.hosts.append(proc)
        return proc

    def stderr_of(self, proc: subprocess.Popen[str]) -> str:
        return (self.root / f"host{self.hosts.index(proc)}.err").read_text()

    def wait_host_ready(self, proc: subprocess.Popen[str]) -> None:
        wait_for("the host to take the lock", lambda: self.lock_pid() == proc.pid
                 or proc.poll() is not None)
        assert proc.poll() is None, self.stderr_of(proc)

    def webhooks_url(self, proc: subprocess.Popen[str], path: str) -> str:
        """`path` on the webhook ingress of a ready `host --listen` (the port it printed)."""
        found = wait_for("the webhook address", lambda: re.search(
            r"webhooks on (http://\S+)", self.stderr_of(proc)))
        return f"{found.group(1)}{path}"

    def lock_pid(self) -> int | None:
        try:
            text = (self.root / ".wfrun" / "state" / "host.lock").read_text().strip()
        except OSError:
            return None
        return int(text) if text.isdigit() else None

    def registered_groups(self) -> set[int]:
        """The process groups the running host has recorded for reaping."""
        path = self.root / ".wfrun" / "state" / "host.children.json"
        return {int(e["pgid"]) for e in read_groups(path)}

    def stop_all(self) -> None:
        for proc in self.hosts:
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=10)
        for hold in self.root.glob("b.hold.*"):  # every waiting b ends by itself
            hold.unlink()
        pid_file = self.root / "sleep.pid"
        if pid_file.exists():  # never leave a waiting grandchild behind
            with contextlib.suppress(ValueError, ProcessLookupError, PermissionError):
                os.kill(int(pid_file.read_text().strip()), signal.SIGKILL)

    def sleep_pid(self) -> int | None:
        """The pid of b's background waiter, once b wrote it."""
        try:
            text = (self.root / "sleep.pid").read_text().strip()
        except OSError:
            return None
        return int(text) if text else None

    # -- the store and the bundles ---------------------------------------------------
    def store(self) -> SqliteStore:
        return SqliteStore(self.root / ".wfrun" / "state" / "store.sqlite3")

    def workspace(self) -> Workspace:
        return Workspace(build_catalog("workflows", self.root, None), self.root,
                         self.root / ".wfrun")

    def queue(self, name: str, inputs: list[Any]) -> list[str]:
        """Queue detached launches (the `wfrun start` path, without a process per launch),
        each a millisecond after the one before: claims take the oldest first, and
        launches queued within one millisecond (a fast disk queues three in one) are
        taken in the order of their random run ids. The queue's clock starts a minute
        back, so a claim on the real clock finds them all queued."""
        clock = FakeClock(start=time.time() - 60)
        store = SqliteStore(self.root / ".wfrun" / "state" / "store.sqlite3", clock=clock)
        try:
            coordinator = detached_coordinator(self.workspace(), store)
            queued = []
            for value in inputs:
                queued.append(coordinator.prepare(name, value).run_id)
                clock.advance(0.001)
            return queued
        finally:
            store.close()

    def launch(self, run_id: str) -> LaunchRecord:
        store = self.store()
        try:
            record = store.launches.get(run_id)
        finally:
            store.close()
        assert record is not None
        return record

    def launch_status(self, run_id: str) -> str:
        return self.launch(run_id).status

    def manifest(self, run_id: str) -> dict[str, Any]:
        return read_json(self.root / ".wfrun" / "runs" / run_id / MANIFEST)

    def trace_types(self, run_id: str) -> list[str]:
        lines = (self.root / ".wfrun" / "runs" / run_id / "trace.jsonl").read_text()
        return [json.loads(line)["type"] for line in lines.splitlines() if line.strip()]

    def counts(self) -> Counter[str]:
        path = self.root / "log"
        return Counter(path.read_text().split()) if path.exists() else Counter()
