"""`wfrun mcp` with a plain MCP client (the SDK's own stdio client), no hooks (item 5).

Without hooks wfrun never hears that a turn ended and cannot start one, so the gap
before each `workflow` call is its boundary: a launch queued by one call activates
before the next call runs, and whatever the session should see (a startup
failure's follow-up, an agent step's contract) comes back ahead of that next
call's own reply. Also: the tool is served from WORKFLOW_TOOL, replies carry no
structuredContent, concurrent calls behave as sequential, bad input is a one-line
error before the protocol starts.
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
from fakes.seed_workflow import AGENT_WF as SEED_WF
from fakes.seed_workflow import RUN_RE
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from waiting import wait_until

from runner.engine.agent import CONTRACT_RE
from runner.host.mcp.sessionlog import SessionLog
from runner.host.session.tool import WORKFLOW_TOOL
from runner.launch.intents import DEFERRED_TURN_TYPE
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
    store = SqliteStore(project / ".wfrun" / "state" / "store.sqlite3")
    try:
        record = store.launches.get(run_id)
    finally:
        store.close()
    assert record is not None
    return record.status, record.error_code


def test_plain_client_gets_the_follow_up_with_its_next_call(project: Path) -> None:
    async def scenario() -> dict[str, Any]:
        out: dict[str, Any] = {}
        async with client(project, "plain-1") as s:
            tools = (await s.list_tools()).tools
            assert [(t.name, t.input_schema) for t in tools] == [
                ("workflow", WORKFLOW_TOOL["parameters"])]
            text, _ = await call(s, action="start", workflow="review", input={"task": "x"})
            out["first"] = RUN_RE.search(text).group("run")  # type: ignore[union-attr]
            out["first_row"] = status_of(project, out["first"])
            (project / ".wfrun" / "workflows" / "review.yaml").write_text(
                AGENT_WF.replace("Plan", "Review"))
            # The next call is the boundary: activation fails, the follow-up rides along.
            out["next"], _ = await call(s, action="status", runId=out["first"])
            text, _ = await call(s, action="start", workflow="review", input={"task": "y"})
            out["second"] = RUN_RE.search(text).group("run")  # type: ignore[union-attr]
            out["second_start_text"] = text
            out["step_text"], _ = await call(s, action="status")
            step = CONTRACT_RE.search(out["step_text"])
            assert step is not None, out["step_text"]
            out["submit"], out["submit_err"] = await call(
                s, action="submit", step=step["step"], attempt=step["attempt"],
                output={"summary": "planned"})
        async with client(project, "plain-1") as s:  # a restart of the same session
            out["after_restart"], _ = await call(s, action="status", runId=out["first"])
        return out

    out = anyio.run(scenario)
    assert out["first_row"] == ("queued", None)
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
    assert not FAILED_RE.search(out["after_restart"])
    log = SessionLog.for_session(project / ".wfrun", "plain-1").messages()
    assert [m.custom_type for m in log].count(DEFERRED_TURN_TYPE) == 1
    assert all(m.delivered for m in log)


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
