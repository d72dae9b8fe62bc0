"""A run longer than `AgentSession.run` waits (issue 33, item 4).

The framework's run queues a workflow whose one step runs until the test opens its
gate; `run` returns once its settle wait runs out and the `with` block closes the
session, which hands the run over. A real `wfrun host` process continues it; once
the gate opens it completes, and the session, opened again, hears the outcome
exactly once.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from waiting import wait_until

from runner import AgentSession, InputError
from runner.store import SqliteStore

pytestmark = pytest.mark.timeout(180)
GATED = """
    start: wait
    nodes:
      wait:
        action: {use_shell: true, shell: "while [ ! -e release ]; do sleep 0.1; done"}
"""


def _status(root: Path, run_id: str) -> str:
    store = SqliteStore(root / ".wfrun" / "state" / "store.sqlite3")
    try:
        record = store.launches.get(run_id)
    finally:
        store.close()
    assert record is not None
    return record.status


def test_a_long_run_outlives_agent_session_run_and_is_heard_once_on_reopen(
        tmp_path: Path) -> None:
    root = tmp_path / "proj"
    (root / ".wfrun" / "workflows").mkdir(parents=True)
    (root / ".wfrun" / "workflows" / "gated.yaml").write_text(textwrap.dedent(GATED).lstrip())
    queued: list[str] = []
    with AgentSession.open(root, session_id="s1", settle_timeout=2) as session:
        def agent_run(text: str) -> str:
            if "please start" in text:
                reply = session.call_tool({"action": "start", "workflow": "gated"})
                queued.append(reply.details["runId"])
            return "ok"

        session.run(agent_run, "please start the gated workflow")
    (run_id,) = queued
    assert _status(root, run_id) == "parked"  # handed over when the session closed
    host = subprocess.Popen([sys.executable, "-m", "runner", "--project", str(root), "host",
                             "--no-controllers"], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    try:
        wait_until(lambda: _status(root, run_id) == "running", timeout=60,
                   what="wfrun host to take the handed-over run")
        (root / "release").touch()
        wait_until(lambda: _status(root, run_id) == "done", timeout=60,
                   what="the run to complete under wfrun host")
    finally:
        host.terminate()
        host.communicate(timeout=30)
    with AgentSession.open(root, session_id="s1") as session:
        told = session.next_input()
        assert told is not None
        assert told.startswith(f"Workflow gated completed (run {run_id})")
        assert session.next_input() is None
        with session.turn(told):  # the model hears it
            pass
    with AgentSession.open(root, session_id="s1") as session:
        assert session.next_input() is None  # exactly once


@pytest.mark.parametrize("wait", [0, -1.5])
def test_a_settle_wait_that_is_not_positive_is_refused(tmp_path: Path, wait: float) -> None:
    (tmp_path / ".wfrun" / "workflows").mkdir(parents=True)
    with pytest.raises(InputError, match="settle_timeout must be a positive number"):
        AgentSession.open(tmp_path, settle_timeout=wait)
