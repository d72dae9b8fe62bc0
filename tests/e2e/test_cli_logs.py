"""`wfrun logs` and the failure summary of `wfrun show`, through the real CLI.

The CI example is taken from docs/secrets.md as written and run on a small project
whose test fails: `wfrun run` exits 1 and `wfrun logs` shows pytest's report.
"""

# ruff: noqa: E501  (workflows embedded as YAML keep their long lines)
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from waiting import LineReader, stop_process, wait_until

REPO = Path(__file__).resolve().parents[2]
VENV_BIN = str(Path(sys.executable).parent)


def ci_example() -> str:
    text = (REPO / "docs" / "secrets.md").read_text()
    m = re.search(r"<!-- ci-example -->\n```yaml\n(.*?)```\n<!-- /ci-example -->", text,
                  re.DOTALL)
    assert m is not None, "docs/secrets.md lost its CI example"
    return m.group(1)


class Project:
    def __init__(self, root: Path) -> None:
        self.root = root
        (root / ".wfrun" / "workflows").mkdir(parents=True)

    def workflow(self, name: str, text: str) -> None:
        (self.root / ".wfrun" / "workflows" / f"{name}.yaml").write_text(textwrap.dedent(text))

    def argv(self, *args: str) -> list[str]:
        return [sys.executable, "-m", "runner", "--project", str(self.root), *args]

    def env(self) -> dict[str, str]:
        # The example calls `ruff` and `python3` from PATH: this venv's, which has pytest.
        return {**os.environ, "PATH": VENV_BIN + os.pathsep + os.environ.get("PATH", "")}

    def wfrun(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(self.argv(*args), capture_output=True, text=True, timeout=120,
                              cwd=self.root, env=self.env(), check=False)

    def run_id(self, prefix: str) -> str:
        return next(p.name for p in sorted((self.root / ".wfrun" / "runs").iterdir())
                    if p.name.startswith(prefix + "-"))


@pytest.fixture
def project(tmp_path: Path) -> Project:
    return Project(tmp_path / "proj")


@pytest.mark.timeout(180)
def test_the_documented_ci_example_fails_the_run_and_logs_show_the_failing_test(
        project: Project) -> None:
    project.workflow("ci", ci_example())
    (project.root / "app.py").write_text("def add(a: int, b: int) -> int:\n    return a + b\n")
    (project.root / "tests").mkdir()
    (project.root / "tests" / "test_app.py").write_text(textwrap.dedent("""\
        from app import add


        def test_adds() -> None:
            assert add(1, 2) == 4


        def test_adds_zero() -> None:
            assert add(0, 2) == 2
        """))
    (project.root / "conftest.py").write_text("")  # puts the project root on sys.path
    done = project.wfrun("run", "ci")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "failed" in done.stderr
    assert "Traceback" not in done.stderr
    run_id = project.run_id("ci")

    logs = project.wfrun("logs", run_id, "test", "--stdout")
    assert logs.returncode == 0, logs.stderr
    assert "FAILED tests/test_app.py::test_adds" in logs.stdout
    assert "assert 3 == 4" in logs.stdout
    assert "1 failed, 1 passed" in logs.stdout
    assert "--- test stdout" in logs.stderr  # the header is not part of the data

    show = project.wfrun("show", run_id)
    assert show.returncode == 0, show.stderr
    assert "test stdout (last" in show.stdout
    assert "1 failed, 1 passed" in show.stdout
    assert f"wfrun logs {run_id} test" in show.stdout
    view = json.loads(project.wfrun("show", run_id, "--json").stdout)
    assert view["error"]["code"] == "tests_failed"
    assert view["failure"]["node"] == "test"
    assert any("1 failed, 1 passed" in line for line in view["failure"]["stdout_tail"])

    # The same project with the bug fixed passes, and lint's log is there too.
    (project.root / "tests" / "test_app.py").write_text(
        "from app import add\n\n\ndef test_adds() -> None:\n    assert add(1, 2) == 3\n")
    ok = project.wfrun("run", "ci", "--json")
    assert ok.returncode == 0, ok.stderr
    ok_id = json.loads(ok.stdout)["run_id"]
    assert json.loads(project.wfrun("show", ok_id, "--json").stdout)["failure"] is None
    lint = project.wfrun("logs", ok_id, "lint", "--json")
    (entry,) = json.loads(lint.stdout)["logs"]
    assert entry["exit_code"] == 0
    assert "All checks passed" in entry["stdout"]


def test_long_output_goes_to_artifacts_and_reads_back_whole(project: Project) -> None:
    project.workflow("big", """\
        start: big
        nodes:
          big:
            action: {shell: [sh, -c, 'i=0; while [ $i -lt 3000 ]; do echo "line $i"; i=$((i+1)); done; echo oops >&2; exit 2']}
        """)
    done = project.wfrun("run", "big", "--json")
    assert done.returncode == 1
    run_id = json.loads(done.stdout)["run_id"]
    trace = (project.root / ".wfrun" / "runs" / run_id / "trace.jsonl").read_text()
    (log,) = [json.loads(line) for line in trace.splitlines() if '"node_log"' in line]
    assert "$artifact" in log["payload"]["stdout"]
    out = project.wfrun("logs", run_id, "big", "--stdout")
    lines = out.stdout.splitlines()
    assert len(lines) == 3000
    assert (lines[0], lines[-1]) == ("line 0", "line 2999")
    assert project.wfrun("logs", run_id, "--stderr").stdout == "oops\n"


@pytest.mark.parametrize(("args", "code", "message"), [
    (("logs", "RUN", "--stdout", "--stderr"), 2, "--stdout and --stderr exclude each other"),
    (("logs", "nope-20260101T000000Z-00000000"), 3, "no run 'nope-20260101T000000Z-00000000'"),
    (("logs", "RUN", "ghost"), 3, "has no node 'ghost' that ran (nodes that ran: one)"),
])
def test_logs_errors_are_one_line(project: Project, args: tuple[str, ...], code: int,
                                  message: str) -> None:
    project.workflow("one", """\
        start: one
        nodes:
          one: {action: {shell: [echo, hi]}}
        """)
    assert project.wfrun("run", "one", "-q").returncode == 0
    run_id = project.run_id("one")
    done = project.wfrun(*(run_id if a == "RUN" else a for a in args))
    assert done.returncode == code, done.stderr
    assert "Traceback" not in done.stderr
    assert message in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr


def test_a_run_without_shell_steps_says_it_has_no_logs(project: Project) -> None:
    project.workflow("calc", "start: c\nnodes:\n  c: {compute: '{{ 1 }}'}\n")
    assert project.wfrun("run", "calc", "-q").returncode == 0
    done = project.wfrun("logs", project.run_id("calc"))
    assert done.returncode == 0
    assert done.stdout == ""
    assert "has no logs" in done.stderr


@pytest.mark.timeout(120)
def test_follow_prints_each_step_as_it_finishes_until_the_run_ends(project: Project) -> None:
    gate = project.root / "gate"
    gate.mkdir()
    project.workflow("steps", f"""\
        start: first
        nodes:
          first: {{action: {{shell: [sh, -c, 'echo first-done']}}}}
          second:
            action: {{shell: [sh, -c, 'while [ ! -e {gate}/go ]; do sleep 0.1; done; echo second-done; exit 5']}}
        edges: [{{from: first, to: second}}]
        """)
    runner = subprocess.Popen(project.argv("run", "steps", "-q"), cwd=project.root,
                              env=project.env(), stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    follower: subprocess.Popen[str] | None = None
    try:
        wait_until(lambda: (project.root / ".wfrun" / "runs").exists() and any(
            p.name.startswith("steps-") for p in (project.root / ".wfrun" / "runs").iterdir()),
            what="the run bundle")
        run_id = project.run_id("steps")
        follower = subprocess.Popen(project.argv("logs", run_id, "--follow", "--stdout"),
                                    cwd=project.root, env=project.env(), text=True,
                                    stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        assert follower.stdout is not None
        lines = LineReader(follower.stdout)
        assert lines.wait_for(r"^first-done$")
        (gate / "go").touch()  # only now may the second step finish
        assert lines.wait_for(r"^second-done$")
        assert follower.wait(timeout=60) == 1  # the run failed: exit like `wfrun run`
    finally:
        for proc in (runner, follower):
            if proc is not None and proc.poll() is None:
                proc.kill()
            if proc is not None:
                proc.wait(timeout=30)
        if follower is not None and follower.stdout is not None:
            follower.stdout.close()


@pytest.mark.timeout(180)
def test_follow_of_a_queued_run_waits_for_it_to_start(project: Project) -> None:
    """`logs --follow` of a launch still in the queue said the run was not found; it
    waits for a host to start it, then follows it (and ends when the run does)."""
    project.workflow("later", "start: a\nnodes:\n  a: {action: {shell: [echo, from-the-host]}}\n")
    run_id = json.loads(project.wfrun("start", "later", "--json").stdout)["run_id"]
    follower = subprocess.Popen(project.argv("logs", run_id, "--follow"), cwd=project.root,
                                env=project.env(), text=True, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE)
    try:
        assert follower.stdout is not None
        assert follower.stderr is not None
        errors = LineReader(follower.stderr)
        assert errors.wait_for(rf"run {run_id} is queued; waiting for it to start")
        assert project.wfrun("host", "--once").returncode == 0
        assert LineReader(follower.stdout).wait_for(r"^from-the-host$")
        assert follower.wait(timeout=60) == 0
    finally:
        stop_process(follower)


def test_follow_of_a_launch_cancelled_in_the_queue_says_so(project: Project) -> None:
    project.workflow("later", "start: a\nnodes:\n  a: {action: {shell: [echo, never]}}\n")
    run_id = json.loads(project.wfrun("start", "later", "--json").stdout)["run_id"]
    assert project.wfrun("cancel", run_id).returncode == 0
    done = project.wfrun("logs", run_id, "--follow")
    assert done.returncode == 1
    assert done.stderr.strip() == f"wfrun: run {run_id} ended cancelled before it started; " \
        "it has no logs"
