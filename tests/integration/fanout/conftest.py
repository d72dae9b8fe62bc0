"""The `project` fixture for the fan-out runs (fanoutkit.py), SQLite by default."""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest
from fanoutkit import Project, make


@pytest.fixture
def project(tmp_path: Path) -> Iterator[Project]:
    proj = make(tmp_path / "proj")
    yield proj
    stop(proj)


def stop(proj: Project) -> None:
    """Never leave a runner (or the items it started) behind a failed test."""
    (proj.root / "go").touch()
    for proc in proj.procs:
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate(timeout=30)
