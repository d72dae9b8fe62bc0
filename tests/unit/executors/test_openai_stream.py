"""Reassembling streamed chat completions, and configuring the openai executor."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

import pytest

from runner.engine.executors._openai import (
    OpenAIExecutor,
    Reply,
    StreamAssembler,
    StreamError,
    read_sse_reply,
)
from runner.errors import InputError


def chunk(delta: dict[str, object], finish: str | None = None) -> dict[str, object]:
    return {"choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}


def sse(lines: list[str]) -> Reply:
    async def gen() -> AsyncIterator[str]:
        for line in lines:
            yield line
    return asyncio.run(read_sse_reply(gen()))


def test_interleaved_tool_call_pieces_are_reassembled_by_index() -> None:
    asm = StreamAssembler()
    args0, args1 = json.dumps({"action": "submit", "output": {"a": 1}}), '{"x": "yz"}'
    asm.feed_chunk(chunk({"role": "assistant", "reasoning_content": "hmm, thinking"}))
    asm.feed_chunk(chunk({"content": "Sub"}))
    asm.feed_chunk(chunk({"tool_calls": [{"index": 0, "id": "c0", "type": "function",
                                          "function": {"name": "workflow", "arguments": ""}}]}))
    asm.feed_chunk(chunk({"tool_calls": [{"index": 1, "id": "c1",
                                          "function": {"name": "other"}}]}))
    for i in range(0, max(len(args0), len(args1)), 5):
        if args0[i:i + 5]:
            asm.feed_chunk(chunk({"tool_calls": [{"index": 0,
                                                  "function": {"arguments": args0[i:i + 5]}}]}))
        if args1[i:i + 5]:
            asm.feed_chunk(chunk({"tool_calls": [{"index": 1,
                                                  "function": {"arguments": args1[i:i + 5]}}]}))
    asm.feed_chunk(chunk({"content": "mitting."}, finish="tool_calls"))
    reply = asm.reply()
    assert reply.text == "Submitting."
    assert [(c.id, c.name, c.arguments) for c in reply.tool_calls] == [
        ("c0", "workflow", args0), ("c1", "other", args1)]
    assert reply.finish_reason == "tool_calls"
    message = reply.assistant_message()
    assert message["content"] == "Submitting."
    assert message["tool_calls"][0]["function"] == {"name": "workflow", "arguments": args0}


def test_text_only_reply_has_no_tool_calls_key() -> None:
    reply = Reply(text="hello")
    assert reply.assistant_message() == {"role": "assistant", "content": "hello"}


def test_missing_ids_get_stable_ones() -> None:
    asm = StreamAssembler()
    asm.feed_chunk(chunk({"tool_calls": [{"function": {"name": "workflow",
                                                       "arguments": "{}"}}]}))
    assert asm.reply().tool_calls[0].id == "call_0"


def test_sse_framing_comments_done_and_missing_blank_lines() -> None:
    reply = sse([
        ": keep-alive",
        "data: " + json.dumps(chunk({"content": "a"})),
        "",
        # No blank line between these two events: each data line is complete JSON.
        "data: " + json.dumps(chunk({"content": "b"})),
        "data: " + json.dumps(chunk({"content": "c"})),
        "event: message",
        "data: [DONE]",
        "data: " + json.dumps(chunk({"content": "after done is ignored"})),
    ])
    assert reply.text == "abc"


def test_sse_event_split_over_data_lines() -> None:
    doc = json.dumps(chunk({"content": "joined"}), indent=1).splitlines()
    reply = sse([f"data: {line}" for line in doc] + [""])
    assert reply.text == "joined"


@pytest.mark.parametrize(("lines", "message"), [
    (["data: {not json", ""], "not JSON"),
    (["data: " + json.dumps({"error": {"message": "rate limited"}}), ""], "rate limited"),
    (["data: [1, 2]", ""], "not a JSON object"),
])
def test_bad_streams_raise_stream_error(lines: list[str], message: str) -> None:
    with pytest.raises(StreamError, match=message):
        sse(lines)


def test_oversized_answer_is_refused() -> None:
    asm = StreamAssembler(limit=10)
    asm.feed_chunk(chunk({"content": "12345"}))
    with pytest.raises(StreamError, match="longer than 10"):
        asm.feed_chunk(chunk({"content": "678901"}))


def test_non_streaming_message_is_read_like_a_delta() -> None:
    asm = StreamAssembler()
    asm.feed_chunk({"choices": [{"message": {"role": "assistant", "content": None,
                                             "tool_calls": [{"id": "x", "function": {
                                                 "name": "workflow",
                                                 "arguments": {"action": "update"}}}]}}]})
    reply = asm.reply()
    assert reply.tool_calls[0].arguments == '{"action": "update"}'


FULL_ENV = {"WFRUN_OPENAI_BASE_URL": "http://127.0.0.1:9/v1",
            "WFRUN_OPENAI_API_KEY": "sk-unit-0123456789",
            "WFRUN_OPENAI_MODEL": "tiny"}


@pytest.mark.parametrize("missing", ["WFRUN_OPENAI_BASE_URL", "WFRUN_OPENAI_MODEL"])
def test_from_env_names_the_missing_variable(missing: str) -> None:
    env = {k: v for k, v in FULL_ENV.items() if k != missing}
    with pytest.raises(InputError, match=missing):
        OpenAIExecutor.from_env(env)


def test_from_env_takes_no_key_for_a_local_server() -> None:
    env = {k: v for k, v in FULL_ENV.items() if k != "WFRUN_OPENAI_API_KEY"}
    assert OpenAIExecutor.from_env(env).model == "tiny"
    assert OpenAIExecutor.from_env({**env, "WFRUN_OPENAI_API_KEY": "  "}).model == "tiny"


def test_from_env_builds_the_endpoint_and_timeout() -> None:
    ex = OpenAIExecutor.from_env({**FULL_ENV, "WFRUN_OPENAI_TIMEOUT": "7.5"})
    assert ex.endpoint == "http://127.0.0.1:9/v1/chat/completions"
    assert ex.model == "tiny"
    assert ex.timeout == 7.5
    assert "sk-unit" not in repr(ex)


def test_from_env_reads_the_process_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for key, value in FULL_ENV.items():
        monkeypatch.setenv(key, value)
    assert OpenAIExecutor.from_env().model == "tiny"


@pytest.mark.parametrize("timeout", ["soon", "0", "-3"])
def test_from_env_rejects_a_bad_timeout(timeout: str) -> None:
    with pytest.raises(InputError, match="WFRUN_OPENAI_TIMEOUT"):
        OpenAIExecutor.from_env({**FULL_ENV, "WFRUN_OPENAI_TIMEOUT": timeout})


@pytest.mark.parametrize("url", ["ftp://host/v1", "127.0.0.1:8080", "https://"])
def test_constructor_rejects_non_http_urls(url: str) -> None:
    with pytest.raises(InputError, match="http"):
        OpenAIExecutor(url, "k", "m")


def test_endpoint_keeps_the_query() -> None:
    ex = OpenAIExecutor("https://example.com/openai/v1/?api-version=2024-10", "k", "m")
    assert ex.endpoint == "https://example.com/openai/v1/chat/completions?api-version=2024-10"


def test_url_credentials_never_show() -> None:
    ex = OpenAIExecutor("https://user:pw-secret@example.com/v1?api-key=qs-secret", "k", "m")
    assert "pw-secret" not in repr(ex)
    assert "qs-secret" not in repr(ex)
