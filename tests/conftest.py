from __future__ import annotations

import os
from pathlib import Path

import pytest
from pgcluster import pg_cluster  # noqa: F401  (one throwaway Postgres cluster per session and worker)

REPO = Path(__file__).resolve().parent.parent
FIXTURES = REPO / "fixtures"


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No test sees the developer's WFRUN_* settings or user folder."""
    for key in list(os.environ):
        if key.startswith("WFRUN_"):
            monkeypatch.delenv(key)
    monkeypatch.setenv("WFRUN_HOME", str(tmp_path / "_wfrun_home"))
