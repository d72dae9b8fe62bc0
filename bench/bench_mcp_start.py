"""`wfrun mcp` start-up as Claude Code sees it, quiet and with both cores busy.

    .venv/bin/python bench/bench_mcp_start.py            # figures
    .venv/bin/python bench/bench_mcp_start.py --check    # exit 1 if an aim is missed
    .venv/bin/python bench/bench_mcp_start.py --smoke    # one round of each, no aims
    .venv/bin/python bench/bench_mcp_start.py -n 30 --json

Claude Code spawns `wfrun mcp --client claude-code` (the command `wfrun integrate
claude-code` writes) and gives it about two seconds to answer `initialize`; a
server that misses it has no tool for the whole session (issue 33). Figures, each
measured quiet and then while this script keeps one busy loop per core running:

- initialize: spawn -> `initialize` answered (what Claude Code's wait covers), and
  spawn -> `tools/list` answered;
- hook: `wfrun hook claude-code` (UserPromptSubmit with nothing to deliver) against
  a live server, the whole process;
- tool call: a `workflow list` round trip on a started server, first call (it waits
  for the session to open) and the median of later calls.

The bare interpreter start (`python -c pass`) is printed as the floor.
Aims (issue 33): busy initialize p95 <= 0.5 s, busy hook p50 <= 100 ms.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchkit import machine

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from runner.host.mcp._channel import socket_path

SCRIPT = Path(sys.executable).parent / "wfrun"  # what `wfrun integrate` writes
WFRUN = [str(SCRIPT)] if SCRIPT.exists() else [sys.executable, "-m", "runner"]
AIM_INIT_P95_S = 0.5
AIM_HOOK_P50_MS = 100.0
INIT = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                   "clientInfo": {"name": "bench", "version": "1"}}}


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def _spin() -> None:
    while True:
        pass


@contextmanager
def busy_cores(busy: bool) -> Iterator[None]:
    """One busy loop per core while the block runs (none when not `busy`)."""
    procs = [multiprocessing.Process(target=_spin, daemon=True)
             for _ in range(os.cpu_count() or 2)] if busy else []
    for p in procs:
        p.start()
    try:
        yield
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            p.join()


class Server:
    """A `wfrun mcp --client claude-code` whose Claude process is this script."""

    def __init__(self, root: Path, env: dict[str, str]) -> None:
        self.started = time.perf_counter()
        self.proc = subprocess.Popen([*WFRUN, "--project", str(root), "mcp", "--client",
                                      "claude-code"], cwd=root, env=env,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE)
        self.next_id = 1

    def send(self, message: dict[str, Any]) -> None:
        stdin: IO[bytes] = self.proc.stdin  # type: ignore[assignment]
        stdin.write(json.dumps(message).encode() + b"\n")
        stdin.flush()

    def reply(self) -> dict[str, Any]:
        stdout: IO[bytes] = self.proc.stdout  # type: ignore[assignment]
        line = stdout.readline()
        if not line:
            err = self.proc.stderr.read().decode()[-800:] if self.proc.stderr else ""
            raise SystemExit(f"wfrun mcp exited without answering: {err}")
        answer: dict[str, Any] = json.loads(line)
        if "error" in answer:
            raise SystemExit(f"wfrun mcp answered an error: {answer['error']}")
        return answer

    def request(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        self.next_id += 1
        self.send({"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params})
        return self.reply()

    def close(self) -> None:
        if self.proc.stdin:
            self.proc.stdin.close()
        self.proc.wait(timeout=60)
        for stream in (self.proc.stdout, self.proc.stderr):
            if stream:
                stream.close()


def start(root: Path, env: dict[str, str]) -> tuple[Server, float, float]:
    """A started server, seconds to `initialize` answered and to `tools/list` answered."""
    server = Server(root, env)
    server.send(INIT)
    server.reply()
    init = time.perf_counter() - server.started
    server.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
    tools = server.request("tools/list", {})
    listed = time.perf_counter() - server.started
    assert tools["result"]["tools"][0]["name"] == "workflow", tools
    return server, init, listed


def hook_ms(env: dict[str, str], event: dict[str, Any]) -> float:
    began = time.perf_counter()
    out = subprocess.run([*WFRUN, "hook", "claude-code"], input=json.dumps(event).encode(),
                         env=env, capture_output=True, timeout=60)
    elapsed = (time.perf_counter() - began) * 1000
    if out.returncode != 0 or out.stdout.strip():
        raise SystemExit(f"the hook did not answer 'nothing to deliver': rc={out.returncode} "
                         f"stderr={out.stderr.decode()[-300:]}")
    return elapsed


def measure(root: Path, env: dict[str, str], n: int, session: str) -> dict[str, float]:
    inits, lists, hooks, firsts, calls = [], [], [], [], []
    hook_env = dict(env, CLAUDE_PID=str(os.getpid()), CLAUDE_PROJECT_DIR=str(root))
    event = {"session_id": session, "cwd": str(root), "hook_event_name": "UserPromptSubmit",
             "prompt": "hi", "transcript_path": str(root / "t.jsonl")}
    bare = []
    for _ in range(n):
        began = time.perf_counter()
        subprocess.run([sys.executable, "-c", "pass"], check=True)
        bare.append(time.perf_counter() - began)
        server, init, listed = start(root, env)
        try:
            inits.append(init)
            lists.append(listed)
            began = time.perf_counter()
            server.request("tools/call", {"name": "workflow", "arguments": {"action": "list"}})
            firsts.append(time.perf_counter() - began)
            for _ in range(3):
                began = time.perf_counter()
                server.request("tools/call", {"name": "workflow",
                                              "arguments": {"action": "list"}})
                calls.append(time.perf_counter() - began)
            hooks.append(hook_ms(hook_env, event))
        finally:
            server.close()
    return {"bare_p50_s": statistics.median(bare),
            "initialize_p50_s": statistics.median(inits), "initialize_p95_s": pct(inits, 0.95),
            "tools_list_p50_s": statistics.median(lists),
            "hook_p50_ms": statistics.median(hooks), "hook_p95_ms": pct(hooks, 0.95),
            "first_call_p50_s": statistics.median(firsts),
            "call_p50_ms": statistics.median(calls) * 1000}


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("-n", type=int, default=15, help="server starts per figure")
    ap.add_argument("--smoke", action="store_true", help="one start quiet and busy; no aims")
    ap.add_argument("--check", action="store_true", help="exit 1 if an aim is missed")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    n = 1 if args.smoke else args.n
    figures: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory(prefix="wfrun-bench-mcp-") as tmp:
        root = Path(tmp) / "proj"
        (root / ".wfrun" / "workflows").mkdir(parents=True)
        (root / ".wfrun" / "workflows" / "greet.yaml").write_text(
            'description: Say hi.\nstart: hello\nnodes:\n  hello: {compute: "hi"}\n')
        env = {k: v for k, v in os.environ.items() if not k.startswith(("WFRUN_", "CLAUDE"))}
        session = "0b5e7a1c-bench-0000-0000-00000000mcp0"
        env.update(WFRUN_HOME=str(Path(tmp) / "home"), CLAUDE_CODE_SESSION_ID=session,
                   WFRUN_CLAUDE_PID=str(os.getpid()))
        Path(socket_path(os.getpid())).unlink(missing_ok=True)
        for label, busy in (("quiet", False), ("busy", True)):
            with busy_cores(busy):
                figures[label] = measure(root, env, n, session)
    if args.json:
        print(json.dumps({"machine": machine(), "runs": n, "figures": figures}))
    else:
        print(f"wfrun mcp start-up ({n} starts each; {machine()})")
        for label, f in figures.items():
            print(f"  {label}: python -c pass p50 {f['bare_p50_s'] * 1000:.0f} ms")
            print(f"    initialize answered   p50 {f['initialize_p50_s']:.3f} s   "
                  f"p95 {f['initialize_p95_s']:.3f} s   (tools/list p50 "
                  f"{f['tools_list_p50_s']:.3f} s)")
            print(f"    hook UserPromptSubmit p50 {f['hook_p50_ms']:.0f} ms   "
                  f"p95 {f['hook_p95_ms']:.0f} ms")
            print(f"    workflow list call    first {f['first_call_p50_s']:.3f} s (opens the "
                  f"session)   then p50 {f['call_p50_ms']:.1f} ms")
        print(f"  aims: busy initialize p95 <= {AIM_INIT_P95_S} s, busy hook p50 <= "
              f"{AIM_HOOK_P50_MS:.0f} ms")
    busy = figures["busy"]
    missed = [name for name, bad in (
        ("initialize", busy["initialize_p95_s"] > AIM_INIT_P95_S),
        ("hook", busy["hook_p50_ms"] > AIM_HOOK_P50_MS)) if bad]
    if args.check and not args.smoke and missed:
        print(f"aim missed: {', '.join(missed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
