"""`runner.AgentSession` driven by a plain Python loop (the frameworks: ../frameworks)."""

from __future__ import annotations

import asyncio
import json
import stat
import textwrap
import threading
from pathlib import Path

import pytest
from fakes.seed_workflow import AGENT_WF

from runner import AgentSession, InputError
from runner.engine._agent import CONTRACT_RE
from runner.launch._intents import AGENT_STEP_TYPE

pytestmark = pytest.mark.timeout(60)
START = {"action": "start", "workflow": "review", "input": {"task": "x"}}


@pytest.fixture
def root(tmp_path: Path) -> Path:
    folder = tmp_path / "proj" / ".wfrun" / "workflows"
    folder.mkdir(parents=True)
    (folder / "review.yaml").write_text(textwrap.dedent(AGENT_WF).lstrip())
    return tmp_path / "proj"


def submit_for(text: str) -> dict[str, object]:
    found = list(CONTRACT_RE.finditer(text))  # the newest contract is the current attempt
    assert found, text
    return {"action": "submit", "step": found[-1].group("step"),
            "attempt": found[-1].group("attempt"),
            "output": {"summary": "done"}}


def test_agent_session_nothing_starts_in_the_turn_and_the_step_is_the_next_input(
        root: Path) -> None:
    with AgentSession.open(root, session_id="s1") as session:
        assert session.tool["name"] == "workflow"
        prompt = session.begin_turn("please start review")
        assert prompt == "please start review"
        reply = session.call_tool(START)
        assert reply.content.startswith("Workflow review queued (run review-")
        run_id = reply.details["runId"]
        assert session.messages() == []  # queued only: the turn is still running
        assert session.status(run_id)["status"] == "queued"
        assert session.end_turn() is True  # the step asks for the next turn
        text = session.next_input()
        assert text is not None
        assert text.startswith("Plan x.")
        assert session.next_input() is None  # consumed
        with session.turn() as extra:
            assert extra == ""
            assert session.call_tool(submit_for(text)).is_error is False
        assert session.next_input() is None
        assert session.status(run_id)["status"] == "completed"


def test_agent_session_parallel_tool_calls_behave_as_if_sequential(root: Path) -> None:
    with AgentSession.open(root, session_id="s1") as session:
        session.begin_turn("go")
        barrier = threading.Barrier(3)
        replies = []

        def call() -> None:
            barrier.wait()
            replies.append(session.call_tool(START))

        threads = [threading.Thread(target=call) for _ in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        queued = [r for r in replies if not r.is_error]
        refused = [r for r in replies if r.is_error]
        assert len(queued) == 1
        assert len(refused) == 2
        run_id = queued[0].details["runId"]
        assert all(r.details["code"] == "activation_failed" and run_id in r.content
                   for r in refused)
        session.call_tool({"action": "cancel", "runId": run_id})
        session.end_turn()


def test_agent_session_async_loop_runs_every_follow_up_turn(root: Path) -> None:
    inputs: list[str] = []

    async def one_run(text: str) -> str:
        inputs.append(text)
        if text.startswith("please"):
            # Two calls gathered like a framework's parallel tool calls.
            first, second = await asyncio.gather(session.acall_tool(START),
                                                 session.acall_tool({"action": "status"}))
            # Either order is a sequential outcome; a torn mix of both is not.
            assert second.content in ("no workflow is queued or running in this session",
                                      f"Run {first.details['runId']}: queued")
            return first.content
        return (await session.acall_tool(submit_for(text))).content

    with AgentSession.open(root, session_id="s1") as session:
        results = asyncio.run(session.arun(one_run, "please start review"))
        assert len(results) == 2
        assert inputs[0] == "please start review"
        assert inputs[1].startswith("Plan x.")
        (step,) = session.messages(AGENT_STEP_TYPE)
        assert step.content == inputs[1]


def test_agent_session_close_parks_and_reopen_resumes_the_step(root: Path) -> None:
    session = AgentSession.open(root, session_id="s1")
    with session.turn("please"):
        run_id = session.call_tool(START).details["runId"]
    assert session.next_input() is not None
    session.close()
    with AgentSession.open(root, session_id="probe", start=False) as probe:
        assert probe.status(run_id)["launch"]["status"] == "parked"
    again = AgentSession.open(root, session_id="s1")  # resumes the parked run
    try:
        text = again.next_input()
        assert text is not None
        # No turn ran after the first step was handed out, so it is still unread.
        assert text.count("Workflow step contract") == 2
        steps = again.messages(AGENT_STEP_TYPE)
        assert [s.details["kind"] for s in steps if s.details] == ["step", "resume"]
        with again.turn():
            assert again.call_tool(submit_for(text)).is_error is False
        assert again.status(run_id)["status"] == "completed"
    finally:
        again.close()


def test_agent_session_log_is_private_and_survives_a_torn_line(root: Path) -> None:
    with AgentSession.open(root, session_id="s1") as session:
        with session.turn("please"):
            session.call_tool(START)
        assert session.next_input() is not None
    log = root / ".wfrun" / "state" / "sessions" / "s1.jsonl"
    assert stat.S_IMODE(log.stat().st_mode) == 0o600
    assert stat.S_IMODE(log.parent.stat().st_mode) == 0o700
    with open(log, "a") as fh:
        fh.write('{"id": "e9", "type": "mess')  # a crash mid-write
    with AgentSession.open(root, session_id="s1", start=False) as session:
        assert len(session.messages(AGENT_STEP_TYPE)) == 1


def test_agent_session_bad_inputs_are_one_line_errors(root: Path, tmp_path: Path) -> None:
    with pytest.raises(InputError, match=r"session id '\.\./x' must be 1-128 letters"):
        AgentSession.open(root, session_id="../x")
    with pytest.raises(InputError, match=r"has no \.wfrun/ folder; create it with"):
        AgentSession.open(tmp_path / "nowhere")
    with AgentSession.open(root, session_id="s1") as session:
        bad = session.call_tool("{oops")
        assert bad.is_error
        assert json.loads(bad.content)["error"] == {
            "code": "invalid_arguments",
            "message": "the tool arguments are not valid JSON; send a JSON object"}
        wrong = session.call_tool({"action": "start"})
        assert wrong.is_error
        assert json.loads(wrong.content)["error"]["message"] == "action 'start' needs workflow"


@pytest.mark.parametrize("depth", [150, 1000])
def test_agent_session_refuses_arguments_nested_too_deep_as_a_reply(root: Path,
                                                                   depth: int) -> None:
    # Issue 35.6: `call_tool` raised (RecursionError) on a model's deeply nested input.
    nested: object = "leaf"
    for _ in range(depth):
        nested = {"a": nested}
    text = '{"action": "start", "input": ' + "[" * depth + "]" * depth + "}"
    with AgentSession.open(root, session_id="s-deep") as session:
        as_object = session.call_tool({"action": "start", "workflow": "review",
                                       "input": nested})
        assert as_object.is_error
        assert "nested deeper than 100 levels" in as_object.content
        as_text = session.call_tool(text)
        assert as_text.is_error
        assert "not valid JSON" in as_text.content
        assert session.call_tool(START).is_error is False  # and it goes on
