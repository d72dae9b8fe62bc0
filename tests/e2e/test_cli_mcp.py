"""`wfrun mcp` with a plain MCP client (the SDK's own stdio client), no hooks (item 5).

Without hooks wfrun never hears that a turn ended and cannot start one, so a
launch never starts inside the client's session: it starts when the client exits
(handed over to `wfrun host`) or when the session starts again, and whatever the
session should see (a startup failure's follow-up, an agent step's contract)
comes back ahead of a later call's own reply. Also: the tool is served from
WORKFLOW_TOOL, replies carry no structuredContent, concurrent calls behave as
sequential, bad input is a one-line error before the protocol starts.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
from everyday import launch_row
from fakes.seed_workflow import AGENT_WF as SEED_WF
from fakes.seed_workflow import RUN_RE
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from waiting import wait_until

from runner.engine._agent import CONTRACT_RE
from runner.host.mcp._sessionlog import SessionLog
from runner.host.session._tool import WORKFLOW_TOOL
from runner.launch._intents import DEFERRED_TURN_TYPE
from runner.store import SqliteStore

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]
AGENT_WF = textwrap.dedent(SEED_WF).lstrip()
FAILED_RE = re.compile(r"^Workflow review failed to start \(run (?P<run>[\w-]+)\): .+\. "
                       r"Inspect the error and call workflow start again only after you "
                       r"correct the cause\.")


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "proj"
    (root / ".wfrun" / "workflows").mkdir(parents=True)
    (root / ".wfrun" / "workflows" / "review.yaml").write_text(AGENT_WF)
    return root


@asynccontextmanager
async def client(project: Path, session: str) -> AsyncIterator[ClientSession]:
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "runner", "--project", str(project), "mcp",
                                      "--session", session],
        env={k: v for k, v in os.environ.items() if k != "CLAUDE_CODE_SESSION_ID"})
    async with stdio_client(params) as (read, write), ClientSession(read, write) as s:
        await s.initialize()
        yield s


async def call(s: ClientSession, **args: Any) -> tuple[str, bool]:
    result = await s.call_tool("workflow", args)
    assert result.structured_content is None  # Claude Code would show it instead of text
    (content,) = result.content
    assert content.type == "text"
    return content.text, bool(result.is_error)


def status_of(project: Path, run_id: str) -> tuple[str, str | None]:
    record = launch_row(project, run_id)
    return record.status, record.error_code


def test_plain_client_starts_nothing_inside_its_session(project: Path) -> None:
    """Without hooks nothing says a turn ended (issue 33 item 12): a launch never
    starts at the next call of the same client (maybe the same turn); it starts when
    the session starts again (its first call), and the follow-up rides on that
    call's reply, exactly once."""
    async def scenario() -> dict[str, Any]:
        out: dict[str, Any] = {}
        async with client(project, "plain-1") as s:
            tools = (await s.list_tools()).tools
            assert [(t.name, t.input_schema) for t in tools] == [
                ("workflow", WORKFLOW_TOOL["parameters"])]
            text, _ = await call(s, action="start", workflow="review", input={"task": "x"})
            out["start_text"] = text
            out["first"] = RUN_RE.search(text).group("run")  # type: ignore[union-attr]
            (project / ".wfrun" / "workflows" / "review.yaml").write_text(
                AGENT_WF.replace("Plan", "Review"))
            out["same_turn"], _ = await call(s, action="status", runId=out["first"])
            out["first_row"] = status_of(project, out["first"])
        async with client(project, "plain-1") as s:  # the session starts again
            out["next"], _ = await call(s, action="status", runId=out["first"])
            text, _ = await call(s, action="start", workflow="review", input={"task": "y"})
            out["second"] = RUN_RE.search(text).group("run")  # type: ignore[union-attr]
            out["second_start_text"] = text
        async with client(project, "plain-1") as s:
            out["step_text"], _ = await call(s, action="status")
            step = CONTRACT_RE.search(out["step_text"])
            assert step is not None, out["step_text"]
            out["submit"], out["submit_err"] = await call(
                s, action="submit", step=step["step"], attempt=step["attempt"],
                output={"summary": "planned"})
        async with client(project, "plain-1") as s:
            out["after_restart"], _ = await call(s, action="status", runId=out["first"])
        return out

    out = anyio.run(scenario)
    assert "starts once this client exits" in out["start_text"]  # said at run time
    assert out["first_row"] == ("queued", None)  # the next call did not start it
    assert out["same_turn"].startswith(f"Run {out['first']}: queued")
    assert status_of(project, out["first"]) == ("failed", "source_changed")
    follow = FAILED_RE.match(out["next"])
    assert follow is not None, out["next"]
    assert follow["run"] == out["first"]
    # ... and then the status call's own reply.
    assert out["next"].endswith(f"\n\nRun {out['first']}: failed (source_changed: the workflow "
                                "source changed after it was queued; review the change, then "
                                "start it again)")
    assert "mcp__wfrun__workflow" not in out["next"]  # Claude Code's name only for Claude
    assert not FAILED_RE.search(out["second_start_text"])  # delivered once, not again
    assert out["second"] != out["first"]
    assert out["submit_err"] is False, out["submit"]
    assert status_of(project, out["second"]) == ("done", None)
    assert not FAILED_RE.search(out["after_restart"])
    log = SessionLog.for_session(project / ".wfrun", "plain-1").messages()
    assert [m.custom_type for m in log].count(DEFERRED_TURN_TYPE) == 1
    assert all(m.delivered for m in log)


