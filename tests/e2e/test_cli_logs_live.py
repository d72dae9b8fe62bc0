"""`wfrun logs RUN --follow` streams a running step's output live, through the real CLI.

A shell step prints a line and then waits on a file the test creates: the follower must
print that line before the test releases the step (so it can only have come from the
live log), then the rest, and exit 0 when the run completes. A secret the step prints
in two writes (the second only after a release file appears) is masked both in the
live file in the bundle and in what `logs --follow` prints.
"""

# ruff: noqa: E501  (workflows embedded as YAML keep their long lines)
from __future__ import annotations

import json
import os
import re
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from waiting import LineReader, wait_until

SECRET = "tok-ABCD-9f"


class Project:
    def __init__(self, root: Path) -> None:
        self.root = root
        (root / ".wfrun" / "workflows").mkdir(parents=True)

    def workflow(self, name: str, text: str) -> None:
        (self.root / ".wfrun" / "workflows" / f"{name}.yaml").write_text(textwrap.dedent(text))

    def argv(self, *args: str) -> list[str]:
        return [sys.executable, "-m", "runner", "--project", str(self.root), *args]

    @property
    def runs(self) -> Path:
        return self.root / ".wfrun" / "runs"

    def run_id(self, prefix: str) -> str | None:
        if not self.runs.exists():
            return None
        return next((p.name for p in sorted(self.runs.iterdir())
                     if p.name.startswith(prefix + "-")), None)


@pytest.fixture
def project(tmp_path: Path) -> Project:
    return Project(tmp_path / "proj")


def _live_file(project: Project, run_id: str) -> Path | None:
    found = sorted((project.runs / run_id / "logs").glob("talk.*.stdout")) \
        if (project.runs / run_id / "logs").exists() else []
    return found[0] if found else None


