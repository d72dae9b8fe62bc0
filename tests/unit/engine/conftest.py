"""Shared helpers for engine tests: workflows written as YAML into tmp_path, real bundles."""

from __future__ import annotations

import json
import os
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from waiting import DEADLINE

from runner.clock import Clock, SystemClock
from runner.compiler import Compiler, WorkflowDefinition
from runner.engine import Engine
from runner.engine._bundleread import read_trace


@dataclass
class Env:
    """A temp project: workflow files in `root`, runs in `root/runs`."""

    root: Path

    @property
    def runs(self) -> Path:
        return self.root / "runs"

    def write(self, name: str, text: str) -> Path:
        path = self.root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
        return path

    def compile_file(self, path: Path) -> WorkflowDefinition:
        result = Compiler().compile_path(path)
        assert result.valid, [f"{d.code}: {d.message}" for d in result.errors]
        assert result.definition is not None
        return result.definition

    def workflow(self, text: str, name: str = "wf") -> WorkflowDefinition:
        return self.compile_file(self.write(f"{name}.yaml", text))

    def resolver(self, name: str = "wf") -> Callable[[dict[str, Any]], WorkflowDefinition]:
        path = self.root / f"{name}.yaml"
        return lambda _manifest: self.compile_file(path)

    def engine(self, clock: Clock | None = None, **kw: Any) -> Engine:
        return Engine(runs_dir=self.runs, clock=clock or SystemClock(), work_dir=self.root,
                      project_root=self.root, **kw)

    def trace(self, run_id: str) -> list[dict[str, Any]]:
        return read_trace(self.runs / run_id).events

    def types(self, run_id: str) -> list[str]:
        return [e["type"] for e in self.trace(run_id)]

    def events(self, run_id: str, kind: str) -> list[dict[str, Any]]:
        return [e for e in self.trace(run_id) if e["type"] == kind]

    def manifest(self, run_id: str) -> dict[str, Any]:
        value: dict[str, Any] = json.loads((self.runs / run_id / "manifest.json").read_text())
        return value

    def state_file(self, run_id: str) -> dict[str, Any]:
        value: dict[str, Any] = json.loads((self.runs / run_id / "state.json").read_text())
        return value

    def only_run(self) -> str:
        names = [n for n in os.listdir(self.runs) if not n.startswith(".")]
        assert len(names) == 1, names
        return names[0]

    @staticmethod
    def alive(pid: int) -> bool:
        """A process exists and is not a zombie (PID 1 here may not reap orphans)."""
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        try:
            with open(f"/proc/{pid}/stat") as fh:
                state = fh.read().rsplit(")", 1)[1].split()[0]
        except (FileNotFoundError, IndexError):
            return False
        return state not in ("Z", "X")

    @staticmethod
    def wait_for(predicate: Callable[[], bool], timeout: float = DEADLINE) -> bool:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if predicate():
                return True
            time.sleep(0.01)
        return predicate()


@pytest.fixture
def env(tmp_path: Path) -> Env:
    return Env(tmp_path)


@pytest.fixture
def when() -> Iterator[Callable[[Callable[[], bool], Callable[[], None]], None]]:
    """Call `fn` on a thread as soon as `predicate()` holds (polled for up to DEADLINE)."""
    threads: list[threading.Thread] = []
    stop = threading.Event()

    def schedule(predicate: Callable[[], bool], fn: Callable[[], None]) -> None:
        def watch() -> None:
            end = time.monotonic() + DEADLINE
            while not stop.is_set() and time.monotonic() < end:
                if predicate():
                    fn()
                    return
                time.sleep(0.01)

        t = threading.Thread(target=watch, daemon=True)
        threads.append(t)
        t.start()

    yield schedule
    stop.set()
    for t in threads:
        t.join(timeout=5)
