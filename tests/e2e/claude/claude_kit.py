"""Helpers for the real-Claude-Code tests: a project, a fake Anthropic server, `claude -p`.

(A uniquely named module, not conftest: several test folders have a conftest, and
`from conftest import` would find whichever came first on sys.path.)

`cc.run(prompt)` runs the real Claude Code CLI (installed by scripts/setup into
.tools/claude-code) once, one-shot, in the project, offline: ANTHROPIC_BASE_URL
points at the fake server the test scripts, the HOME is a throwaway folder, tool
search is off (else MCP tools hide behind a search tool). The project was set up
by the real `wfrun integrate claude-code`, so Claude Code starts `wfrun mcp
--client claude-code` and runs `wfrun hook claude-code` exactly as a user's would.
"""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
import textwrap
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from fakes.anthropic_server import Answer, Body, FakeAnthropic, Reply

from runner.clock import CLOCK_FILE_ENV, FileClock
from runner.host.mcp._sessionlog import LogMessage, SessionLog
from runner.store import LaunchRecord, SqliteStore

REPO = Path(__file__).resolve().parents[3]
CLAUDE = REPO / ".tools" / "claude-code" / "node_modules" / ".bin" / "claude"
WFRUN = REPO / ".venv" / "bin" / "wfrun"
TOOL = "mcp__wfrun__workflow"

FAILED_RE = re.compile(
    r"Workflow (?P<wf>\w+) failed to start \(run (?P<run>[\w-]+)\): (?P<reason>.+?)\. "
    r"Inspect the error and call workflow start again only after you correct the cause\.")


@dataclass
class Result:
    code: int
    events: list[dict[str, Any]]
    stderr: str

    @property
    def session_id(self) -> str:
        for event in self.events:
            if event.get("type") == "system" and event.get("session_id"):
                return str(event["session_id"])
        raise AssertionError(f"no session id in Claude's output: {self.stderr[-500:]}")

    def tool_uses(self) -> list[dict[str, Any]]:
        out = []
        for event in self.events:
            if event.get("type") != "assistant":
                continue
            for block in event.get("message", {}).get("content", []):
                if block.get("type") == "tool_use":
                    out.append(block)
        return out


@dataclass
class ClaudeWorld:
    root: Path
    server: FakeAnthropic
    clock: FileClock
    runs: list[Result] = field(default_factory=list)

    @property
    def project(self) -> Path:
        return self.root / "proj"

    def write(self, name: str, text: str) -> Path:
        path = self.project / ".wfrun" / "workflows" / f"{name}.yaml"
        path.write_text(textwrap.dedent(text).lstrip("\n"))
        return path

    def script(self, fn: Callable[[Body], Reply]) -> None:
        self.server.script = fn

    def env(self, extra: dict[str, str] | None = None) -> dict[str, str]:
        keep = {k: v for k, v in os.environ.items()
                if k in ("PATH", "LANG", "LC_ALL", "TMPDIR", "WFRUN_HOME")}
        return {**keep, "HOME": str(self.root / "home"),
                "ANTHROPIC_BASE_URL": self.server.base_url,
                "ANTHROPIC_API_KEY": "sk-ant-fake-key-for-tests",
                "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "DISABLE_AUTOUPDATER": "1",
                "DISABLE_TELEMETRY": "1", "ENABLE_TOOL_SEARCH": "false",
                "WFRUN_PROJECT": str(self.project), CLOCK_FILE_ENV: self.clock.path,
                **(extra or {})}

    def run(self, prompt: str, *, resume: str | None = None,
            env: dict[str, str] | None = None, timeout: float = 150) -> Result:
        # Exactly as docs/hosts.md says: Claude Code finds .mcp.json and
        # .claude/settings.json in the project itself (no --mcp-config, --settings or
        # --allowedTools: `wfrun integrate claude-code` wrote all it needs).
        cmd = [str(CLAUDE), "-p", prompt, "--output-format", "stream-json", "--verbose"]
        if resume:
            cmd += ["--resume", resume]
        proc = subprocess.run(cmd, cwd=self.project, env=self.env(env), capture_output=True,
                              text=True, timeout=timeout, start_new_session=True)
        events = []
        for line in proc.stdout.splitlines():
            try:
                events.append(json.loads(line))
            except ValueError:
                continue
        result = Result(proc.returncode, events, proc.stderr)
        self.runs.append(result)
        return result

    def run_sdk(self, prompt: str, *, env: dict[str, str] | None = None,
                timeout: float = 150) -> Result:
        """The same one-shot turn through the Claude Agent SDK's `query`, driving the
        same Claude Code binary, set up as docs/hosts.md says: the project as `cwd`
        and nothing else (Claude Code reads .mcp.json and .claude/settings.json)."""
        import anyio
        from claude_agent_sdk import (
            ClaudeAgentOptions,
            ResultMessage,
            SystemMessage,
            query,
        )

        events: list[dict[str, Any]] = []
        stderr: list[str] = []
        options = ClaudeAgentOptions(cwd=self.project, cli_path=CLAUDE, env=self.env(env),
                                     stderr=stderr.append)

        async def drive() -> None:
            with anyio.fail_after(timeout):
                async for message in query(prompt=prompt, options=options):
                    if isinstance(message, SystemMessage):
                        events.append({"type": "system", **message.data})
                    elif isinstance(message, ResultMessage):
                        events.append({"type": "result", "session_id": message.session_id,
                                       "is_error": message.is_error,
                                       "permission_denials": message.permission_denials})

        # The SDK passes its own environment to Claude Code, plus options.env on top.
        saved = {k: os.environ.pop(k) for k in list(os.environ)
                 if k.startswith(("CLAUDE", "ANTHROPIC"))}
        try:
            anyio.run(drive)
            code = 0
        except Exception as exc:
            stderr.append(f"{type(exc).__name__}: {exc}")
            code = 1
        finally:
            os.environ.update(saved)
        result = Result(code, events, "\n".join(stderr))
        self.runs.append(result)
        return result

    # -- durable views -------------------------------------------------------------
    def store(self) -> SqliteStore:
        return SqliteStore(self.project / ".wfrun" / "state" / "store.sqlite3")

    def launch(self, run_id: str) -> LaunchRecord:
        store = self.store()
        try:
            record = store.launches.get(run_id)
        finally:
            store.close()
        assert record is not None, f"no launch row {run_id}"
        return record

    def launches(self) -> list[LaunchRecord]:
        store = self.store()
        try:
            return store.launches.query()
        finally:
            store.close()

    def log(self, claude_session: str) -> list[LogMessage]:
        return SessionLog.for_session(self.project / ".wfrun",
                                      f"claude-code:{claude_session}").messages()

    def wfrun(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(WFRUN), "--project", str(self.project), *args],
                              capture_output=True, text=True, timeout=60,
                              env={**os.environ, CLOCK_FILE_ENV: self.clock.path})


