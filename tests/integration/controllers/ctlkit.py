"""Helpers for the controller runtime tests: a project, a store, managers, drains.

`Harness` is one project folder (copied from fixtures/controllers/project/) with
its SQLite store on a fake clock, so delayed wake-ups and claim leases move when
a test says so. Child workflows run on real threads with the real clock.
`reopen()` closes the store and opens the file again: what a fresh process sees.
`run_driver` starts tests/integration/controllers/ctl_driver.py as a real process.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from waiting import DEADLINE, wait_until

from runner.clock import FakeClock
from runner.compiler import build_catalog
from runner.compiler._controllers import compile_controller
from runner.controllers import (
    ChildWorkflows,
    Condition,
    Controller,
    ControllerManager,
    ManagerConfig,
    ReconcileContext,
    Result,
    load_controller,
)
from runner.engine import AgentStepExecutor
from runner.host.runtime._controllers import child_launcher
from runner.host.runtime._local import Workspace
from runner.store import SqliteStore
from runner.store._controller_interface import Resource

REPO = Path(__file__).resolve().parents[3]
FIXTURE_PROJECT = REPO / "fixtures" / "controllers" / "project"
PR_YAML = REPO / "controllers" / "pull-request.yaml"
DRIVER = Path(__file__).resolve().parent / "ctl_driver.py"
HEAD = "a1b2c3d4e5f6a7b8c9d0a1b2c3d4e5f6a7b8c9d0"
OTHER_HEAD = "ffffeeeeddddccccbbbbaaaa9999888877776666"
REPO_NAME = "octo/widgets"


#: A child workflow held until the test releases it: its shell node marks itself
#: active (active/KEY), records how many children were active when it started
#: (starts.log: "KEY N"), waits for release/KEY, then unmarks itself and records the
#: end (finished.log). KEY is the run input's `key`. Paths are relative to the
#: project (a child's working directory).
HELD_CHILD = """\
name: held-child
input: {type: object, required: [key]}
start: hold
nodes:
  hold:
    action:
      shell: [sh, -c, 'mkdir -p active; echo $$ > "active/$KEY";
              n=$(ls active | wc -l | tr -d " "); echo "$KEY $n" >> starts.log;
              while [ ! -e "release/$KEY" ]; do sleep 0.1; done;
              rm "active/$KEY"; echo "$KEY" >> finished.log']
      env: {KEY: "{{ input.key }}"}
  done: {compute: "{{ {'key': input.key} }}"}
edges:
  - {from: hold, to: done}
"""


def meeting_reconciler(parties: int) -> tuple[Callable[[ReconcileContext, Any], Result],
                                              list[str]]:
    """A reconciler whose passes wait at one barrier of `parties` (bounded by DEADLINE):
    it settles only if that many passes are inside it at once; the keys that met."""
    barrier = threading.Barrier(parties, timeout=DEADLINE)
    met: list[str] = []

    def reconcile(ctx: ReconcileContext, resource: Any) -> Result:
        barrier.wait()
        met.append(resource.key)
        return ctx.settled(None, [Condition("Ready", "True", "Done")])

    return reconcile, met


def write_workflow(root: Path, name: str, text: str) -> Path:
    path = root / ".wfrun" / "workflows" / f"{name}.yaml"
    path.write_text(text)
    return path


class HeldChildren:
    """The files held-child runs leave in a project, and their release switches."""

    def __init__(self, root: Path) -> None:
        self.root = root
        write_workflow(root, "held-child", HELD_CHILD)
        (root / "release").mkdir(exist_ok=True)

    def release(self, key: str) -> None:
        (self.root / "release" / key).write_text("")

    def active(self) -> set[str]:
        folder = self.root / "active"
        return {p.name for p in folder.iterdir()} if folder.exists() else set()

    def starts(self) -> list[tuple[str, int]]:
        path = self.root / "starts.log"
        lines = path.read_text().split("\n") if path.exists() else []
        return [(k, int(n)) for k, n in (line.split() for line in lines if line.strip())]

    def finished(self) -> list[str]:
        path = self.root / "finished.log"
        return path.read_text().split() if path.exists() else []

    def wait_active(self, count: int) -> set[str]:
        """The active children once at least `count` are."""
        wait_for(lambda: len(self.active()) >= count, what=f"{count} active children")
        return self.active()

    def wait_finished(self, key: str) -> None:
        wait_for(lambda: key in self.finished() and key not in self.active(),
                 what=f"child {key} to finish")


def make_project(root: Path) -> Path:
    """A project whose .wfrun/ holds the fixture workflows and controllers."""
    wf = root / ".wfrun"
    shutil.copytree(FIXTURE_PROJECT / "workflows", wf / "workflows")
    shutil.copytree(FIXTURE_PROJECT / "controllers", wf / "controllers")
    shutil.copy(FIXTURE_PROJECT / "pr-repair.script.yaml", root / "pr-repair.script.yaml")
    return root


def load(path: Path) -> Controller:
    result = compile_controller(path)
    assert result.valid, [d.to_json() for d in result.diagnostics]
    assert result.definition is not None
    return load_controller(result.definition)


def pull_request_controller() -> Controller:
    return load(PR_YAML)


def probe_controller(root: Path) -> Controller:
    return load(root / ".wfrun" / "controllers" / "probe.yaml")


def store_path(root: Path) -> Path:
    return root / ".wfrun" / "state" / "store.sqlite3"


def pr_spec(url: str, **over: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {"api_base_url": url, "repository": REPO_NAME, "number": 7,
                            "expected_head_sha": HEAD}
    spec.update(over)
    return spec


class Harness:
    def __init__(self, root: Path, controllers: Iterable[Controller], *,
                 executor: AgentStepExecutor | None = None,
                 config: ManagerConfig | None = None, clock: Any = None) -> None:
        self.root = root
        self.clock = clock or FakeClock()
        self.controllers = list(controllers)
        self.executor = executor
        self.config = config or ManagerConfig(lease_seconds=30.0, backoff_base=1.0)
        self.ws = Workspace(build_catalog("workflows", root, None), root, root / ".state")
        self.store = self._open()
        self.managers: list[ControllerManager] = []

    def _open(self) -> SqliteStore:
        return SqliteStore(store_path(self.root), clock=self.clock)

    def manager(self, **kw: Any) -> ControllerManager:
        children = ChildWorkflows(self.store, self.ws, self.ws.runs_dir, clock=self.clock,
                                  launcher=child_launcher(self.ws, self.store, self.executor))
        m = ControllerManager(self.store, self.controllers, clock=self.clock,
                              config=kw.pop("config", self.config), children=children, **kw)
        self.managers.append(m)
        return m

    def _enqueue_parent(self, controller: str, key: str) -> None:
        self.store.reconcile_queue.enqueue(controller, key)

    def reopen(self) -> SqliteStore:
        """What a new process sees: drop every manager, close, open the file again."""
        for m in self.managers:
            if m.children is not None:
                m.children.shutdown(grace=5)
        self.managers.clear()
        self.store.close()
        self.store = self._open()
        return self.store

    def close(self) -> None:
        for m in self.managers:
            m.stop(grace=2)
        self.managers.clear()
        self.store.close()

    # -- reading ----------------------------------------------------------------------
    def resource(self, controller: str, key: str) -> Resource:
        r = self.store.resources.get(controller, key)
        assert r is not None, f"no {controller}/{key}"
        return r

    def ready(self, controller: str, key: str) -> dict[str, Any] | None:
        for c in self.resource(controller, key).status.get("conditions") or []:
            if c["type"] == "Ready":
                return dict(c)
        return None

    def events(self, controller: str, key: str) -> list[str]:
        return [e.type for e in self.store.controller_events.read(controller=controller,
                                                                  key=key)]

    def run_ids(self) -> list[str]:
        runs = self.ws.runs_dir
        if not runs.exists():
            return []
        return sorted(p.name for p in runs.iterdir() if not p.name.startswith("."))

    # -- driving ----------------------------------------------------------------------
    def drain(self, manager: ControllerManager, until: Callable[[], bool], *,
              timeout: float = 15.0, step: float = 1.0) -> int:
        """Run passes; while nothing is ready and no child runs, move the fake clock
        by `step` so delayed wake-ups come due. Returns the number of passes."""
        passes, end = 0, time.monotonic() + timeout
        while True:
            passes += manager.run_until_idle()
            if until():
                return passes
            if time.monotonic() > end:
                rows = self.store.reconcile_queue.list()
                raise AssertionError(f"did not converge in {timeout}s; queue: {rows}")
            children = manager.children
            if children is None or not children.busy:
                self.clock.advance(step)
            time.sleep(0.01)


def run_driver(root: Path, *args: str, env: dict[str, str] | None = None,
               timeout: float = 40) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(DRIVER), str(root), *args],
                          capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})})


def start_driver(root: Path, *args: str, env: dict[str, str] | None = None
                 ) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, str(DRIVER), str(root), *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, **(env or {})})


def wait_for(predicate: Callable[[], bool], timeout: float = DEADLINE, what: str = "") -> None:
    wait_until(predicate, timeout=timeout, interval=0.02, what=what or str(predicate))


def read_log(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
