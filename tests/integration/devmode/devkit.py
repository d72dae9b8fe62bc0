"""Helpers for the dev mode tests: `DevMode` on a real project folder, real saves.

The catalog leaves out the built-in folder, so edits others make to the shipped
definitions while these tests run cannot add batches or lines to what they see.
"""

from __future__ import annotations

import os
import re
import textwrap
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from waiting import DEADLINE

from runner.compiler import Catalog, Compiler, build_catalog
from runner.host.runtime._devmode import DevMode
from runner.host.runtime._foreground import run_in_store
from runner.host.runtime._local import Workspace

DIGEST = re.compile(r"sha256:[0-9a-f]{64}")


def project_catalog(root: Path) -> Callable[[], Catalog]:
    def build() -> Catalog:
        catalog = build_catalog("workflows", root, None)
        catalog.folders["builtin"] = None
        catalog.entries = [e for e in catalog.entries if e.origin != "builtin"]
        return catalog
    return build


class Dev:
    """A DevMode whose emitted lines are collected with the time they arrived."""

    def __init__(self, root: Path, **options: Any) -> None:
        self.root = root
        self.lines: list[tuple[float, str, str]] = []
        self._cond = threading.Condition()
        if options.get("run") is not None:
            options.setdefault("launch", self.launch)
        self.dev = DevMode(project_catalog(root), self.emit, project_root=root, **options)

    def launch(self, name: str, value: Any) -> Any:
        """`wfrun dev --run`'s launcher: a launch row in the project's store, run here."""
        ws = Workspace(project_catalog(self.root)(), self.root, self.root / ".wfrun" / "state")
        return run_in_store(ws, name, value)

    def emit(self, kind: str, text: str) -> None:
        with self._cond:
            self.lines.append((time.monotonic(), kind, text))
            self._cond.notify_all()

    @property
    def folder(self) -> Path:
        return self.root / ".wfrun" / "workflows"

    def save(self, name: str, text: str) -> Path:
        """An editor's save: write a temp file, then rename it over the target."""
        path = self.folder / name
        tmp = path.with_name(f".{path.name}.swp")
        tmp.write_text(textwrap.dedent(text))
        os.replace(tmp, path)
        return path

    def mark(self) -> int:
        with self._cond:
            return len(self.lines)

    def since(self, mark: int) -> list[tuple[str, str]]:
        with self._cond:
            return [(k, t) for _, k, t in self.lines[mark:]]

    def wait_line(self, mark: int, match: Callable[[str, str], bool],
                  timeout: float = DEADLINE) -> tuple[str, str]:
        end = time.monotonic() + timeout
        with self._cond:
            while True:
                for _, kind, text in self.lines[mark:]:
                    if match(kind, text):
                        return kind, text
                left = end - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"no matching line within {timeout} s; got "
                                         f"{self.since_unlocked(mark)}")
                self._cond.wait(left)

    def since_unlocked(self, mark: int) -> list[tuple[str, str]]:
        return [(k, t) for _, k, t in self.lines[mark:]]

    def settle(self, quiet: float = 0.3) -> int:
        """Wait until no batch ran for `quiet` seconds; returns the batch count."""
        last = self.dev.state.batches
        end = time.monotonic() + quiet
        while time.monotonic() < end:
            time.sleep(0.02)
            if self.dev.state.batches != last:
                last = self.dev.state.batches
                end = time.monotonic() + quiet
        return last


def digest_of(path: Path, root: Path) -> str:
    result = Compiler(project_catalog(root)()).compile_path(path)
    assert result.valid, result.diagnostics
    assert result.definition is not None
    return result.definition.digest
