"""The `project` fixture for the crash tests (helpers live in crashkit.py)."""

from __future__ import annotations

import contextlib
import os
import signal
import textwrap
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from crashkit import BROKEN, GATE, WORKFLOW, Project


@pytest.fixture
def project(tmp_path: Path) -> Iterator[Project]:
    if not Path("/proc/self/environ").exists():
        pytest.skip("needs Linux /proc")
    root = tmp_path / "proj"
    (root / ".wfrun" / "workflows").mkdir(parents=True)
    for name, text in (("crash", WORKFLOW), ("gate", GATE), ("broken", BROKEN)):
        (root / ".wfrun" / "workflows" / f"{name}.yaml").write_text(textwrap.dedent(text))
    proj = Project(root, uuid.uuid4().hex)
    yield proj
    for pgid in set(proj.tagged().values()):  # never leave a sleeping orphan behind
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, signal.SIGKILL)

