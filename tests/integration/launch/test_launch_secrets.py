"""Secrets on the launch path: a queued writeOnly value stays in its process's memory
(and a resume there gets it back), and a resume that lacks a secret parks the launch
instead of failing it."""

# ruff: noqa: E501  (workflows embedded as YAML keep their long lines)
from __future__ import annotations

import hashlib
import subprocess
import threading
from pathlib import Path
from typing import Any

import pytest
from launch_it_kit import Project
from waiting import wait_until

from runner.compiler import build_catalog
from runner.engine import RunControl
from runner.engine._secrets import SecretSource
from runner.host.runtime._local import Workspace
from runner.launch import EngineOptions, LaunchCoordinator
from runner.store import SqliteStore
from runner.testing import build_coordinator

PASSWORD = "queued-password-canary-81f2"
TOKEN = "resume-token-canary-4c9e"
PW = f"""\
    input: {{type: object, properties: {{password: {{type: string, writeOnly: true}}}}}}
    start: use
    nodes:
      use:
        action:
          shell: [sh, -c, '[ "$(printf %s "$P" | sha256sum | cut -c1-64)" = "{hashlib.sha256(PASSWORD.encode()).hexdigest()}" ]']
          env: {{P: "{{{{ input.password }}}}"}}
"""
GATED = """\
    secrets: [DEPLOY_TOKEN]
    start: wait
    nodes:
      wait:
        action:
          shell: [sh, -c, 'touch "$G/started"; while [ ! -e "$G/go" ]; do sleep 0.1; done; echo "$T"']
          env: {T: "{{ secrets.DEPLOY_TOKEN }}", G: "{{ project.root }}"}
"""


def _coordinator(project: Project, store: SqliteStore, runner_id: str,
                 source: SecretSource) -> LaunchCoordinator:
    root = project.root
    ws = Workspace(build_catalog("workflows", root, None), root, root / ".wfrun")
    return build_coordinator(ws, store, "plain", runner=runner_id,
                             options=EngineOptions(project_root=root, secret_source=source))


def _file_bytes(path: Path) -> bytes:
    # Read by another process: closing a descriptor of the store file here would drop
    # the POSIX locks SQLite holds on it.
    if not path.exists():
        return b""
    return subprocess.run(["cat", str(path)], capture_output=True, timeout=30,
                          check=True).stdout


@pytest.fixture
def project(tmp_path: Path) -> Project:
    proj = Project(tmp_path / "proj")
    proj.write_workflow("pw", PW)
    proj.write_workflow("gated", GATED)
    return proj


def test_a_queued_write_only_value_is_in_memory_only(project: Project) -> None:
    with SqliteStore(project.store_path) as store:
        here = _coordinator(project, store, "queuer", SecretSource())
        record = here.prepare("pw", {"password": PASSWORD})
        assert record.input() == {"password": "***"}
        for suffix in ("", "-wal"):
            assert PASSWORD.encode() not in _file_bytes(
                project.store_path.with_name("store.sqlite3" + suffix))

        # Another process (a host) cannot know the value: a clear activation failure.
        other = _coordinator(project, store, "host", SecretSource())
        claimed = other.claim(record.run_id)
        assert other.execute(claimed) is None
        row = store.launches.get(record.run_id)
        assert row is not None
        assert row.status == "failed"
        assert row.error_code == "input_invalid"
        assert "input field 'password' is secret (writeOnly) and was kept nowhere" in str(
            row.error_message)

        # The process that queued it runs it with the real value (the command checks it).
        again = here.prepare("pw", {"password": PASSWORD})
        outcome = here.execute(here.claim(again.run_id))
        assert outcome is not None
        assert outcome.status == "completed", outcome.error
    for path in project.root.rglob("*"):
        if path.is_file():
            assert PASSWORD.encode() not in _file_bytes(path), path


def test_a_resume_without_its_secret_parks_the_launch_and_loses_nothing(
        project: Project) -> None:
    with SqliteStore(project.store_path) as store:
        with_secret = SecretSource(given={"DEPLOY_TOKEN": TOKEN})
        first = _coordinator(project, store, "first", with_secret)
        record = first.prepare("gated", {})
        control = RunControl()
        box: dict[str, Any] = {}
        worker = threading.Thread(target=lambda: box.update(
            out=first.execute(first.claim(record.run_id), control=control)))
        worker.start()
        wait_until(lambda: (project.root / "started").exists(), what="the node to start")
        control.park("test")
        worker.join(timeout=30)
        assert box["out"].parked
        assert store.launches.get(record.run_id).status == "parked"  # type: ignore[union-attr]

        bare = _coordinator(project, store, "bare", SecretSource())
        assert bare.execute(bare.claim(record.run_id)) is None
        row = store.launches.get(record.run_id)
        assert row is not None
        assert row.status == "parked"  # not failed: it can still be resumed

        (project.root / "go").touch()
        later = _coordinator(project, store, "later", with_secret)
        outcome = later.execute(later.claim(record.run_id))
        assert outcome is not None
        assert outcome.status == "completed", outcome.error
        assert store.launches.get(record.run_id).status == "done"  # type: ignore[union-attr]
    trace = (project.runs_dir / record.run_id / "trace.jsonl").read_text()
    assert '"stdout":"***\\n"' in trace
    assert TOKEN not in trace


PW_GATED = f"""\
    input: {{type: object, properties: {{password: {{type: string, writeOnly: true}}}}}}
    start: wait
    nodes:
      wait:
        action:
          shell: [sh, -c, 'touch "$G/started"; while [ ! -e "$G/go" ]; do sleep 0.1; done; [ "$(printf %s "$P" | sha256sum | cut -c1-64)" = "{hashlib.sha256(PASSWORD.encode()).hexdigest()}" ]']
          env: {{P: "{{{{ input.password }}}}", G: "{{{{ project.root }}}}"}}
"""


def test_a_parked_run_resumes_with_the_write_only_value_its_process_kept(
        project: Project) -> None:
    """The value the row holds as `***` comes back from the queuing process's memory
    on resume: its fenced engine's secret source carries it (engines.py)."""
    project.write_workflow("pw_gated", PW_GATED)
    with SqliteStore(project.store_path) as store:
        here = _coordinator(project, store, "here", SecretSource())
        record = here.prepare("pw_gated", {"password": PASSWORD})
        control = RunControl()
        box: dict[str, Any] = {}
        worker = threading.Thread(target=lambda: box.update(
            out=here.execute(here.claim(record.run_id), control=control)))
        worker.start()
        wait_until(lambda: (project.root / "started").exists(), what="the node to start")
        control.park("test")
        worker.join(timeout=30)
        assert box["out"].parked

        (project.root / "go").touch()
        outcome = here.execute(here.claim(record.run_id))  # the node runs again
        assert outcome is not None
        assert outcome.status == "completed", outcome.error
    for path in project.root.rglob("*"):
        if path.is_file():
            assert PASSWORD.encode() not in _file_bytes(path), path
