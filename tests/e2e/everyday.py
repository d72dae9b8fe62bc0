"""A temp project driven through the real CLI in subprocesses (issue 13's e2e tests)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

from waiting import stop_process

from runner.store import LaunchRecord, SqliteStore


class Project:
    def __init__(self, root: Path, *, create: bool = True) -> None:
        self.root = root
        if create:
            (root / ".wfrun" / "workflows").mkdir(parents=True)
        # Long-lived processes a test started (hosts, followers): `close` ends them.
        self.procs: list[subprocess.Popen[str]] = []

    def workflow(self, name: str, text: str) -> Path:
        path = self.root / ".wfrun" / "workflows" / f"{name}.yaml"
        path.write_text(textwrap.dedent(text))
        return path

    def file(self, name: str, text: str) -> Path:
        path = self.root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
        return path

    def argv(self, *args: str, project: bool = True) -> list[str]:
        flag = ["--project", str(self.root)] if project else []
        return [sys.executable, "-m", "runner", *flag, *args]

    def wfrun(self, *args: str, timeout: float = 60, stdin: str | None = None,
              env: dict[str, str] | None = None, project: bool = True,
              cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
        # COLUMNS=80 as a CI runner has it: output to a pipe must still be complete.
        return subprocess.run(self.argv(*args, project=project), capture_output=True, text=True,
                              timeout=timeout, cwd=cwd or self.root, input=stdin,
                              env={**os.environ, "COLUMNS": "80", **(env or {})})

    def json(self, *args: str, **kw: Any) -> Any:
        done = self.wfrun(*args, **kw)
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)

    def runs(self, *args: str, env: dict[str, str] | None = None) -> list[dict[str, Any]]:
        rows: list[dict[str, Any]] = self.json("runs", "--json", *args, env=env)["runs"]
        return rows

    def spawn(self, *args: str, env: dict[str, str] | None = None,
              stdout: int | IO[str] = subprocess.DEVNULL,
              stderr: int | IO[str] = subprocess.DEVNULL) -> subprocess.Popen[str]:
        """Start `wfrun ARGS` in the background; `close` kills it if the test did not."""
        proc = subprocess.Popen(self.argv(*args), stdout=stdout, stderr=stderr, text=True,
                                cwd=self.root, env={**os.environ, **(env or {})})
        self.procs.append(proc)
        return proc

    def host(self, *args: str, env: dict[str, str] | None = None,
             stderr: int | IO[str] = subprocess.DEVNULL) -> subprocess.Popen[str]:
        """A `wfrun host` without controllers (the tests that want them say so)."""
        return self.spawn("host", "--no-controllers", *args, env=env, stderr=stderr)

    def close(self) -> None:
        for proc in self.procs:
            stop_process(proc, timeout=10)

    @property
    def runs_dir(self) -> Path:
        return self.root / ".wfrun" / "runs"


@contextmanager
def temp_project(root: Path, workflows: Mapping[str, str] | None = None) -> Iterator[Project]:
    """A project with `workflows` (name -> YAML text); its processes end with the block."""
    project = Project(root)
    for name, text in (workflows or {}).items():
        project.workflow(name, text)
    try:
        yield project
    finally:
        project.close()


def launch_row(project_root: Path, run_id: str) -> LaunchRecord:
    """Run `run_id`'s launch row, read from the project's SQLite store and closed again."""
    store = SqliteStore(project_root / ".wfrun" / "state" / "store.sqlite3")
    try:
        record = store.launches.get(run_id)
    finally:
        store.close()
    assert record is not None, f"no launch row for {run_id}"
    return record
