"""A run longer than `claude -p` waits (issue 33, items 4 and 6), through the real CLI.

`claude -p` starts a workflow whose one step runs until the test opens its gate:
the Stop hook answers within seconds (it does not wait for the run), Claude exits,
and the session hands the run over. A `wfrun host` continues it; once the gate
opens the run completes, and `claude -p --resume` hears the outcome exactly once.
"""

from __future__ import annotations

import json
import subprocess
from typing import Any

import pytest
from claude_kit import TOOL, WFRUN, ClaudeWorld, answer
from fakes.anthropic_server import Body, Reply, last_turn_results, last_user_text
from fakes.seed_workflow import RUN_RE
from waiting import wait_until

from runner.clock import CLOCK_FILE_ENV

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]  # real Claude Code processes
GATED = """
    start: wait
    nodes:
      wait:
        action: {use_shell: true, shell: "while [ ! -e release ]; do sleep 0.1; done"}
"""


def test_a_long_run_outlives_claude_p_and_is_heard_once_on_resume(cc: ClaudeWorld) -> None:
    cc.write("gated", GATED)
    seen: dict[str, Any] = {"outcomes": []}

    def model(body: Body) -> Reply:
        results = last_turn_results(body)
        text = last_user_text(body)
        if "run" in seen:
            # Claude Code places a hook's context in a message of its own (SessionStart's
            # before the prompt), so the whole conversation is what the model heard.
            heard = json.dumps(body.get("messages")).count(f"completed (run {seen['run']})")
            seen["outcomes"].append(heard)
        if results:
            found = RUN_RE.search(results[0])
            if found and "run" not in seen:
                seen["run"] = found.group("run")
            return answer("Queued.")
        if "please start" in text:
            return answer("", (TOOL, {"action": "start", "workflow": "gated"}))
        return answer("Nothing new.")

    cc.script(model)
    first = cc.run("please start the gated workflow")
    assert first.code == 0, first.stderr[-2000:]
    run_id = seen["run"]
    record = cc.launch(run_id)
    assert record.status == "parked", record  # Claude exited: parked and handed over
    host = subprocess.Popen([str(WFRUN), "--project", str(cc.project), "host",
                             "--no-controllers"], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True,
                            env={**cc.env(), CLOCK_FILE_ENV: cc.clock.path})
    try:
        wait_until(lambda: cc.launch(run_id).status == "running", timeout=60,
                   what="wfrun host to take the handed-over run")
        (cc.project / "release").touch()
        wait_until(lambda: cc.launch(run_id).status == "done", timeout=60,
                   what="the run to complete under wfrun host")
    finally:
        host.terminate()
        host.communicate(timeout=30)
    assert set(seen["outcomes"]) <= {0}  # nothing heard while the session was away
    again = cc.run("any news?", resume=first.session_id)
    assert again.code == 0, again.stderr[-2000:]
    assert seen["outcomes"][-1] == 1, seen["outcomes"]  # heard in the resumed session
    third = cc.run("and now?", resume=first.session_id)
    assert third.code == 0, third.stderr[-2000:]
    assert seen["outcomes"][-1] == 1, seen["outcomes"]  # exactly once, never again
