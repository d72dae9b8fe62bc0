"""Live tokens (issue 40): an `openai` agent step's answer, streamed by the fake
OpenAI-compatible server, is shown by `wfrun logs --follow` while the step runs, with
a secret masked even though the stream splits it across chunks."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from fakes.openai_server import (
    Answer,
    FakeOpenAI,
    Messages,
    Reply,
    call,
    contract_of,
    tool_results,
)
from fakes.openai_server import openai_server as openai_server
from waiting import DEADLINE, LineReader, wait_until

SECRET = "tok-ABCD-9f-live"
WORKFLOW = """\
secrets: [TOKEN]
start: talk
nodes:
  talk:
    agent:
      prompt: "Say something"
      output: {type: object, required: [said], properties: {said: {type: string}}}
"""


def live_files(project: Path) -> list[Path]:
    return sorted((project / ".wfrun" / "runs").glob("*/logs/talk.*.stdout"))


@pytest.mark.timeout(120)
def test_follow_shows_streamed_tokens_before_the_step_ends_masked(
        tmp_path: Path, openai_server: FakeOpenAI) -> None:
    project = tmp_path
    (project / ".wfrun" / "workflows").mkdir(parents=True)
    (project / ".wfrun" / "workflows" / "live.yaml").write_text(WORKFLOW)
    hold = threading.Event()
    # The fake sends text in 6-character pieces: the secret arrives split.
    text = f"Thinking with {SECRET} right now.\nA second line.\n"

    def script(messages: Messages) -> Reply:
        if tool_results(messages):
            return Answer(text="Submitted.")
        contract = contract_of(messages)
        assert contract is not None
        return Answer(text=text, hold=hold,
                      calls=[call("submit", contract, output={"said": "done"})])

    openai_server.script = script
    env = {k: v for k, v in os.environ.items() if not k.startswith("WFRUN_")}
    env.update({"WFRUN_OPENAI_API_KEY": "sk-test", "TOKEN": SECRET})
    argv = [sys.executable, "-m", "runner", "--project", str(project)]
    runner = subprocess.Popen([*argv, "--openai-base-url", openai_server.base_url,
                               "--openai-model", "m", "run", "live", "--agent", "openai", "-q"],
                              cwd=project, env=env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, text=True)
    follower: subprocess.Popen[str] | None = None
    try:
        live = wait_until(lambda: live_files(project), what="the step's live log")[0]
        run_id = live.parent.parent.name
        follower = subprocess.Popen([*argv, "logs", run_id, "talk", "--follow"], cwd=project,
                                    env=env, text=True, stdout=subprocess.PIPE,
                                    stderr=subprocess.DEVNULL)
        assert follower.stdout is not None
        out = LineReader(follower.stdout)
        # The answer waits on `hold`: these lines can only come from the live stream.
        assert out.wait_for(r"^Thinking with \*\*\* right now\.$")
        assert out.wait_for(r"^A second line\.$")
        assert SECRET not in live.read_text()
        assert "tok-AB" not in live.read_text()
        assert runner.poll() is None  # the step still runs
        hold.set()
        assert follower.wait(timeout=DEADLINE) == 0
        assert runner.wait(timeout=DEADLINE) == 0
        assert not any(SECRET in line for line in out.lines)
        assert live_files(project) == []  # the trace keeps the outcome, not the text
    finally:
        hold.set()
        for proc in (runner, follower):
            if proc is not None and proc.poll() is None:
                proc.kill()
            if proc is not None:
                proc.wait(timeout=30)
        if follower is not None and follower.stdout is not None:
            follower.stdout.close()
        if runner.stderr is not None:
            runner.stderr.close()
