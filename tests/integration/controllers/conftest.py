"""Fixtures for the controller runtime tests (helpers live in ctlkit.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from ctlkit import Harness, make_project, probe_controller, pull_request_controller
from fakes.github_server import github as github

from runner.engine.executors._scripted import ScriptedExecutor


@pytest.fixture
def project(tmp_path: Path) -> Path:
    return make_project(tmp_path / "proj")


@pytest.fixture
def harness(project: Path) -> Iterator[Harness]:
    """The pull-request and probe controllers on one store; the scripted agent answers
    pr-repair's step with an output that insists on a merge."""
    executor = ScriptedExecutor.from_file(project / "pr-repair.script.yaml")
    h = Harness(project, [pull_request_controller(), probe_controller(project)],
                executor=executor)
    yield h
    h.close()
