"""OpenAIExecutor against the real loopback fake server (SSE, chunked tool arguments)."""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import time

import pytest
from executor_cases import TASK, MakeStep
from fakes.openai_server import (
    Answer,
    FakeOpenAI,
    Messages,
    Reply,
    call,
    contract_of,
    hang,
    http_error,
    invalid_then_valid,
    stale_attempt,
    submit_valid,
    text_only,
    tool_results,
    update_then_submit,
)

from runner.engine._agent import reminder_text
from runner.engine.executors import OpenAIExecutor

API_KEY = "sk-test-DO-NOT-LEAK-0123456789abcdef"
GOOD = {"verdict": "pass", "score": 7}

# The fake server hangs for 30 s: a turn that ends well before that was stopped by the
# cancel, deadline or timeout under test, however loaded the machine is.
QUICK = 15.0


def executor(server: FakeOpenAI, **kw: object) -> OpenAIExecutor:
    return OpenAIExecutor(server.base_url, API_KEY, "fake-model", **kw)  # type: ignore[arg-type]


def test_valid_submission_is_accepted_and_request_is_well_formed(
        openai_server: FakeOpenAI, make_step: MakeStep) -> None:
    openai_server.script = submit_valid(GOOD, reasoning="Let me think about the diff first.")
    case = make_step()
    ex = executor(openai_server, headers={"X-Project": "wfrun-tests"})
    ex.run_turn(case.step, case.step.prompt, "step")
    assert case.step.accepted
    assert case.step.output == GOOD
    assert ex.last_error is None
    # Accepted ends the turn: no extra round-trip just to hear the model say "done".
    assert len(openai_server.requests) == 1
    req = openai_server.requests[0]
    assert req.path == "/v1/chat/completions"
    assert req.headers["authorization"] == f"Bearer {API_KEY}"
    assert req.headers["x-project"] == "wfrun-tests"
    assert req.body["stream"] is True
    assert req.body["model"] == "fake-model"
    assert [t["function"]["name"] for t in req.body["tools"]] == ["workflow"]
    assert req.messages == [{"role": "user", "content": case.step.prompt}]


def test_a_local_endpoint_needs_no_api_key(openai_server: FakeOpenAI,
                                           make_step: MakeStep) -> None:
    """No key configured: no Authorization header at all (issue 34 item 15: a local
    OpenAI-compatible server needed a dummy key)."""
    openai_server.script = submit_valid(GOOD)
    case = make_step()
    ex = OpenAIExecutor.from_env({"WFRUN_OPENAI_BASE_URL": openai_server.base_url,
                                  "WFRUN_OPENAI_MODEL": "fake-model"})
    ex.run_turn(case.step, case.step.prompt, "step")
    assert case.step.accepted
    [req] = openai_server.requests
    assert "authorization" not in req.headers


def test_schema_rejection_then_acceptance_in_one_turn(
        openai_server: FakeOpenAI, make_step: MakeStep) -> None:
    bad = {"verdict": "maybe", "score": "high"}
    openai_server.script = invalid_then_valid(bad, GOOD)
    case = make_step()
    ex = executor(openai_server)
    ex.run_turn(case.step, case.step.prompt, "step")
    assert case.step.accepted
    assert case.step.output == GOOD
    assert len(case.step.rejections) == 1
    assert "schema" in case.step.rejections[0]
    second = openai_server.requests[1].messages
    assistant, tool = second[1], second[2]
    # The streamed 5/6/12-char argument pieces were reassembled exactly.
    args = json.loads(assistant["tool_calls"][0]["function"]["arguments"])
    assert args["output"] == bad
    assert assistant["content"] == "Trying."
    assert tool["role"] == "tool"
    assert tool["tool_call_id"] == assistant["tool_calls"][0]["id"]
    assert json.loads(tool["content"])["ok"] is False


def test_reasoning_content_is_not_part_of_the_answer(
        openai_server: FakeOpenAI, make_step: MakeStep) -> None:
    def script(messages: Messages) -> Reply:
        contract = contract_of(messages)
        assert contract is not None
        if tool_results(messages):
            return Answer(calls=[call("submit", contract, output=GOOD)])
        return Answer(text="Plan:", reasoning="SECRET-THOUGHTS " * 5,
                      calls=[call("update", contract, update={"type": "progress",
                                                              "data": {"completed": 1}})])
    openai_server.script = script
    case = make_step()
    executor(openai_server).run_turn(case.step, case.step.prompt, "step")
    assert case.step.accepted
    sent_back = json.dumps(openai_server.requests[1].messages)
    assert "SECRET-THOUGHTS" not in sent_back
    assert openai_server.requests[1].messages[1]["content"] == "Plan:"


