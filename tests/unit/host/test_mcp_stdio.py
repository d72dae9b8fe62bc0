"""MCP's stdio subset (runner/host/mcp/_stdio.py) on in-memory streams: the handshake,
version negotiation, errors a client can cause, and tool calls in arrival order.
(The official SDK's client talks to the real process in tests/e2e/test_cli_mcp.py.)"""

from __future__ import annotations

import io
import json
from typing import Any

import pytest

from runner.host.mcp._stdio import PROTOCOL_VERSIONS, ServerInfo, StdioServer, ToolResult

TOOL = {"name": "workflow", "description": "d", "inputSchema": {"type": "object"}}


def serve(*messages: Any, call: Any = None, raw: bytes = b"") -> tuple[
        list[dict[str, Any]], list[str]]:
    """Replies in order, and the events the server reported (initialized, calls)."""
    events: list[str] = []

    def call_tool(name: str, args: dict[str, Any]) -> ToolResult:
        events.append(f"call {name} {json.dumps(args, sort_keys=True)}")
        return call(name, args) if call else ToolResult(f"ok {args.get('n')}")

    data = raw + b"".join(json.dumps(m).encode() + b"\n" for m in messages)
    out = io.BytesIO()
    info = ServerInfo("wfrun", "9.9", [TOOL], "use it",
                      on_initialized=lambda: events.append("initialized"))
    StdioServer(info, call_tool, io.BytesIO(data), out).serve()
    return [json.loads(line) for line in out.getvalue().splitlines()], events


def req(msg_id: int, method: str, params: Any = None) -> dict[str, Any]:
    doc: dict[str, Any] = {"jsonrpc": "2.0", "id": msg_id, "method": method}
    if params is not None:
        doc["params"] = params
    return doc


@pytest.mark.parametrize(("asked", "answered"), [
    ("2025-06-18", "2025-06-18"), ("2024-11-05", "2024-11-05"),
    ("2099-01-01", PROTOCOL_VERSIONS[-1]), (None, PROTOCOL_VERSIONS[-1])])
def test_initialize_negotiates_the_version(asked: str | None, answered: str) -> None:
    (reply,), events = serve(req(1, "initialize", {"protocolVersion": asked}))
    assert reply["result"] == {"protocolVersion": answered,
                               "capabilities": {"tools": {"listChanged": False}},
                               "serverInfo": {"name": "wfrun", "version": "9.9"},
                               "instructions": "use it"}
    assert events == []  # warming up waits for the client's `initialized`


def test_the_handshake_then_tools_in_arrival_order() -> None:
    replies, events = serve(
        req(1, "initialize", {"protocolVersion": "2025-06-18"}),
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        req(2, "tools/list"), req(3, "ping"),
        req(4, "tools/call", {"name": "workflow", "arguments": {"n": 1}}),
        req(5, "tools/call", {"name": "workflow", "arguments": {"n": 2}}))
    by_id = {r["id"]: r for r in replies}
    assert by_id[2]["result"] == {"tools": [TOOL]}
    assert by_id[3]["result"] == {}
    assert by_id[4]["result"] == {"content": [{"type": "text", "text": "ok 1"}],
                                  "isError": False}
    assert events == ["initialized", 'call workflow {"n": 1}', 'call workflow {"n": 2}']


def test_what_a_client_can_get_wrong_is_an_error_reply_and_the_session_goes_on() -> None:
    replies, _ = serve(req(1, "resources/list"), req(2, "tools/call", {"arguments": {}}),
                       req(3, "ping", params=[1]), {"id": 4, "method": "ping"},
                       req(5, "ping"), raw=b"{not json\n\n")
    # Sorted: a tools/call is answered from the worker thread, in its own time.
    codes = sorted((r["id"] or 0, r.get("error", {}).get("code") or 0) for r in replies)
    assert codes == [(0, -32700), (0, -32600), (1, -32601), (2, -32602), (3, -32602), (5, 0)]


def test_a_tool_that_raises_is_an_error_result_not_a_dead_server(
        capsys: pytest.CaptureFixture[str]) -> None:
    def broken(name: str, args: dict[str, Any]) -> ToolResult:
        raise RuntimeError("boom")

    replies, _ = serve(req(1, "tools/call", {"name": "workflow", "arguments": {}}),
                       req(2, "ping"), call=broken)
    by_id = {r["id"]: r for r in replies}
    assert by_id[1]["result"]["isError"] is True
    assert by_id[1]["result"]["content"][0]["text"] == \
        "wfrun: internal error: RuntimeError: boom"
    assert by_id[2]["result"] == {}
    assert "RuntimeError: boom" in capsys.readouterr().err  # the traceback, for the log


def test_a_batch_is_answered_item_by_item_and_meta_rides_along() -> None:
    replies, _ = serve([req(1, "ping"), req(2, "tools/call", {
        "name": "workflow", "arguments": {"n": 3}})],
        call=lambda n, a: ToolResult("x", True, {"wfrun": {"k": 1}}))
    by_id = {r["id"]: r for r in replies}
    assert by_id[1]["result"] == {}
    assert by_id[2]["result"] == {"content": [{"type": "text", "text": "x"}], "isError": True,
                                  "_meta": {"wfrun": {"k": 1}}}
