"""A store locked by another process: one line on stderr, never a traceback (DESIGN §9).

The test process itself holds the lock on `.wfrun/state/store.sqlite3` while real
`wfrun` subprocesses run against it. The store's busy timeout is 5 s (there is no
setting to shorten it from outside), so the commands run concurrently and the
whole test waits that long once, not once per command.
"""

from __future__ import annotations

import os
import re
import sqlite3
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.timeout(90)]
BUSY = "wfrun: error: the store is busy (locked by another process); try again\n"
QUEUED = re.compile(r"^Workflow greet queued \(run (greet-\d{8}T\d{6}Z-[0-9a-f]{8})\)\.$")


class Project:
    def __init__(self, root: Path) -> None:
        self.root = root
        (root / ".wfrun" / "workflows").mkdir(parents=True)
        (root / ".wfrun" / "workflows" / "greet.yaml").write_text(textwrap.dedent("""
            start: hello
            nodes:
              hello: {compute: "{{ {'greeting': 'hi'} }}"}
        """))

    @property
    def store(self) -> Path:
        return self.root / ".wfrun" / "state" / "store.sqlite3"

    def argv(self, *args: str) -> list[str]:
        return [sys.executable, "-m", "runner", "--project", str(self.root), *args]

    def wfrun(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(self.argv(*args), capture_output=True, text=True, timeout=30,
                              cwd=self.root, env=dict(os.environ))

    def concurrently(self, *commands: tuple[str, ...]
                     ) -> dict[str, subprocess.CompletedProcess[str]]:
        """Run every command at once; results by verb (each waits the busy timeout)."""
        procs = {c[0]: (c, subprocess.Popen(self.argv(*c), stdout=subprocess.PIPE,
                                            stderr=subprocess.PIPE, text=True,
                                            cwd=self.root, env=dict(os.environ)))
                 for c in commands}
        done = {}
        for verb, (command, proc) in procs.items():
            out, err = proc.communicate(timeout=60)
            done[verb] = subprocess.CompletedProcess(command, proc.returncode, out, err)
        return done

    def start(self) -> str:
        done = self.wfrun("start", "greet")
        assert done.returncode == 0, done.stderr
        queued = QUEUED.match(done.stdout.strip())
        assert queued is not None, done.stdout
        return queued[1]


@pytest.fixture
def project(tmp_path: Path) -> Project:
    return Project(tmp_path / "proj")


@contextmanager
def held(path: Path, *statements: str) -> Iterator[None]:
    """Another process's transaction, from this test process: the lock is held until
    the block ends, far longer than the commands' busy timeout."""
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        for statement in statements:
            conn.execute(statement)
        conn.execute("SELECT count(*) FROM sqlite_master").fetchall()
        yield
    finally:
        conn.execute("ROLLBACK")
        conn.close()


def assert_one_line(done: subprocess.CompletedProcess[str]) -> str:
    assert "Traceback" not in done.stderr, done.stderr
    assert done.stdout == ""
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("wfrun: error: ")
    return lines[0]


def test_commands_on_a_store_a_writer_holds_fail_in_one_line(project: Project) -> None:
    run_id = project.start()
    with held(project.store, "BEGIN IMMEDIATE"):
        done = project.concurrently(("cancel", run_id), ("status", run_id),
                                    ("start", "greet"))
    cancel, status, start = done["cancel"], done["status"], done["start"]

    assert_one_line(cancel)
    assert cancel.stderr == BUSY
    assert cancel.returncode == 1

    # WAL: a writer does not block readers, so status still answers, and correctly.
    assert status.returncode == 0, status.stderr
    assert status.stdout == f"{run_id}  queued\n"

    # Nothing changed while the store was busy, and "try again" is true.
    assert project.wfrun("status", run_id).stdout == f"{run_id}  queued\n"
    again = project.wfrun("cancel", run_id)
    assert again.returncode == 0, again.stderr
    assert again.stdout == f"Workflow run {run_id} cancelled.\n"

    line = assert_one_line(start)
    assert "locked" in line or "busy" in line
    assert start.returncode == 1  # a busy store is not bad input


def test_commands_on_a_store_locked_even_for_readers_fail_in_one_line(
        project: Project) -> None:
    run_id = project.start()
    # Exclusive locking mode keeps the lock against readers too (no WAL sharing).
    with held(project.store, "PRAGMA locking_mode = EXCLUSIVE", "BEGIN EXCLUSIVE"):
        done = project.concurrently(("cancel", run_id), ("status", run_id),
                                    ("start", "greet"))
    for verb, result in done.items():
        line = assert_one_line(result)
        assert "busy" in line, verb
        assert result.returncode == 1, (verb, line)
    assert project.wfrun("status", run_id).stdout == f"{run_id}  queued\n"
