"""Issue 40: live tokens in the web view. While an `openai` agent step streams its
answer from the fake OpenAI server, the run page shows the text so far, masked, and
it grows as more arrives; when the step ends the live box goes and the recorded
log takes over. Headless Chromium against a real `wfrun ui`, the run made by a real
`wfrun run --agent openai`; the fake holds its answer at points the test releases
(no clock in the test)."""

from __future__ import annotations

import os
import subprocess
import threading
from typing import Any

import pytest
from fakes.openai_server import Answer, FakeOpenAI, Messages, Reply, call, contract_of, tool_results
from fakes.openai_server import openai_server as openai_server
from test_ui_console import with_cookie
from uikit import Project, ui_server
from waiting import DEADLINE, wait_until

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

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
FIRST = f"Thinking with {SECRET} now!\n"  # 36 characters: six 6-character pieces
SECOND = "And a second line.\n"


def live_text(page: Any) -> str:
    text: str = page.text_content("#live-text") or ""
    return text


def test_the_run_page_shows_streamed_tokens_as_they_come_masked(
        project: Project, page: Any, openai_server: FakeOpenAI) -> None:
    assert len(FIRST) == 36
    project.workflow("live", WORKFLOW)
    midway, hold = threading.Event(), threading.Event()

    def script(messages: Messages) -> Reply:
        if tool_results(messages):
            return Answer(text="Submitted.")
        contract = contract_of(messages)
        assert contract is not None
        return Answer(text=FIRST + SECOND, midway=midway, midway_at=len(FIRST), hold=hold,
                      calls=[call("submit", contract, output={"said": "done"})])

    openai_server.script = script
    env = {k: v for k, v in os.environ.items() if not k.startswith("WFRUN_")}
    env.update({"WFRUN_OPENAI_API_KEY": "sk-test", "TOKEN": SECRET})
    runner = subprocess.Popen(
        project.argv("--openai-base-url", openai_server.base_url, "--openai-model", "m",
                     "run", "live", "--agent", "openai", "-q"),
        cwd=project.root, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        text=True)
    try:
        logs = project.runs_dir
        live = wait_until(lambda: sorted(logs.glob("*/logs/talk.*.stdout")),
                          what="the step's live log")[0]
        run_id = live.parent.parent.name
        with ui_server(project) as ui:
            with_cookie(page, ui)
            page.goto(f"{ui.base}/runs/{run_id}")
            page.wait_for_selector("#live-box:not([hidden])")
            # The whole first line, its newline too: the tokens come in chunks, and a
            # poll between "now!" and its newline saw the line without its end (a flake).
            page.wait_for_function(
                "() => document.getElementById('live-text').textContent"
                ".includes('now!\\n')")
            # Held midway: only the first line can have come, its secret masked.
            assert live_text(page) == "Thinking with *** now!\n"
            assert page.text_content("#live-node") == "talk"
            assert runner.poll() is None
            midway.set()  # the rest of the text streams; the answer then holds again
            page.wait_for_function(
                "() => document.getElementById('live-text').textContent"
                ".includes('second line.\\n')")
            assert live_text(page) == "Thinking with *** now!\nAnd a second line.\n"
            assert runner.poll() is None  # still the same step, shown as it grew
            hold.set()
            assert runner.wait(timeout=DEADLINE) == 0
            page.wait_for_selector('#run-status[data-status="completed"]')
            page.wait_for_selector("#live-box", state="hidden")
            assert SECRET not in page.content()
            assert page.js_errors == []
    finally:
        midway.set()
        hold.set()
        if runner.poll() is None:
            runner.kill()
        runner.wait(timeout=30)
        if runner.stderr is not None:
            runner.stderr.close()
