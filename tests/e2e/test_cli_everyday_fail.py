"""Issue 13 item 2: a `fail` node ends the run failed on purpose (exit 1, status says so)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from everyday import Project

CHECK = """\
    input: {type: object, required: [command], properties: {command: {type: string}}}
    start: run
    nodes:
      run:
        action: {shell: [sh, -c, "{{ input.command }}"]}
      ok: {notify: {kind: final, message: "passed"}}
      report:
        fail: {message: "check failed: {{ results.run.error.message }}", code: check_failed}
    edges:
      - {from: run, switch: {on: $result.outcome, cases: {ok: ok, failed: report}}}
    """


@pytest.fixture
def project(tmp_path: Path) -> Project:
    p = Project(tmp_path / "proj")
    p.workflow("check", CHECK)
    return p


def test_fail_node_ends_the_run_failed_with_its_message_and_code(project: Project) -> None:
    done = project.wfrun("run", "check", "-i", "command=echo out; exit 3", "--json")
    assert done.returncode == 1, done.stderr
    outcome = json.loads(done.stdout)
    assert outcome["status"] == "failed"
    assert outcome["error"]["code"] == "check_failed"
    assert outcome["error"]["node"] == "report"
    assert outcome["error"]["message"].startswith("check failed: 'sh -c echo out; exit 3' "
                                                  "exited with 3")
    run_id = outcome["run_id"]
    status = project.json("status", run_id, "--json")
    assert status["status"] == "failed"
    assert "check failed" in json.dumps(status["error"])
    shown = project.json("show", run_id, "--json")
    assert shown["status"] == "failed"
    assert [e["node"] for e in shown["timeline"]] == ["run", "report"]
    assert project.runs("--status", "failed")[0]["run_id"] == run_id


def test_passing_branch_still_completes(project: Project) -> None:
    done = project.wfrun("run", "check", "-i", "command=true")
    assert done.returncode == 0, done.stderr
    assert "completed" in done.stderr


def test_fail_node_in_the_readme_example_is_valid_and_plain_string_form_works(
        project: Project) -> None:
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    block = readme.split("# .wfrun/workflows/check.yaml\n", 1)[1].split("```", 1)[0]
    assert "fail:" in block
    (project.root / ".wfrun" / "workflows" / "readme_check.yaml").write_text(block)
    done = project.wfrun("validate", "readme_check")
    assert done.returncode == 0, done.stderr
    project.workflow("short", """\
        start: stop
        nodes:
          stop: {fail: "stopped on purpose"}
        """)
    done = project.wfrun("run", "short", "--json")
    assert done.returncode == 1
    error = json.loads(done.stdout)["error"]
    assert error == {"code": "workflow_failed", "message": "stopped on purpose", "node": "stop"}


@pytest.mark.parametrize(("body", "code"), [
    ("stop: {fail: {message: x}}\n  after: {notify: done}\nedges:\n  - {from: stop, to: after}",
     "fail-has-edge"),
    ("stop: {fail: {message: x, code: 'not a code'}}", "invalid-value"),
    ("stop: {fail: {code: c}}", "missing-key"),
])
def test_bad_fail_nodes_are_diagnostics(project: Project, body: str, code: str) -> None:
    project.workflow("bad", f"start: stop\nnodes:\n  {body}\n")
    done = project.wfrun("validate", "bad", "--format", "json")
    assert done.returncode == 1
    codes = [d["code"] for f in json.loads(done.stdout)["files"] for d in f["diagnostics"]]
    assert code in codes