def test_a_start_from_a_client_that_exits_runs_under_wfrun_host(project: Path) -> None:
    """Issue 33 item 5: the default `wfrun mcp` (a new session per process) hands its
    queued launch over when the client exits; `wfrun host` runs it to the end."""
    (project / ".wfrun" / "workflows" / "quick.yaml").write_text(textwrap.dedent("""
        start: only
        nodes:
          only:
            action: {use_shell: true, shell: "echo ran > ran.txt"}
    """).lstrip())

    async def queue_and_exit() -> str:
        params = StdioServerParameters(
            command=sys.executable, args=["-m", "runner", "--project", str(project), "mcp"],
            env={k: v for k, v in os.environ.items() if k != "CLAUDE_CODE_SESSION_ID"})
        async with stdio_client(params) as (read, write), ClientSession(read, write) as s:
            await s.initialize()
            text, _ = await call(s, action="start", workflow="quick")
        return RUN_RE.search(text).group("run")  # type: ignore[union-attr]

    run_id = anyio.run(queue_and_exit)
    assert status_of(project, run_id) == ("queued", None)
    host = subprocess.Popen([sys.executable, "-m", "runner", "--project", str(project), "host",
                             "--no-controllers"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        wait_until(lambda: status_of(project, run_id)[0] == "done", timeout=60,
                   what="wfrun host to run the handed-over launch")
    finally:
        host.terminate()
        host.communicate(timeout=30)
    assert (project / "ran.txt").read_text() == "ran\n"
    why = subprocess.run([sys.executable, "-m", "runner", "--project", str(project), "why",
                          run_id], capture_output=True, text=True, timeout=60)
    assert why.returncode == 0, why.stderr


def test_concurrent_calls_behave_as_sequential(project: Path) -> None:
    (project / ".wfrun" / "workflows" / "other.yaml").write_text(AGENT_WF)

    async def scenario() -> list[tuple[str, bool]]:
        replies: list[tuple[str, bool]] = []
        async with client(project, "plain-2") as s:
            async def start(name: str) -> None:
                replies.append(await call(s, action="start", workflow=name,
                                          input={"task": name}))
            async with anyio.create_task_group() as tg:
                for name in ("review", "other", "review", "other"):
                    tg.start_soon(start, name)
        return replies

    replies = anyio.run(scenario)
    queued = [t for t, err in replies if not err]
    refused = [t for t, err in replies if err]
    assert len(queued) == 1, replies
    winner = RUN_RE.search(queued[0]).group("run")  # type: ignore[union-attr]
    # Each refusal names the winner (hookless, a later call may first activate it, and
    # its step contract then rides ahead of that call's own reply).
    tail = re.compile(rf"this session already has workflow run {winner} \((queued|running)\); "
                      'wait for it to end or cancel it before starting another", "action"')
    assert len(refused) == 3
    assert all(tail.search(t) for t in refused), refused
    store = SqliteStore(project / ".wfrun" / "state" / "store.sqlite3")
    try:
        assert [r.run_id for r in store.launches.query()] == [winner]
    finally:
        store.close()


def test_bad_session_id_and_missing_project_are_one_line_errors(tmp_path: Path,
                                                                 project: Path) -> None:
    bad = subprocess.run([sys.executable, "-m", "runner", "--project", str(project), "mcp",
                          "--session", "../escape"], capture_output=True, text=True,
                         timeout=60, stdin=subprocess.DEVNULL)
    assert bad.returncode == 2
    assert bad.stderr.startswith("wfrun: error: --session '../escape': use letters")
    assert len(bad.stderr.strip().splitlines()) == 1
    nowhere = subprocess.run([sys.executable, "-m", "runner", "mcp"], capture_output=True,
                             text=True, timeout=60, cwd=tmp_path, stdin=subprocess.DEVNULL)
    assert nowhere.returncode == 2
    assert "no .wfrun/ folder" in nowhere.stderr
    assert len(nowhere.stderr.strip().splitlines()) == 1


def test_a_second_server_for_one_claude_process_is_a_one_line_error(
        project: Path, tmp_path: Path) -> None:
    env = {**os.environ, "TMPDIR": str(tmp_path), "WFRUN_CLAUDE_PID": "4244"}
    cmd = [sys.executable, "-m", "runner", "--project", str(project), "mcp", "--client",
           "claude-code", "--session", "s-dup"]
    first = subprocess.Popen(cmd, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE)
    try:
        sock = tmp_path / f"wfrun-{os.getuid()}" / "claude-4244.sock"
        wait_until(sock.exists, what="the first server's socket")
        second = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=60,
                                stdin=subprocess.DEVNULL)
        assert second.returncode == 1
        assert second.stderr.startswith("wfrun: error: another wfrun mcp server already "
                                        "serves Claude process 4244")
        assert len(second.stderr.strip().splitlines()) == 1
        assert sock.exists()  # the first server's socket is untouched
    finally:
        assert first.stdin is not None
        first.stdin.close()  # the client leaves: the server shuts down and cleans up
        first.wait(timeout=60)
        for pipe in (first.stdout, first.stderr):
            if pipe:
                pipe.close()
    assert first.returncode == 0
    assert not sock.exists()


def test_a_line_over_16_mib_is_dropped_and_deep_arguments_are_a_reply(project: Path) -> None:
    # Issue 35.6/35.9: `wfrun mcp` buffered and answered a 64 MB line (the bridge caps
    # 16 MiB); a model's arguments nested deep reached the controller unbounded.
    import json

    proc = subprocess.Popen(
        [sys.executable, "-m", "runner", "--project", str(project), "mcp", "--session", "s-big"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        env={k: v for k, v in os.environ.items() if k != "CLAUDE_CODE_SESSION_ID"})
    assert proc.stdin is not None
    assert proc.stdout is not None

    def send(doc: dict[str, Any] | bytes) -> None:
        assert proc.stdin is not None
        data = doc if isinstance(doc, bytes) else json.dumps({"jsonrpc": "2.0", **doc}).encode()
        proc.stdin.write(data + b"\n")
        proc.stdin.flush()

    def reply(want: int) -> dict[str, Any]:
        assert proc.stdout is not None
        while True:
            doc: dict[str, Any] = json.loads(proc.stdout.readline())
            if doc.get("id") == want:
                return doc
            assert doc.get("id") is None, doc  # only notifications in between

    try:
        send({"id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "t", "version": "0"}}})
        reply(1)
        send({"method": "notifications/initialized"})
        # A valid request, but 17 MiB long: dropped unread, never answered.
        send(b'{"jsonrpc":"2.0","id":2,"method":"ping","params":{"_meta":{"pad":"'
             + b"x" * (17 * 1024 * 1024) + b'"}}}')
        nested: object = "leaf"
        for _ in range(150):
            nested = {"a": nested}
        send({"id": 3, "method": "tools/call", "params": {"name": "workflow", "arguments": {
            "action": "start", "workflow": "review", "input": nested}}})
        answer = reply(3)  # id 2 never came: `reply` would have failed on it
        text = answer["result"]["content"][0]["text"]
        assert answer["result"]["isError"] is True
        assert "nested deeper than 100 levels" in text
        send({"id": 4, "method": "ping"})
        assert reply(4)["result"] == {}
    finally:
        proc.stdin.close()
        proc.wait(timeout=60)
        proc.stdout.close()
        assert proc.stderr is not None
        err = proc.stderr.read().decode()
        proc.stderr.close()
    assert "Traceback" not in err


def test_an_outcome_a_host_reports_rides_on_the_next_call_of_a_live_session(
        project: Path) -> None:
    """The session's earlier process queued a run and exited; a `wfrun host` runs it
    while the session's next process is live: the outcome comes with a call (no
    settle signal is needed to deliver), once, and a new start is not refused."""
    (project / ".wfrun" / "workflows" / "gated.yaml").write_text(textwrap.dedent("""
        start: wait
        nodes:
          wait:
            action: {use_shell: true, shell: "while [ ! -e release ]; do sleep 0.1; done"}
    """).lstrip())

    async def queue() -> str:
        async with client(project, "plain-3") as s:
            text, _ = await call(s, action="start", workflow="gated")
        return RUN_RE.search(text).group("run")  # type: ignore[union-attr]

    run_id = anyio.run(queue)
    host = subprocess.Popen([sys.executable, "-m", "runner", "--project", str(project), "host",
                             "--no-controllers"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        wait_until(lambda: status_of(project, run_id)[0] == "running", timeout=60,
                   what="wfrun host to take the handed-over launch")

        async def live_session() -> list[str]:
            texts = []
            async with client(project, "plain-3") as s:
                texts.append((await call(s, action="list"))[0])
                (project / "release").touch()
                wait_until(lambda: status_of(project, run_id)[0] == "done", timeout=60,
                           what="the run to end under wfrun host")
                texts.append((await call(s, action="list"))[0])
                texts.append((await call(s, action="list"))[0])
            return texts

        texts = anyio.run(live_session)
    finally:
        host.terminate()
        host.communicate(timeout=30)
    told = [t for t in texts if f"completed (run {run_id})" in t]
    assert len(told) == 1, texts
    assert told[0] == texts[1]