@pytest.mark.timeout(120)
def test_follow_prints_a_running_steps_output_before_it_ends_with_secrets_masked(
        project: Project) -> None:
    gate = project.root / "gate"
    gate.mkdir()
    # 'tok-AB' then, after the first release, 'CD-9f': the secret in two separate writes.
    project.workflow("live", f"""\
        secrets: [TOKEN]
        start: talk
        nodes:
          talk:
            action:
              shell: [sh, -c, 'echo first-line; printf tok-AB; while [ ! -e {gate}/one ]; do sleep 0.1; done; printf "CD-9f\\n"; echo mid-line; while [ ! -e {gate}/two ]; do sleep 0.1; done; echo last-line']
        """)
    runner = subprocess.Popen(project.argv("run", "live", "-q", "--secret", f"TOKEN={SECRET}"),
                              cwd=project.root, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    follower: subprocess.Popen[str] | None = None
    try:
        run_id = wait_until(lambda: project.run_id("live"), what="the run bundle")
        follower = subprocess.Popen(project.argv("logs", run_id, "--follow"),
                                    cwd=project.root, text=True, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE)
        assert follower.stdout is not None
        assert follower.stderr is not None
        out = LineReader(follower.stdout)
        err = LineReader(follower.stderr)
        # The step is still blocked on gate/one: this line can only come from the live log.
        assert out.wait_for(r"^first-line$")
        assert err.wait_for(r"^--- talk stdout \(attempt \w+, running\) ---$")
        live = _live_file(project, run_id)
        assert live is not None
        assert stat.S_IMODE(os.stat(live).st_mode) == 0o600
        assert stat.S_IMODE(os.stat(live.parent).st_mode) == 0o700
        # The secret's first half waits unflushed: it might be the start of the secret.
        assert live.read_text() == "first-line\n"
        (gate / "one").touch()
        assert out.wait_for(r"^mid-line$")
        text = live.read_text()
        assert text == "first-line\n***\nmid-line\n"
        assert "tok-AB" not in text
        assert SECRET not in text
        # A plain `logs` of the running step shows what it printed so far (no "has no
        # logs"): its live log, masked, with a header that says it is still running.
        now = subprocess.run(project.argv("logs", run_id, "talk"), cwd=project.root,
                             capture_output=True, text=True, timeout=60, check=False)
        assert now.returncode == 0, now.stderr
        assert now.stdout == "first-line\n***\nmid-line\n"
        assert re.search(rf"^--- talk stdout \(attempt \w+, running; `wfrun logs {run_id} "
                         r"talk --follow` goes on\) ---$", now.stderr, re.M), now.stderr
        assert "has no logs" not in now.stderr
        as_json = json.loads(subprocess.run(project.argv("logs", run_id, "talk", "--json"),
                                            cwd=project.root, capture_output=True, text=True,
                                            timeout=60, check=True).stdout)
        assert as_json["logs"] == []
        assert [(c["stream"], c["text"]) for c in as_json["running"]] == [
            ("stdout", "first-line\n***\nmid-line\n")]
        (gate / "two").touch()
        rest = out.rest()
        assert rest == ["last-line"]
        assert follower.wait(timeout=60) == 0  # the run completed
        assert runner.wait(timeout=60) == 0
        shown = out.lines
        assert shown == ["first-line", "***", "mid-line", "last-line"]
        assert not any("tok-AB" in line or "CD-9f" in line for line in shown)
        # The durable record is the node_log event: the live file is gone, and a plain
        # `logs` shows the same masked output.
        assert _live_file(project, run_id) is None
        plain = subprocess.run(project.argv("logs", run_id, "talk", "--stdout"),
                               cwd=project.root, capture_output=True, text=True, timeout=60,
                               check=False)
        assert plain.returncode == 0, plain.stderr
        assert plain.stdout == "first-line\n***\nmid-line\nlast-line\n"
    finally:
        for proc in (runner, follower):
            if proc is not None and proc.poll() is None:
                proc.kill()
            if proc is not None:
                proc.wait(timeout=30)
        if follower is not None:
            for pipe in (follower.stdout, follower.stderr):
                if pipe is not None:
                    pipe.close()


# A command agent that says it is working (stderr), waits for a release file, then submits.
AGENT_PY = """\
import json, os, pathlib, sys, time
sys.stdin.read()
print("agent-working", file=sys.stderr, flush=True)
while not pathlib.Path(sys.argv[1]).exists():
    time.sleep(0.02)
print("agent-done", file=sys.stderr, flush=True)
print(json.dumps({"answer": 42}))
"""


@pytest.mark.timeout(120)
def test_follow_streams_a_command_agents_stderr_while_its_turn_runs(project: Project) -> None:
    release = project.root / "release"
    (project.root / "agent.py").write_text(AGENT_PY)
    project.workflow("ask", """\
        start: ask
        nodes:
          ask:
            agent:
              prompt: "Answer."
              output: {type: object}
        """)
    agent = f"command:{sys.executable} {project.root / 'agent.py'} {release}"
    runner = subprocess.Popen(project.argv("run", "ask", "-q", "--agent", agent),
                              cwd=project.root, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    follower: subprocess.Popen[str] | None = None
    try:
        run_id = wait_until(lambda: project.run_id("ask"), what="the run bundle")
        follower = subprocess.Popen(project.argv("logs", run_id, "ask", "--follow", "--stderr"),
                                    cwd=project.root, text=True, stdout=subprocess.PIPE,
                                    stderr=subprocess.DEVNULL)
        assert follower.stdout is not None
        out = LineReader(follower.stdout)
        assert out.wait_for(r"^agent-working$")  # the agent is still waiting for `release`
        release.touch()
        assert out.rest() == ["agent-done"]
        assert follower.wait(timeout=60) == 0
        assert runner.wait(timeout=60) == 0
        assert not list((project.runs / run_id / "logs").iterdir())  # recorded, then removed
    finally:
        for proc in (runner, follower):
            if proc is not None and proc.poll() is None:
                proc.kill()
            if proc is not None:
                proc.wait(timeout=30)
        if follower is not None and follower.stdout is not None:
            follower.stdout.close()
