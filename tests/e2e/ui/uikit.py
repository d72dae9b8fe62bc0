"""Shared pieces of the UI tests: a temp project driven by the real CLI, a real
`wfrun ui` subprocess on a free port, and headless Debian Chromium via Playwright."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from waiting import wait_for_line, wait_until

REPO = Path(__file__).resolve().parents[3]
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


class Project:
    def __init__(self, root: Path) -> None:
        self.root = root
        (root / ".wfrun" / "workflows").mkdir(parents=True)

    def workflow(self, name: str, text: str) -> None:
        (self.root / ".wfrun" / "workflows" / f"{name}.yaml").write_text(textwrap.dedent(text))

    def argv(self, *args: str) -> list[str]:
        return [sys.executable, "-m", "runner", "--project", str(self.root), *args]

    def wfrun(self, *args: str, timeout: float = 30,
              env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(self.argv(*args), capture_output=True, text=True,
                              timeout=timeout, cwd=self.root, env={**os.environ, **(env or {})})

    def json(self, *args: str) -> Any:
        done = self.wfrun(*args)
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)

    @property
    def runs_dir(self) -> Path:
        return self.root / ".wfrun" / "runs"

    def run_ids(self) -> list[str]:
        if not self.runs_dir.exists():
            return []
        return sorted(p.name for p in self.runs_dir.iterdir() if not p.name.startswith("."))

    def trace(self, run_id: str) -> list[dict[str, Any]]:
        path = self.runs_dir / run_id / "trace.jsonl"
        if not path.exists():
            return []
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


class UiServer:
    """`wfrun ui` in a subprocess; `url` is the address it printed."""

    def __init__(self, project: Project, *args: str, env: dict[str, str] | None = None) -> None:
        self.proc = subprocess.Popen(project.argv("ui", *args), cwd=project.root,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                     env={**os.environ, **(env or {})})
        assert self.proc.stdout is not None
        line = wait_for_line(self.proc.stdout, r"^wfrun ui: http://")
        found = re.search(r"(http://\S+)", line)
        assert found is not None
        self.url = found[1]
        self.base = self.url.split("?", 1)[0].rstrip("/")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        for stream in (self.proc.stdout, self.proc.stderr):
            if stream is not None:
                stream.close()


@contextmanager
def ui_server(project: Project, *args: str,
              env: dict[str, str] | None = None) -> Iterator[UiServer]:
    server = UiServer(project, *args, env=env)
    try:
        yield server
    finally:
        server.stop()


def need_chromium() -> str:
    if CHROMIUM is None:
        pytest.fail("chromium is not installed: run ./scripts/setup (it installs Debian's "
                    "chromium for these tests)")
    return CHROMIUM


def wait_for_node(project: Project, run_id: str, node: str, event: str = "node_started") -> None:
    wait_until(lambda: any(e.get("type") == event and e.get("node") == node
                           for e in project.trace(run_id)),
               what=f"{event} of {node} in {run_id}")