def test_stale_attempt_is_refused(openai_server: FakeOpenAI, make_step: MakeStep) -> None:
    openai_server.script = stale_attempt(GOOD)
    case = make_step()
    ex = executor(openai_server)
    ex.run_turn(case.step, case.step.prompt, "step")
    assert not case.step.accepted
    result = json.loads(openai_server.requests[1].messages[-1]["content"])
    assert result["ok"] is False
    assert "stale" in result["message"]
    assert ex.last_error is not None


def test_update_is_delivered_then_submit_accepted(
        openai_server: FakeOpenAI, make_step: MakeStep) -> None:
    update = {"type": "progress", "key": "files", "data": {"completed": 2, "total": 5}}
    openai_server.script = update_then_submit(update, GOOD)
    case = make_step()
    executor(openai_server).run_turn(case.step, case.step.prompt, "step")
    assert case.updates == [("progress", "files", {"completed": 2, "total": 5})]
    assert case.step.accepted
    assert len(openai_server.requests) == 2


def test_plain_text_is_no_submission_and_reminder_continues_conversation(
        openai_server: FakeOpenAI, make_step: MakeStep) -> None:
    openai_server.script = text_only("The change looks fine to me.")
    case = make_step()
    ex = executor(openai_server)
    ex.run_turn(case.step, case.step.prompt, "step")
    assert not case.step.accepted
    assert ex.last_error is not None
    assert "without calling the workflow tool" in ex.last_error
    openai_server.script = submit_valid(GOOD)
    reminder = reminder_text(case.step, 1)
    ex.run_turn(case.step, reminder, "reminder")
    assert case.step.accepted
    roles = [(m["role"], m.get("content")) for m in openai_server.requests[1].messages]
    assert roles == [("user", case.step.prompt),
                     ("assistant", "The change looks fine to me."),
                     ("user", reminder)]


def test_unknown_tool_and_malformed_arguments_get_tool_errors(
        openai_server: FakeOpenAI, make_step: MakeStep) -> None:
    def script(messages: Messages) -> Reply:
        contract = contract_of(messages)
        assert contract is not None
        if tool_results(messages):
            return Answer(calls=[call("submit", contract, output=GOOD)])
        return Answer(calls=[("write", {"path": "/etc/passwd"}), ("workflow", "{not json")])
    openai_server.script = script
    case = make_step()
    executor(openai_server).run_turn(case.step, case.step.prompt, "step")
    assert case.step.accepted
    results = [json.loads(m["content"]) for m in openai_server.requests[1].messages
               if m["role"] == "tool"]
    assert [r["ok"] for r in results] == [False, False]
    assert "unknown tool 'write'" in results[0]["message"]
    assert "JSON object" in results[1]["message"]


def test_round_trips_are_capped(openai_server: FakeOpenAI, make_step: MakeStep) -> None:
    def script(messages: Messages) -> Reply:
        contract = contract_of(messages)
        assert contract is not None
        return Answer(calls=[call("update", contract, update={"type": "progress", "data": 1})])
    openai_server.script = script
    case = make_step()
    ex = executor(openai_server, max_round_trips=3)
    ex.run_turn(case.step, case.step.prompt, "step")
    assert not case.step.accepted
    assert len(openai_server.requests) == 3
    assert ex.last_error is not None
    assert "3 model round-trips" in ex.last_error


def test_non_streaming_answer_is_understood(
        openai_server: FakeOpenAI, make_step: MakeStep) -> None:
    openai_server.streaming = False
    openai_server.script = submit_valid(GOOD)
    case = make_step()
    executor(openai_server).run_turn(case.step, case.step.prompt, "step")
    assert case.step.accepted
    assert case.step.output == GOOD


