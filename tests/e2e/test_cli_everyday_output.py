"""Issue 13 item 8: output that reads well in a terminal and in CI: full values in pipes,
honest per-run host lines, -q, no banner from a refused host, the invalid-definition exit
code, one-line progress for multi-line scripts, mermaid's start node, misnamed folders."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from everyday import Project
from waiting import DEADLINE, wait_for_line

from runner.errors import DefinitionInvalid


@pytest.fixture
def project(tmp_path: Path) -> Project:
    p = Project(tmp_path / "proj")
    p.workflow("ok", "start: a\nnodes:\n  a: {compute: '{{ 1 }}'}\n")
    p.workflow("stops", "start: a\nnodes:\n  a: {fail: 'stopped on purpose'}\n")
    p.workflow("script", """\
        start: s
        nodes:
          s:
            action:
              use_shell: true
              shell: |
                echo first line of a long script
                echo second
                exit 7
        """)
    return p


def test_a_run_table_in_a_pipe_keeps_full_values(project: Project) -> None:
    project.workflow("a-rather-long-workflow-name-for-the-table", "start: a\nnodes:\n"
                     "  a: {compute: '{{ 1 }}'}\n")
    project.wfrun("run", "a-rather-long-workflow-name-for-the-table", "-q")
    out = project.wfrun("runs")  # COLUMNS=80, stdout a pipe
    [line] = [ln for ln in out.stdout.splitlines()[1:] if ln.strip()]
    run_id = project.runs()[0]["run_id"]
    assert line.split()[:3] == [run_id, "a-rather-long-workflow-name-for-the-table",
                                "completed"]
    assert "…" not in out.stdout
    assert len(line) > 80


def test_host_prints_one_line_per_run_and_counts_failures_as_failures(
        project: Project) -> None:
    ok = project.json("start", "ok", "--json")["run_id"]
    stops = project.json("start", "stops", "--json")["run_id"]
    broken = project.json("start", "ok", "--json")["run_id"]
    project.workflow("ok", "start: a\nnodes:\n  a: {nope: 1}\n")  # invalid by activation
    done = project.wfrun("host", "--once", "--no-controllers")
    assert done.returncode == 0, done.stderr
    lines = done.stderr.splitlines()
    assert f"wfrun host: run {stops} failed: stopped on purpose" in lines
    assert any(ln.startswith(f"wfrun host: run {broken} failed to start: ") for ln in lines)
    assert any(ln.startswith(f"wfrun host: run {ok} failed to start: ") for ln in lines)
    assert lines[-1] == "wfrun host: 3 run(s) started: 1 failed, 2 failed to start"
    assert "finished or parked" not in done.stderr


def test_host_quiet_prints_nothing_and_run_quiet_prints_only_data(project: Project) -> None:
    project.json("start", "ok", "--json")
    host = project.wfrun("host", "--once", "--no-controllers", "-q")
    assert host.returncode == 0
    assert host.stderr == ""
    ran = project.wfrun("run", "ok", "-q")
    assert ran.returncode == 0
    assert (ran.stdout.strip(), ran.stderr) == ("1", "")
    failed = project.wfrun("run", "stops", "-q")
    assert failed.returncode == 1
    assert "stopped on purpose" in failed.stderr  # a failure still says so
    queued = project.wfrun("start", "ok", "-q")
    assert queued.stdout.strip().startswith("ok-")
    assert queued.stderr == ""


def test_a_refused_second_host_prints_no_banner(project: Project) -> None:
    first = subprocess.Popen(project.argv("host", "--no-controllers"), cwd=project.root,
                             stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    try:
        assert first.stderr is not None
        wait_for_line(first.stderr, "wfrun host running for", timeout=DEADLINE)
        second = project.wfrun("host", "--no-controllers")
        assert second.returncode != 0
        assert "wfrun host running for" not in second.stderr
        assert second.stderr.startswith("wfrun: error: ")
        assert len(second.stderr.strip().splitlines()) == 1
    finally:
        first.terminate()
        first.wait(timeout=DEADLINE)


def test_run_of_an_invalid_workflow_exits_with_the_definition_invalid_code(
        project: Project) -> None:
    project.workflow("bad", "start: a\nnodes:\n  a: {agnet: hi}\n")
    done = project.wfrun("run", "bad")
    assert done.returncode == DefinitionInvalid.exit_code
    assert done.returncode == project.wfrun("validate", "bad").returncode
    assert "unknown key 'agnet'" in done.stderr
    assert "[workflow_invalid]" in done.stderr
    assert not project.runs_dir.exists() or not [
        p for p in project.runs_dir.iterdir() if not p.name.startswith(".")]


def test_progress_shows_a_multi_line_script_as_its_first_line(project: Project) -> None:
    done = project.wfrun("run", "script", "--json")
    assert done.returncode == 1
    message = json.loads(done.stdout)["error"]["message"]
    assert message.startswith("'echo first line of a long script …' exited with 7")
    assert "echo second" not in done.stderr
    assert "'echo first line of a long script …' exited with 7" in done.stderr


def test_mermaid_and_dot_mark_the_start_node(project: Project) -> None:
    mermaid = project.wfrun("graph", "ok", "--format", "mermaid").stdout.splitlines()
    assert mermaid[1].strip() == "start_marker(((start))) --> n_a"
    dot = project.wfrun("graph", "ok", "--format", "dot").stdout
    assert 'start_marker -> "a";' in dot


def test_a_misnamed_workflow_folder_is_warned(project: Project) -> None:
    (project.root / ".wfrun" / "workflow").mkdir()
    (project.root / ".wfrun" / "workflow" / "lost.yaml").write_text("start: a\nnodes: {}\n")
    done = project.wfrun("validate")
    assert done.returncode == 0  # a warning, not an error
    assert "warning[unknown-folder]: wfrun does not read .wfrun/workflow/" in done.stderr
    assert "did you mean .wfrun/workflows/?" in done.stderr
    listed = project.wfrun("list")
    assert "unknown-folder" in listed.stderr


def test_cancel_prints_json_when_asked(project: Project) -> None:
    queued = project.json("start", "ok", "--json")["run_id"]
    out = project.json("cancel", queued, "--json")
    assert out == {"run_id": queued, "status": "cancelled", "requested": False}
