"""`wfrun bridge` protocol behaviour through a real subprocess: ordering, settle, errors."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from bridge_world import Project
from fakes.bridge_client import BridgeError
from waiting import wait_until

from runner.host.session._tool import WORKFLOW_TOOL
from runner.launch._intents import AGENT_STEP_TYPE

pytestmark = pytest.mark.timeout(60)
START = {"action": "start", "workflow": "review", "input": {"task": "x"}}


def test_bridge_serves_workflow_tool_schema_unchanged(project: Project) -> None:
    client = project.bridge(initialize=False)
    assert client.request("tools/list") == {"tools": [WORKFLOW_TOOL]}
    hello = client.initialize("s-42")
    assert hello["protocolVersion"] == 1
    assert hello["sessionId"] == "s-42"
    assert hello["tools"] == [WORKFLOW_TOOL]
    assert hello["server"]["name"] == "wfrun"
    assert client.close() == 0


def test_bridge_parallel_tool_calls_behave_as_if_sequential(project: Project) -> None:
    client = project.bridge()
    client.request("session/start", {"reason": "startup"})
    client.request("turn/started")
    # One model message, three tool calls sent before any reply is read.
    replies = client.request_many([
        ("tool/call", {"callId": "a", "name": "workflow", "arguments": START}),
        ("tool/call", {"callId": "b", "name": "workflow", "arguments": START}),
        ("tool/call", {"callId": "c", "name": "workflow", "arguments": {"action": "status"}}),
    ])
    first, second, status = replies
    assert first["isError"] is False
    run_id = first["details"]["runId"]
    assert second["isError"] is True
    assert second["details"]["code"] == "activation_failed"
    assert run_id in second["content"]  # the refusal names the run the first call queued
    assert status["content"] == f"Run {run_id}: queued"
    with project.store() as store:
        assert [r.run_id for r in store.launches.query()] == [run_id]
    assert client.close() == 0


def test_bridge_settle_reply_waits_until_the_activated_run_is_quiet(project: Project) -> None:
    client = project.bridge()
    client.request("session/start", {"reason": "startup"})
    client.request("turn/started")
    run_id = client.tool(START)["details"]["runId"]
    assert client.log.custom() == []  # nothing starts during the initiating turn
    settled = client.request("turn/settled", {"aborted": False})
    # At the moment of the reply the run has reached its agent step, in the log.
    (step,) = client.log.custom(AGENT_STEP_TYPE)
    assert step["details"]["runId"] == run_id
    assert settled == {"quiet": True, "turnRequested": True}
    assert client.turn_requested.is_set()
    # The model's next turn submits; the run ends and the settle says no more turns.
    client.request("turn/started")
    done = client.tool({"action": "submit", "step": "plan",
                        "attempt": step["details"]["attempt"], "output": {"summary": "s"}})
    assert done["isError"] is False
    assert client.request("turn/settled", {})["turnRequested"] is False
    with project.store() as store:
        record = store.launches.get(run_id)
        assert record is not None
        assert record.status == "done"
    assert client.close() == 0


def test_bridge_stdin_close_parks_the_active_run(project: Project) -> None:
    client = project.bridge()
    client.request("session/start", {"reason": "startup"})
    client.request("turn/started")
    run_id = client.tool(START)["details"]["runId"]
    client.request("turn/settled", {})
    assert client.log.custom(AGENT_STEP_TYPE)  # the run waits on the session
    assert client.close() == 0  # the client went away without session/shutdown
    with project.store() as store:
        record = store.launches.get(run_id)
        assert record is not None
        assert record.status == "parked"


def test_bridge_refuses_bad_messages_with_one_line_errors_and_keeps_serving(
        project: Project) -> None:
    client = project.bridge(initialize=False)
    with pytest.raises(BridgeError) as early:
        client.request("tool/call", {"name": "workflow", "arguments": START})
    assert early.value.code == -32002
    assert "send initialize" in early.value.message
    with pytest.raises(BridgeError) as version:
        client.request("initialize", {"protocolVersion": 2, "sessionId": "s"})
    assert version.value.code == -32602
    assert version.value.message == ("protocolVersion 2 is not supported; this wfrun bridge "
                                     "speaks 1")
    client.initialize()
    with pytest.raises(BridgeError) as unknown:
        client.request("turn/finished")
    assert unknown.value.code == -32601
    assert "unknown method 'turn/finished'" in unknown.value.message
    assert "turn/settled" in unknown.value.message
    with pytest.raises(BridgeError) as param:
        client.request("turn/settled", {"aborted": "yes"})
    assert param.value.code == -32602
    assert param.value.message == "'aborted' must be true or false"
    with pytest.raises(BridgeError) as again:
        client.request("initialize", {"protocolVersion": 1, "sessionId": "other"})
    assert "already" in again.value.message
    client.send_raw(b"{not json\n")
    client.send_raw(b"[1, 2]\n")
    client.request("ping")  # the replies to the bad lines came before this one
    codes = [doc["error"]["code"] for doc in client.protocol_errors]
    assert codes == [-32700, -32600]
    assert all("\n" not in doc["error"]["message"] for doc in client.protocol_errors)
    # A bad tool call is the model's to fix: a normal result with isError.
    reply = client.request("tool/call", {"name": "workflow",
                                         "arguments": {"action": "start", "flow": "x"}})
    assert reply["isError"] is True
    assert json.loads(reply["content"])["error"]["message"] == \
        "action 'start' does not take flow; it takes workflow, input"
    raw = client.request("tool/call", {"name": "workflow", "arguments": "{oops"})
    assert raw["isError"] is True
    assert "not valid JSON" in raw["content"]
    client.request("session/start", {"reason": "startup"})  # still serving
    assert client.close() == 0
    assert not [line for line in client.stderr_lines if "Traceback" in line]


def test_wfrun_bridge_outside_a_project_is_one_line_error(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "runner", "bridge"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=30, input="")
    assert done.returncode == 2
    assert done.stdout == ""
    (line,) = done.stderr.splitlines()
    assert line.startswith("wfrun: error: no .wfrun/ folder")


def test_bridge_tool_call_json_text_arguments_are_accepted(project: Project) -> None:
    client = project.bridge()
    reply = client.request("tool/call", {"callId": "x", "name": "workflow",
                                         "arguments": json.dumps({"action": "list"})})
    assert reply["isError"] is False
    assert "- review (project)" in reply["content"]
    assert client.close() == 0


def test_bridge_keeps_stdout_for_the_protocol_when_a_hook_prints(project: Project) -> None:
    project.write("noisy", """
        start: shout
        nodes:
          shout: {compute: {call: "./noisy.py:shout"}}
    """)
    (project.workflows / "noisy.py").write_text(
        "def shout(ctx):\n    print('hello from a hook', flush=True)\n    return {'ok': True}\n")
    client = project.bridge()
    client.request("session/start", {"reason": "startup"})
    client.request("turn/started")
    run_id = client.tool({"action": "start", "workflow": "noisy"})["details"]["runId"]
    assert client.request("turn/settled", {}) == {"quiet": True, "turnRequested": False}
    assert client.tool({"action": "status", "runId": run_id})["content"] == (
        f"Run {run_id}: completed")
    assert client.close() == 0
    assert client.protocol_errors == []  # every stdout line was a protocol message
    assert "hello from a hook" in client.stderr_lines


def test_bridge_ignores_sigint_and_ends_its_session_on_sigterm(project: Project) -> None:
    client = project.bridge()
    client.request("session/start", {"reason": "startup"})
    client.request("turn/started")
    run_id = client.tool(START)["details"]["runId"]
    client.request("turn/settled", {})
    assert client.proc is not None
    client.proc.send_signal(signal.SIGINT)  # the user's Ctrl-C in the client's terminal
    assert client.request("ping") == {}  # still serving
    client.proc.send_signal(signal.SIGTERM)
    assert client.proc.wait(30) == 0
    with project.store() as store:
        record = store.launches.get(run_id)
        assert record is not None
        assert record.status == "parked"  # shut down, not abandoned


def test_bridge_answers_calls_without_params_and_survives_hostile_lines(
        project: Project) -> None:
    # Issues 34.5 and 35.6: `turn/started` without params was -32603, `session/launches`
    # without params killed the bridge, one line nested 1,000 deep killed it with a
    # RecursionError, and `"id": 1e400` was answered with `"id": Infinity`.
    client = project.bridge()
    for method in ("turn/started", "session/launches", "ping", "tools/list"):
        client.send({"id": 900, "method": method})  # no "params" at all
        client.request("ping")
    # JSON-RPC answers need not come in order: `turn/started` is answered by the
    # bridge's worker thread, a `ping` by its reader, so wait for all four.
    replies = wait_until(lambda: (r := [d for d in client.protocol_errors
                                        if d.get("id") == 900]) and len(r) >= 4 and r,
                         what="the four answers to calls without params")
    assert [("error" in d) for d in replies] == [False] * 4, replies
    assert {"launches": []} in [d["result"] for d in replies]
    client.protocol_errors.clear()

    deep = b'{"jsonrpc":"2.0","id":7,"method":"tool/call","params":{"name":"workflow",' \
        b'"arguments":' + b"[" * 1000 + b"]" * 1000 + b"}}\n"
    client.send_raw(deep)
    client.send_raw(b'{"jsonrpc":"2.0","id":1e400,"method":"ping"}\n')
    client.send_raw(b'{"jsonrpc":"2.0","id":NaN,"method":"ping"}\n')
    client.send_raw(b"\xff\xfe not utf-8 \xc3\n")
    client.request("ping")  # still serving, and the bad lines were answered first
    errors = client.protocol_errors
    assert [d["error"]["code"] for d in errors] == [-32700] * 4, errors
    assert all(d["id"] is None for d in errors)
    assert "nested deeper than 100 levels" in errors[0]["error"]["message"]
    assert "not finite" in errors[1]["error"]["message"]
    assert client.close() == 0
    assert not [line for line in client.stderr_lines if "Traceback" in line]


def test_bridge_refuses_a_line_over_16_mib_without_holding_it(project: Project) -> None:
    client = project.bridge()
    client.send_raw(b'{"jsonrpc":"2.0","id":5,"method":"ping","pad":"'
                    + b"x" * (16 * 1024 * 1024) + b'"}\n')
    assert client.request("ping") == {}
    [error] = client.protocol_errors
    assert error["error"]["code"] == -32600
    assert "longer than 16777216 bytes" in error["error"]["message"]
    assert client.close() == 0


def test_a_run_whose_bridge_died_mid_step_resumes_at_an_idle_session_start(
        project: Project) -> None:
    """Issue 33 item 10: the client's whole process group is killed mid-step; the
    session started again and left idle takes the run over at once (no user message,
    no waiting out the dead runner's lease) and hands the model the step again."""
    client = project.bridge()
    client.request("session/start", {"reason": "startup"})
    client.request("turn/started")
    run_id = client.tool(START)["details"]["runId"]
    client.request("turn/settled", {})
    assert len(client.log.custom(AGENT_STEP_TYPE)) == 1  # the run waits on the session
    client.kill()  # SIGKILL: no shutdown, the claim's lease still runs
    with project.store() as store:
        record = store.launches.get(run_id)
        assert record is not None
        assert record.status == "running"
        assert record.lease_live(store.now_ms())
    other = project.bridge(log="other.jsonl", session_id="session-2")
    other.request("session/start", {"reason": "startup"})
    shown = other.tool({"action": "status", "runId": run_id})["content"]
    assert shown.startswith(f"Run {run_id}: interrupted"), shown  # never "running"
    assert other.close() == 0
    cli = subprocess.run([sys.executable, "-m", "runner", "--project", str(project.root),
                          "status", run_id], capture_output=True, text=True, timeout=60)
    assert cli.returncode == 0, cli.stderr
    assert "(interrupted: its runner is gone" in cli.stdout
    again = project.bridge()
    started = again.request("session/start", {"reason": "resume"})  # and nothing else
    assert started["turnRequested"] is True
    steps = again.log.custom(AGENT_STEP_TYPE)
    assert [s["details"]["kind"] for s in steps] == ["step", "resume"]
    with project.store() as store:
        record = store.launches.get(run_id)
        assert record is not None
        assert record.status == "running"
        assert record.epoch >= 2  # claimed again, by the new bridge
    assert again.close() == 0


GATED = """
    start: wait
    nodes:
      wait:
        action: {use_shell: true, shell: "while [ ! -e release ]; do sleep 0.1; done"}
"""


# The default wait is 30 s: a reply well inside 25 s is the configured wait's.
@pytest.mark.timeout(25)
def test_the_settle_wait_is_configured_by_the_environment(project: Project) -> None:
    project.write("gated", GATED)
    client = project.bridge(env={"WFRUN_SETTLE_TIMEOUT": "0.3"})
    client.request("session/start", {"reason": "startup"})
    client.request("turn/started")
    run_id = client.tool({"action": "start", "workflow": "gated"})["details"]["runId"]
    # The run stays busy: the settle gives up after the configured wait, not quiet.
    assert client.request("turn/settled", {}) == {"quiet": False, "turnRequested": False}
    (project.root / "release").touch()
    # A timeout the client names still wins over the configured one.
    assert client.request("turn/settled", {"timeout": 20})["quiet"] is True
    with project.store() as store:
        record = store.launches.get(run_id)
        assert record is not None
        assert record.status == "done"
    assert client.close() == 0


@pytest.mark.parametrize("value", ["0", "-1", "soon"])
def test_a_bad_settle_wait_is_a_usage_error(project: Project, value: str) -> None:
    done = subprocess.run([sys.executable, "-m", "runner", "--project", str(project.root),
                           "bridge"], env={**os.environ, "WFRUN_SETTLE_TIMEOUT": value},
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=30)
    assert done.returncode == 2  # click's usage error, before any protocol
    assert "Error: Invalid value for '--settle-timeout'" in done.stderr
