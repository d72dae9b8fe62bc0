"""Runs outlive their session (issue 33, items 4 and 5).

When a session ends (its client exits), what it queued, parked or still runs is
handed over durably: a `wfrun host` continues it, `wfrun why` says so, and how it
ends reaches the session's next turn exactly once when the session is back. A run
that reaches an agent step under the host goes back to its session.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from harness import Scripted, Session, on_user, start_call, submit_steps
from waiting import wait_until

from runner.host._daemon import StandaloneHost
from runner.host.runtime._launches import explain
from runner.host.runtime._local import store_path
from runner.launch._intents import AGENT_STEP_TYPE, DEFERRED_TURN_TYPE
from runner.store import SqliteStore
from runner.store._states import HANDED_OVER

pytestmark = pytest.mark.timeout(60)
Make = Callable[..., Session]
#: One shell step that runs until the test creates `release` in the project.
GATED_WF = """
    start: wait
    nodes:
      wait:
        action: {use_shell: true, shell: "while [ ! -e release ]; do sleep 0.1; done; echo done"}
"""
#: The gated step, then an agent step only the session can take.
GATED_AGENT_WF = """
    start: wait
    nodes:
      wait:
        action: {use_shell: true, shell: "while [ ! -e release ]; do sleep 0.1; done"}
      plan:
        agent:
          prompt: "Plan it."
          output: {type: object, required: [summary], properties: {summary: {type: string}}}
    edges: [{from: wait, to: plan}]
"""


class Host:
    """A real `StandaloneHost` of the project on a thread, on the session's store clock."""

    def __init__(self, s: Session) -> None:
        self.store = SqliteStore(store_path(s.ws), clock=s.store_clock)
        self.host = StandaloneHost(s.ws, self.store, poll=0.02)
        self.thread = threading.Thread(target=self.host.run, daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.host.stop()
        self.thread.join(timeout=30)
        self.store.close()


@pytest.fixture
def hosts() -> Iterator[list[Host]]:
    started: list[Host] = []
    yield started
    for h in started:
        h.stop()


def _run_id(s: Session) -> str:
    (run_id,) = [e.details["runId"] for e in s.tool_results() if e.details.get("queued")]
    return str(run_id)


def _turn_texts(model: Scripted) -> list[str]:
    return [v.last_user_text for v in model.views if v.last_tool_reply is None]


def test_a_running_run_is_handed_over_on_shutdown_and_its_outcome_heard_once_on_resume(
        session: Make, hosts: list[Host]) -> None:
    s = session(Scripted(on_user("go", start_call("gated", None))),
                workflows={"gated": GATED_WF})
    s.host.quiet = lambda: None  # a one-shot client that stops waiting for a long run
    s.host.prompt("go")  # the turn settles: the run starts and waits at its gate
    run_id = _run_id(s)
    wait_until(lambda: s.launch(run_id).status == "running", what="the run to start")
    s.shutdown("client exit")  # `claude -p` / `pi -p` exit with the run still going
    record = s.launch(run_id)
    assert (record.status, record.park_mode) == ("parked", "auto")
    assert record.affinity_runner_id == HANDED_OVER
    reasons = " ".join(explain(s.ws, s.store, run_id)["reasons"])
    assert "handed it over" in reasons
    assert "wfrun host" in reasons
    hosts.append(Host(s))
    wait_until(lambda: s.launch(run_id).status == "running", what="the host to take it")
    (s.root / "release").touch()
    wait_until(lambda: s.launch(run_id).status == "done", what="the run to finish")
    # The session is back (`--resume`): the outcome is its next turn, once.
    model = Scripted(on_user("anything new?", lambda _v: "ok"))
    again = s.restart(model)
    again.settle()
    texts = [t for t in _turn_texts(model) if run_id in t]
    assert len(texts) == 1, texts
    assert texts[0].startswith(f"Workflow gated completed (run {run_id})")
    again.host.prompt("anything new?")
    again.settle()
    assert len([t for t in _turn_texts(model) if run_id in t]) == 1
    assert [m.details["runId"] for m in again.messages()] == [run_id]


def test_a_queued_launch_of_an_ended_session_runs_under_the_host(
        session: Make, hosts: list[Host]) -> None:
    # A plain MCP client queues a start and exits before any boundary.
    s = session(Scripted(), workflows={"gated": GATED_WF})
    reply = s.controller.on_tool_call("c1", "workflow", {"action": "start",
                                                          "workflow": "gated"})
    run_id = reply.details["runId"]
    hosts.append(Host(s))
    wait_until(lambda: hosts[0].host.idle.is_set(), what="the host to go idle")
    assert s.launch(run_id).status == "queued"  # a live session's launch is its own
    s.shutdown("stdin closed")
    assert s.launch(run_id).affinity_runner_id == HANDED_OVER
    (s.root / "release").touch()
    wait_until(lambda: s.launch(run_id).status == "done", what="the host to run it")
    assert s.store.launches.find_session_reservation(s.session_id) is None
    pending = s.store.turn_intents.list_eligible(s.session_id)
    assert [i.run_id for i in pending] == [run_id]  # kept for the session's next turn


def test_an_agent_step_under_the_host_goes_back_to_the_session(
        session: Make, hosts: list[Host]) -> None:
    s = session(Scripted(), workflows={"gated": GATED_AGENT_WF})
    reply = s.controller.on_tool_call("c1", "workflow", {"action": "start",
                                                          "workflow": "gated"})
    run_id = reply.details["runId"]
    s.shutdown("stdin closed")
    (s.root / "release").touch()
    hosts.append(Host(s))
    wait_until(lambda: s.launch(run_id).status == "parked", timeout=30,
               what="the host to park the run at its agent step")
    record = s.launch(run_id)
    assert (record.park_mode, record.affinity_runner_id) == ("auto", None)
    wait_until(lambda: hosts[0].host.idle.is_set(), what="the host to go idle")
    assert s.launch(run_id).status == "parked"  # the host does not take it again
    model = Scripted(submit_steps())
    again = s.restart(model)  # the session is back: it resumes the run at its step
    again.settle()
    assert again.launch(run_id).status == "done"
    assert [m.details["kind"] for m in again.messages(AGENT_STEP_TYPE)] == ["resume"]
    assert again.messages(DEFERRED_TURN_TYPE) == []


def test_hand_over_is_idempotent_and_leaves_other_sessions_alone(
        session: Make, tmp_path: Path) -> None:
    s = session(Scripted(), workflows={"gated": GATED_WF})
    reply: Any = s.controller.on_tool_call("c1", "workflow", {"action": "start",
                                                               "workflow": "gated"})
    run_id = reply.details["runId"]
    assert [r.run_id for r in s.store.launches.hand_over(s.session_id)] == [run_id]
    assert s.store.launches.hand_over(s.session_id) == []
    assert s.store.launches.hand_over("another-session") == []
    events = [e.type for e in s.store.run_events.read(run_id=run_id)]
    assert events.count("launch.handed_over") == 1


