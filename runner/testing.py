"""Helpers for testing code that runs wfrun workflows (procrastinate's `testing.py`).

A test builds the real thing, small: a project folder with its workflows, a SQLite
store in it (wfrun has no in-memory store: a temp folder's file is as fast and
keeps the real locking and transactions), a virtual clock, and a runner built the
way every runner is (`build_coordinator`, role `plain` unless the test is about a
role):

    from runner.testing import FakeClock, build_coordinator, sqlite_store, workspace

    clock = FakeClock()
    ws = workspace(tmp_path, clock=clock, workflows={"hello": HELLO_YAML})
    with sqlite_store(ws, clock=clock) as store:
        runner = build_coordinator(ws, store, "plain", runner="test")
        record = runner.prepare("hello", {"name": "x"})
        outcome = runner.execute(runner.claim(record.run_id))

`FakeClock` moves only when told (`advance`) or when the code under test sleeps on
it; pass it to both the workspace and the store so leases and run times agree.
"""

from __future__ import annotations

import textwrap
from collections.abc import Mapping
from pathlib import Path

from runner.clock import Clock, FakeClock
from runner.compiler import build_catalog
from runner.host.runtime._coordinators import ROLES, Role, build_coordinator
from runner.host.runtime._local import Workspace, store_path
from runner.store import SqliteStore

__all__ = ["ROLES", "FakeClock", "Role", "build_coordinator", "sqlite_store", "workspace",
           "write_workflow"]


def workspace(root: Path, *, clock: Clock | None = None,
              workflows: Mapping[str, str] | None = None,
              state_dir: Path | None = None) -> Workspace:
    """A project at `root` (made if missing) with `workflows` (name -> YAML, dedented)
    written into `.wfrun/workflows/`, on `clock` (default the system's)."""
    root.mkdir(parents=True, exist_ok=True)
    for name, text in (workflows or {}).items():
        write_workflow(root, name, text)
    ws = Workspace(build_catalog("workflows", root, None), root,
                   state_dir or root / ".wfrun" / "state")
    if clock is not None:
        ws.clock = clock
    return ws


def write_workflow(root: Path, name: str, text: str) -> Path:
    """Write workflow `name` into the project at `root`; its path."""
    folder = root / ".wfrun" / "workflows"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.yaml"
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


def sqlite_store(ws: Workspace, *, clock: Clock | None = None) -> SqliteStore:
    """The project's SQLite store (`.wfrun/state/store.sqlite3`), opened or created;
    its leases and times on `clock` (default the workspace's)."""
    path = store_path(ws)
    path.parent.mkdir(parents=True, exist_ok=True)
    return SqliteStore(path, clock=clock or ws.clock)
