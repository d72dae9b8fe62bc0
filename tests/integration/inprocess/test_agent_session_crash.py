"""A process driving `runner.AgentSession` is SIGKILLed after the follow-up's append and
before the intent is resolved; the reopened session hands the model that follow-up
exactly once and sends nothing again."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from runner import AgentSession
from runner.clock import CLOCK_FILE_ENV, FileClock
from runner.launch._intents import DEFERRED_TURN_TYPE
from runner.store import SqliteStore

pytestmark = pytest.mark.timeout(60)
WF = """
    start: plan
    nodes:
      plan:
        agent:
          prompt: "Plan it."
"""
DRIVER = """
import sys
from pathlib import Path
from runner import AgentSession
from runner.clock import clock_from_env

root = Path(sys.argv[1])
session = AgentSession.open(root, session_id="s1", store_clock=clock_from_env())
session.begin_turn("please start review")
reply = session.call_tool({"action": "start", "workflow": "review"})
(root / ".wfrun" / "workflows" / "review.yaml").write_text(sys.argv[2])  # inside the turn
print(reply.details["runId"], flush=True)
session.end_turn()  # activation fails, the follow-up is appended, then SIGKILL
print("not killed", flush=True)
"""


def test_agent_session_sigkill_after_follow_up_append_hands_it_over_exactly_once(
        tmp_path: Path) -> None:
    root = tmp_path / "proj"
    wf = root / ".wfrun" / "workflows" / "review.yaml"
    wf.parent.mkdir(parents=True)
    wf.write_text(textwrap.dedent(WF).lstrip())
    clock = FileClock.create(tmp_path / "clock")
    done = subprocess.run(
        [sys.executable, "-c", DRIVER, str(root), textwrap.dedent(WF).replace("Plan", "Do")],
        capture_output=True, text=True, timeout=30,
        env={**os.environ, CLOCK_FILE_ENV: clock.path, "WFRUN_CRASH_AT": "after_session_append"})
    assert done.returncode == -9, done.stderr
    run_id = done.stdout.split()[0]
    assert "not killed" not in done.stdout

    session = AgentSession.open(root, session_id="s1", store_clock=clock)
    try:
        (follow,) = session.messages(DEFERRED_TURN_TYPE)
        assert follow.details is not None
        intent_id = follow.details["turnIntentId"]
        text = session.next_input()  # the model never saw it before the kill
        assert text == follow.content
        assert text.startswith(f"Workflow review failed to start (run {run_id}): ")
        clock.advance(31)  # the dead process's delivery claim expires
        with session.turn() as extra:
            assert extra == ""
        assert session.next_input() is None  # resolved from the log, not sent again
        assert len(session.messages(DEFERRED_TURN_TYPE)) == 1
    finally:
        session.close()
    with SqliteStore(root / ".wfrun" / "state" / "store.sqlite3") as store:
        intent = store.turn_intents.get(intent_id)
        assert intent is not None
        assert intent.resolution == "fallback"
        assert not intent.pending
