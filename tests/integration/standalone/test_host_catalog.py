"""`wfrun host` follows the workflow files: a workflow written after the host started
runs by name (the catalog is the files, not a copy taken at start-up)."""

from __future__ import annotations

import signal

import pytest
from standalonekit import Project, wait_for

pytestmark = pytest.mark.slow
COMPUTE = """
    start: only
    nodes:
      only: {compute: "{{ {'ok': true} }}"}
"""


def test_the_host_runs_a_workflow_written_after_it_started(project: Project) -> None:
    project.workflow("first", COMPUTE)
    host = project.host("--no-controllers")
    project.wait_host_ready(host)
    [first] = project.queue("first", [{}])
    wait_for("the first run", lambda: project.launch_status(first) == "done")
    project.workflow("later", COMPUTE)  # the host has read its catalog by now
    [later] = project.queue("later", [{}])
    wait_for("the later run to end", lambda: project.launch_status(later) in ("done", "failed"))
    record = project.launch(later)
    assert (record.status, record.error_code) == ("done", None), record.error_message
    host.send_signal(signal.SIGTERM)
    assert host.wait(timeout=10) == 0
