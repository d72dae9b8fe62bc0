"""The `project` fixture for the standalone host tests (helpers live in standalonekit.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from standalonekit import THREE, TINY, Project


@pytest.fixture
def project(tmp_path: Path) -> Iterator[Project]:
    if not Path("/proc/self/stat").exists():
        pytest.skip("needs Linux /proc")
    proj = Project(tmp_path / "proj")
    proj.workflow("three", THREE)
    proj.workflow("tiny", TINY)
    (proj.root / "b.hold.1").touch()  # b's first attempt waits until released
    yield proj
    proj.stop_all()
