"""The `project` fixture for the fan-out runs (fanoutkit.py), SQLite by default."""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest
from fanoutkit import Project, make
from pgcluster import PgCluster


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


@pytest.fixture
def pg_project(tmp_path: Path, pg_cluster: PgCluster) -> Iterator[Project]:
    """The same project with its store (and run bundles) in Postgres."""
    url = pg_cluster.create_schema(f"fanout_{secrets.token_hex(4)}")
    proj = make(tmp_path / "proj", store=url)
    yield proj
    stop(proj)
