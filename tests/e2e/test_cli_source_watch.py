"""Source drift of queued launches end to end (issue 9): `wfrun status` and `wfrun why`
show an edit made between `wfrun start` and activation, `wfrun host` logs it while
the launch waits, and the hash check at activation still decides (source_changed)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from waiting import DEADLINE, wait_until

pytestmark = pytest.mark.timeout(60)
GREET = """\
    start: hello
    nodes:
      hello: {compute: "{{ 'hi' }}"}
"""
# Holds the host's only slot until the test removes the file `hold`.
BLOCK = """\
    start: wait
    nodes:
      wait:
        action: {use_shell: true, shell: "while [ -e hold ]; do sleep 0.1; done"}
"""
FILE = ".wfrun/workflows/greet.yaml"


class Project:
    def __init__(self, root: Path) -> None:
        self.root = root
        (root / ".wfrun" / "workflows").mkdir(parents=True)
        self.workflow("greet", GREET)
        self.hosts: list[subprocess.Popen[str]] = []

    def workflow(self, name: str, text: str) -> Path:
        path = self.root / ".wfrun" / "workflows" / f"{name}.yaml"
        tmp = path.with_name(f".{path.name}.swp")  # an editor's save: write, rename over
        tmp.write_text(textwrap.dedent(text))
        os.replace(tmp, path)
        return path

    def argv(self, *args: str) -> list[str]:
        return [sys.executable, "-m", "runner", "--project", str(self.root), *args]

    def wfrun(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(self.argv(*args), capture_output=True, text=True, timeout=30,
                              cwd=self.root, env={**os.environ, "COLUMNS": "200"})

    def json(self, *args: str) -> Any:
        done = self.wfrun(*args)
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)

    def start(self, name: str) -> str:
        done = self.wfrun("start", name, "--json")
        assert done.returncode == 0, done.stderr
        run_id: str = json.loads(done.stdout)["run_id"]
        return run_id

    def host(self, *args: str) -> subprocess.Popen[str]:
        err = open(self.root / f"host{len(self.hosts)}.err", "w")  # noqa: SIM115
        try:
            proc = subprocess.Popen(self.argv("host", *args), stdout=subprocess.DEVNULL,
                                    stderr=err, text=True, cwd=self.root,
                                    env={**os.environ, "COLUMNS": "200"})
        finally:
            err.close()
        self.hosts.append(proc)
        return proc

    def stderr_of(self, proc: subprocess.Popen[str]) -> str:
        return (self.root / f"host{self.hosts.index(proc)}.err").read_text()

    def launch(self, run_id: str) -> dict[str, Any]:
        launch: dict[str, Any] = self.json("status", "--json", run_id)["launch"]
        return launch


@pytest.fixture
def project(tmp_path: Path) -> Iterator[Project]:
    proj = Project(tmp_path / "proj")
    yield proj
    for proc in proj.hosts:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=DEADLINE)


def test_an_edit_after_start_shows_in_status_and_why_and_activation_refuses_it(
        project: Project) -> None:
    run_id = project.start("greet")
    view = project.json("status", "--json", run_id)
    assert view["source"] == {"changed": False}
    assert project.wfrun("status", run_id).stdout.strip() == f"{run_id}  queued"

    project.workflow("greet", GREET.replace("'hi'", "'hello'"))

    view = project.json("status", "--json", run_id)
    assert view["status"] == "queued"
    assert view["source"] == {"changed": True, "file": FILE,
                              "detail": "edited since it was queued"}
    assert project.wfrun("status", run_id).stdout.strip() == (
        f"{run_id}  queued  (source changed: {FILE} edited since it was queued)")
    listing = project.json("status", "--json")["launches"]
    assert [(r["run_id"], r["source"]["changed"]) for r in listing] == [(run_id, True)]
    why = project.wfrun("why", run_id)
    assert why.returncode == 0, why.stderr
    assert (f"the workflow source changed since it was queued ({FILE}); activation will "
            "fail with source_changed unless you restore it") in why.stdout.splitlines()
    facts = project.json("why", "--json", run_id)
    assert facts["source"]["file"] == FILE

    done = project.wfrun("host", "--once", "--no-controllers")  # the authority decides

    assert done.returncode == 0, done.stderr
    launch = project.json("status", "--json", run_id)
    assert (launch["status"], launch["error"]["code"]) == ("failed", "source_changed")
    assert launch["source"] is None  # past activation: drift is no longer news
    assert not (project.root / ".wfrun" / "runs" / run_id).exists()


def test_a_removed_file_and_a_comment_only_edit_are_told_apart(project: Project) -> None:
    run_id = project.start("greet")
    path = project.root / FILE
    original = path.read_text()

    path.write_text(original + "# a comment only\n")  # same definition, same digest
    why = project.wfrun("why", run_id).stdout.splitlines()
    assert (f"the workflow source changed since it was queued ({FILE}) but its definition "
            "did not (same digest): activation goes ahead") in why
    assert project.json("status", "--json", run_id)["source"]["changed"] is True

    path.unlink()
    view = project.json("status", "--json", run_id)
    assert view["source"] == {"changed": True, "file": FILE, "detail": "removed"}
    why = project.wfrun("why", run_id).stdout.splitlines()
    assert (f"the workflow source changed since it was queued ({FILE}, removed); activation "
            "will fail unless you restore it") in why
    assert any(line.startswith("its workflow cannot be compiled now: ") for line in why)

    path.write_text(original)  # restored byte for byte: nothing to report
    assert project.json("status", "--json", run_id)["source"] == {"changed": False}
    assert not any("source changed" in line for line in project.wfrun("why", run_id).stdout
                   .splitlines())
    done = project.wfrun("host", "--once", "--no-controllers")
    assert done.returncode == 0, done.stderr
    assert project.launch(run_id)["status"] == "done"


def test_the_host_logs_a_waiting_launchs_drift_once(project: Project) -> None:
    project.workflow("block", BLOCK)
    (project.root / "hold").touch()
    blocker = project.start("block")
    host = project.host("--no-controllers", "--max-runs", "1")
    wait_until(lambda: project.launch(blocker)["status"] == "running",
               what="the blocker to take the host's only slot")
    run_id = project.start("greet")  # waits in the queue: the slot is taken

    project.workflow("greet", GREET.replace("'hi'", "'hello'"))

    line = re.compile(rf"^wfrun host: queued launch {run_id}: its workflow source {FILE} was "
                      r"edited since it was queued; activation re-checks it and refuses a "
                      r"changed definition \(source_changed\)$", re.M)
    wait_until(lambda: line.search(project.stderr_of(host)),
               what=lambda: f"the drift line; host stderr: {project.stderr_of(host)!r}")
    project.workflow("greet", GREET.replace("'hi'", "'hey'"))  # another edit, same news
    (project.root / "hold").unlink()
    wait_until(lambda: project.launch(run_id)["status"] == "failed",
               what="the host to activate (and refuse) the edited launch")
    launch = project.json("status", "--json", run_id)
    assert launch["error"]["code"] == "source_changed"
    host.send_signal(signal.SIGTERM)
    assert host.wait(timeout=DEADLINE) == 0
    assert len(line.findall(project.stderr_of(host))) == 1
    assert "Traceback" not in project.stderr_of(host)