@pytest.fixture
def cc(tmp_path: Path) -> Iterator[ClaudeWorld]:
    assert CLAUDE.exists(), "Claude Code is not installed; run ./scripts/setup"
    (tmp_path / "home").mkdir()
    project = tmp_path / "proj"
    (project / ".wfrun" / "workflows").mkdir(parents=True)
    clock = FileClock(str(tmp_path / "clock"))
    clock.set(1_800_000_000.0)
    server = FakeAnthropic().start()
    world = ClaudeWorld(tmp_path, server, clock)
    done = subprocess.run([str(WFRUN), "--project", str(project), "integrate", "claude-code"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    # The user has trusted the project (docs/hosts.md: Claude Code applies a project's
    # permissions only then): what accepting Claude's trust dialog once writes.
    (tmp_path / "home" / ".claude.json").write_text(json.dumps(
        {"projects": {str(project): {"hasTrustDialogAccepted": True}}}))
    try:
        yield world
    finally:
        server.stop()
    assert not server.script_errors, server.script_errors


def _idle_ticks() -> tuple[int, int] | None:
    """(idle, total) clock ticks of all cores since boot (/proc/stat), None if unknown."""
    try:
        fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()
    except OSError:
        return None
    ticks = [int(v) for v in fields[1:]]
    return ticks[3] + ticks[4], sum(ticks)  # idle + iowait, all


@pytest.fixture
def busy_cores() -> Iterator[int]:
    """Every core busy for the test's length: Claude Code's wait for the MCP server and
    its hooks must hold on a loaded machine (issue 33).

    The busy loops fill only what is idle. A watcher reads the cores' idle time every
    0.2 s and starts another loop (up to one per core) whenever they were idle for more
    than a tenth of it; the first look is taken before the test starts. On a quiet
    machine that is one loop per core from the start, as it always was; on a machine
    already kept busy (CI's own busy loops, issue 34 item 11) it adds no loop, where
    ten tests' worth of extra loops took about a core-minute from the tests beside them.
    Without /proc/stat, one loop per core.
    """
    cores = os.cpu_count() or 2
    loops: list[subprocess.Popen[bytes]] = []
    stop = threading.Event()

    def add(count: int) -> None:
        for _ in range(min(count, cores - len(loops))):
            loops.append(subprocess.Popen([sys.executable, "-c", "while True: pass"]))

    def idle_cores(window: float) -> float | None:
        before = _idle_ticks()
        if stop.wait(window) or before is None or (after := _idle_ticks()) is None:
            return None
        idle, total = after[0] - before[0], after[1] - before[1]
        return cores * idle / total if total > 0 else 0.0

    first = idle_cores(0.2)
    add(cores if first is None else math.ceil(first - 0.1 * cores))

    def watch() -> None:
        while not stop.is_set() and len(loops) < cores:
            idle = idle_cores(0.2)
            if idle is not None and idle > 0.1 * cores:
                add(math.ceil(idle - 0.1 * cores))

    watcher = threading.Thread(target=watch, name="busy-cores", daemon=True)
    if first is not None:
        watcher.start()
    try:
        yield cores
    finally:
        stop.set()
        if watcher.is_alive():
            watcher.join(timeout=5)
        for loop in loops:
            loop.kill()
        for loop in loops:
            loop.wait()


# -- reading what the model was sent ----------------------------------------------------
def feedback_texts(body: Body) -> list[str]:
    """Every user-side text of the conversation (prompts, hook feedback, contexts)."""
    from fakes.anthropic_server import blocks

    out = []
    for message in body.get("messages", []):
        if message.get("role") != "user":
            continue
        for block in blocks(message):
            if block.get("type") == "text":
                out.append(str(block.get("text", "")))
    return out


def answer(text: str = "", *calls: tuple[str, dict[str, Any]]) -> Answer:
    return Answer(text, list(calls))