def test_http_500_is_recorded_redacted(openai_server: FakeOpenAI, make_step: MakeStep,
                                       caplog: pytest.LogCaptureFixture) -> None:
    # A server that echoes the key back must not get it into our records.
    openai_server.script = http_error(500, f"upstream exploded (key {API_KEY})")
    case = make_step()
    ex = executor(openai_server)
    with caplog.at_level(logging.DEBUG):
        ex.run_turn(case.step, case.step.prompt, "step")
    assert not case.step.accepted
    assert ex.last_error is not None
    assert "HTTP 500" in ex.last_error
    assert "upstream exploded" in ex.last_error
    assert API_KEY not in ex.last_error
    assert "DO-NOT-LEAK" not in ex.last_error
    assert API_KEY not in caplog.text
    assert "HTTP 500" in caplog.text
    assert API_KEY not in repr(ex)


def test_connection_refused_ends_turn(make_step: MakeStep) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    ex = OpenAIExecutor(f"http://127.0.0.1:{port}/v1", API_KEY, "fake-model")
    case = make_step()
    started = time.monotonic()
    ex.run_turn(case.step, case.step.prompt, "step")
    assert time.monotonic() - started < QUICK  # no retry loop against a closed port
    assert not case.step.accepted
    assert ex.last_error is not None
    assert "cannot connect" in ex.last_error
    assert API_KEY not in ex.last_error


@pytest.mark.parametrize("after_headers", [False, True])
def test_cancel_mid_request_returns_promptly(
        openai_server: FakeOpenAI, make_step: MakeStep, after_headers: bool) -> None:
    openai_server.script = hang(30, after_headers=after_headers)
    case = make_step(timeout=None)
    ex = executor(openai_server)
    case.cancel_when(openai_server.hanging.is_set)  # mid-request, never before it
    ex.run_turn(case.step, case.step.prompt, "step")
    returned = time.monotonic()
    assert openai_server.hanging.is_set()
    assert case.cancelled_at is not None
    assert returned - case.cancelled_at < QUICK
    assert not case.step.accepted
    assert ex.last_error is not None
    assert "cancel" in ex.last_error


def test_deadline_is_honoured(openai_server: FakeOpenAI, make_step: MakeStep) -> None:
    openai_server.script = hang(30, after_headers=True)
    ex = executor(openai_server, timeout=60)
    started = time.monotonic()
    case = make_step(timeout=0.6)
    ex.run_turn(case.step, case.step.prompt, "step")
    elapsed = time.monotonic() - started
    assert 0.5 < elapsed < QUICK  # not before the deadline, and not the 30 s hang
    assert not case.step.accepted
    assert ex.last_error is not None


def test_http_timeout_applies_when_deadline_is_far(
        openai_server: FakeOpenAI, make_step: MakeStep) -> None:
    openai_server.script = hang(30)
    case = make_step(timeout=30)
    ex = executor(openai_server, timeout=0.4)
    started = time.monotonic()
    ex.run_turn(case.step, case.step.prompt, "step")
    assert time.monotonic() - started < QUICK  # the 0.4 s timeout, not the 30 s deadline
    assert not case.step.accepted
    assert ex.last_error is not None
    assert "timed out" in ex.last_error


def test_a_stopped_step_sends_nothing(openai_server: FakeOpenAI, make_step: MakeStep) -> None:
    openai_server.script = submit_valid(GOOD)
    case = make_step()
    case.control.park()
    ex = executor(openai_server)
    ex.run_turn(case.step, case.step.prompt, "step")
    assert openai_server.requests == []
    assert not case.step.accepted
    assert ex.last_error is not None
    assert "park" in ex.last_error


def test_resume_without_history_starts_from_prompt(
        openai_server: FakeOpenAI, make_step: MakeStep) -> None:
    openai_server.script = submit_valid(GOOD)
    case = make_step()
    reminder = reminder_text(case.step, 0)
    executor(openai_server).run_turn(case.step, reminder, "reminder")
    assert case.step.accepted
    messages = openai_server.requests[0].messages
    assert [m["content"] for m in messages] == [case.step.prompt, reminder]
    assert TASK in messages[0]["content"]


def test_run_turn_works_when_called_inside_an_event_loop(
        openai_server: FakeOpenAI, make_step: MakeStep) -> None:
    openai_server.script = submit_valid(GOOD)
    case = make_step()
    ex = executor(openai_server)

    async def async_host() -> None:
        ex.run_turn(case.step, case.step.prompt, "step")

    asyncio.run(async_host())
    assert case.step.accepted
    assert case.step.output == GOOD
