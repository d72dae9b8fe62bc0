"""Issue 13 item 4: agent setup errors fail the step at once with the real cause, and an
option that would be ignored (`start --agent` without `--wait`) is refused."""

from __future__ import annotations

import json
import socket
import sys
from pathlib import Path

import pytest
from everyday import Project

ASK = """\
    start: think
    nodes:
      think:
        agent: {prompt: "Say hi", output: {type: object}, reminders: 2}
    """


@pytest.fixture
def project(tmp_path: Path) -> Project:
    p = Project(tmp_path / "proj")
    p.workflow("ask", ASK)
    return p


def _error(project: Project, *args: str, env: dict[str, str] | None = None) -> dict[str, str]:
    done = project.wfrun("run", "ask", "--json", "-q", *args, env=env)
    assert done.returncode == 1, done.stderr
    error: dict[str, str] = json.loads(done.stdout)["error"]
    return error


def _prompts(project: Project, run_id: str) -> int:
    trace = (project.runs_dir / run_id / "trace.jsonl").read_text().splitlines()
    return sum(1 for line in trace if json.loads(line)["type"] == "agent_prompt_sent")


def test_a_missing_agent_program_fails_the_step_at_once(project: Project) -> None:
    done = project.wfrun("run", "ask", "--json", "-q", "--agent", "command:no-such-agent-x1")
    assert done.returncode == 1
    out = json.loads(done.stdout)
    assert out["error"]["code"] == "agent_unavailable"
    assert "agent command not found: no-such-agent-x1" in out["error"]["message"]
    assert "turns without an accepted submission" not in out["error"]["message"]
    assert _prompts(project, out["run_id"]) == 1  # no reminders for a setup error


def test_an_agent_that_exits_non_zero_reports_its_status_and_stderr(project: Project) -> None:
    agent = project.file("agent.py", "import sys\nsys.stdin.read()\n"
                         "print('noise', file=sys.stderr)\n"
                         "print('fatal: no API key configured', file=sys.stderr)\n"
                         "sys.exit(3)\n")
    error = _error(project, "--agent", f"command:{sys.executable} {agent}")
    assert error["code"] == "agent_unavailable"
    assert "exited with status 3" in error["message"]
    assert "fatal: no API key configured" in error["message"]


def test_a_refused_openai_connection_names_the_endpoint(project: Project) -> None:
    with socket.socket() as s:  # a port nothing listens on once this closes
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {"WFRUN_OPENAI_BASE_URL": f"http://127.0.0.1:{port}/v1",
           "WFRUN_OPENAI_MODEL": "m", "WFRUN_OPENAI_API_KEY": "sk-test"}
    error = _error(project, "--agent", "openai", env=env)
    assert error["code"] == "agent_unavailable"
    assert f"cannot connect to http://127.0.0.1:{port}/v1" in error["message"]


def test_start_with_an_agent_but_no_wait_is_refused(project: Project) -> None:
    done = project.wfrun("start", "ask", "--agent", "command:true")
    assert done.returncode == 2
    assert done.stderr.strip() == (
        "wfrun: error: --agent applies only with --wait (the run happens here); without it, "
        "start the host with the agent: wfrun host --agent command:true")
    assert project.wfrun("status", "--json").stdout.count("run_id") == 0
    # From the environment it is a default for whichever command runs the agent: allowed.
    queued = project.wfrun("start", "ask", env={"WFRUN_AGENT": "command:true"})
    assert queued.returncode == 0, queued.stderr
