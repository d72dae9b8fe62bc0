"""What OpenTelemetry tracing costs a run (issue 40): CPU per run, tracing off vs on.

    .venv/bin/python bench/bench_tracing.py             # 200 runs each way
    .venv/bin/python bench/bench_tracing.py -n 50
    .venv/bin/python bench/bench_tracing.py -n 400 --rounds 20  # more, smaller blocks
    .venv/bin/python bench/bench_tracing.py --shell     # shell nodes: a step that does work
    .venv/bin/python bench/bench_tracing.py --smoke     # tiny sizes: the code paths only
    .venv/bin/python bench/bench_tracing.py --instructions       # + valgrind counts
    .venv/bin/python bench/bench_tracing.py --parts   # the run thread's and encoding's CPU
    .venv/bin/python bench/bench_tracing.py --root DIR ...       # `runner` from DIR

One process, `Engine(durability="full")` runs of a 20-node compute chain (21 spans
each: the run and its nodes), in blocks alternating off and on so drift hits both
alike; the figures are the median block's CPU per run each way, and the median of
the rounds' own on/off ratios (each "on" block against the "off" block just before
it: the load of that minute hits both). On:
the real `runner.engine._tracing.Tracing` (the SDK's batch processor and its OTLP/HTTP
exporter) sending to a receiver on 127.0.0.1 in this process that takes each request
and answers 200 (its own CPU is counted too: an upper bound). CPU is
time.process_time() over all of the process's threads (the exporter's included),
divided by the runs; each "on" block's spans are flushed before its clock stops.

Aim (issue 40): tracing on costs <= 10 % CPU per run.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from benchkit import machine, use_root  # noqa: E402

ROOT = use_root()  # `--root DIR`: `runner` from an older checkout (before/after)

from runner.compiler import Compiler, WorkflowDefinition  # noqa: E402
from runner.engine import Engine  # noqa: E402

NODES = 20
ROUNDS = 5  # blocks of runs, alternating off and on, so drift hits both alike
AIM_PERCENT = 10.0
FEW = 3  # runs of the smaller instruction count (--instructions)


class Sink(BaseHTTPRequestHandler):
    requests = 0

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        Sink.requests += 1
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *_args: Any) -> None:
        pass


def chain(folder: Path, n: int, shell: bool = False) -> WorkflowDefinition:
    lines = ["name: chain", "start: n0", f"max_steps: {n + 10}", "nodes:"]
    lines += [f"  n{i}: {{action: {{shell: [\"true\"]}}}}" if shell else
              f'  n{i}: {{compute: "{{{{ {i} }}}}"}}' for i in range(n)]
    lines += ["edges:"] + [f"  - {{from: n{i}, to: n{i + 1}}}" for i in range(n - 1)]
    path = folder / "chain.yaml"
    path.write_text("\n".join(lines) + "\n")
    result = Compiler().compile_path(path)
    if result.definition is None:
        sys.exit("the chain does not compile")
    return result.definition


class Bench:
    """The receiver, the tracing under test, and an untraced and a traced Engine."""

    def __init__(self, folder: Path, nodes: int, shell: bool, *, timer: bool = True) -> None:
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Sink)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        settings = {"OTEL_EXPORTER_OTLP_ENDPOINT":
                    f"http://127.0.0.1:{self.server.server_address[1]}"}
        if not timer:
            # Under callgrind a run takes ~50x as long, so the exporter's 5 s timer
            # would send a request every few runs where at native speed it sends one
            # per 512 spans: batches go when full, or at the block's flush.
            settings["OTEL_BSP_SCHEDULE_DELAY"] = "3600000"
        os.environ.update(settings)
        try:
            from runner.engine._tracing import Tracing
            self.tracing = Tracing()  # its exporter reads the endpoint now
        finally:
            # Gone before the first run: the engine's own tracing (from the environment)
            # stays off, so "off" is untraced and "on" is traced once.
            for name in settings:
                del os.environ[name]
        self.definition = chain(folder, nodes, shell)
        self.engines = {"off": Engine(runs_dir=folder / "off", project_root=folder),
                        "on": Engine(runs_dir=folder / "on", project_root=folder,
                                     observer=self.tracing.observer(None))}
        for engine in self.engines.values():  # warm-up: imports, template environments
            engine.start(self.definition)
        self.flush()

    def flush(self) -> None:
        """Every span made so far encoded and sent (an older runner: its SDK provider)."""
        if hasattr(self.tracing, "flush"):
            self.tracing.flush()
        else:
            self.tracing.provider.force_flush()

    def runs(self, mode: str, n: int) -> None:
        engine = self.engines[mode]
        for _ in range(n):
            outcome = engine.start(self.definition)
            if outcome.status != "completed":
                sys.exit(f"a run ended {outcome.status}")
        if mode == "on":  # the runs' spans encoded and sent: their export is counted
            self.flush()

    def close(self) -> None:
        self.tracing.close()
        self.server.shutdown()


def parts(runs: int, nodes: int) -> tuple[float, float]:
    """CPU µs per run on the run's thread (the observer) and encoding its spans: `runs`
    runs' events fed to a real `Tracing.observer`, then the records it queued encoded
    420 at a time (a block's worth), nothing sent. An older runner (--root): its SDK
    spans, taken from its batch processor's queue and encoded by its `_otlp.encode`."""
    from runner.clock import iso
    from runner.engine._state import RunState
    from runner.engine._tracing import Tracing

    os.environ.update({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9",
                       "OTEL_BSP_MAX_QUEUE_SIZE": "10000000",
                       "OTEL_BSP_MAX_EXPORT_BATCH_SIZE": "10000000",
                       "OTEL_BSP_SCHEDULE_DELAY": "10000000"})
    tracing: Any = Tracing()
    observe = tracing.observer(None)
    events = []
    now = time.time()
    for r in range(runs):
        state = RunState(f"bench-{r:06d}")
        state.workflow, state.started_at = "chain", iso(now)
        for n in range(nodes):
            events.append(({"type": "node_started", "node": f"n{n}", "at": iso(now),
                            "payload": {}}, state))
            now += 0.00025
            events.append(({"type": "node_finished", "node": f"n{n}", "at": iso(now),
                            "payload": {"kind": "compute", "outcome": "ok", "retry": 0,
                                        "duration_ms": 0, "output": n}}, state))
        events.append(({"type": "run_completed", "at": iso(now), "payload": {}}, state))
    c0 = time.process_time()
    for event, state in events:
        observe(event, state)
    hot = time.process_time() - c0
    if hasattr(tracing, "exporter"):
        queued, encode = list(tracing.exporter._queue), tracing._encode
        tracing.exporter._queue.clear()
    else:  # the SDK's processor (private: this comparison only)
        from runner.engine import _otlp
        inner = tracing.processor._batch_processor._queue
        queued, encode = list(inner), _otlp.encode
        inner.clear()
        tracing.made = 0  # none was meant to be sent: no "not sent" line at exit
    c0 = time.process_time()
    for i in range(0, len(queued), 420):
        encode(queued[i:i + 420])
    return hot / runs * 1e6, (time.process_time() - c0) / runs * 1e6


def instructions(root: Path, mode: str, n: int, nodes: int, shell: bool) -> int:
    """User-space instructions of this script doing `n` runs `mode` (all threads: the
    exporter's and the receiver's too), counted by valgrind's callgrind."""
    argv = [sys.executable, __file__, "--root", str(root), "--cycles", f"{mode}:{n}",
            "--nodes", str(nodes), *(["--shell"] if shell else [])]
    # One hash seed for every count: string hashing decides dict probes, and a random
    # seed moved the same code path's count by several per cent.
    out = subprocess.run(["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null",
                          *argv], capture_output=True, text=True, check=False,
                         env={**os.environ, "PYTHONHASHSEED": "0"})
    found = re.search(r"Collected\s*:\s*(\d+)", out.stderr)
    if out.returncode != 0 or found is None:
        sys.exit(f"valgrind failed ({out.returncode}): {out.stderr.strip()[-400:]}")
    return int(found.group(1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("-n", type=int, default=200, help="runs each way")
    parser.add_argument("--shell", action="store_true",
                        help="shell nodes (`true`) instead of trivial compute nodes")
    parser.add_argument("--instructions", action="store_true",
                        help="also count instructions per run off and on (valgrind)")
    parser.add_argument("--rounds", type=int, default=ROUNDS,
                        help=f"blocks each way, alternating (default {ROUNDS})")
    parser.add_argument("--nodes", type=int, default=NODES, help=argparse.SUPPRESS)
    parser.add_argument("--cycles", help=argparse.SUPPRESS)  # MODE:N, under valgrind
    parser.add_argument("--parts", action="store_true",
                        help="only the in-process parts: CPU per run on the run's thread "
                             "and encoding, 500 runs' events fed to the observer")
    parser.add_argument("--smoke", action="store_true")
    args = parser.parse_args()
    try:
        import opentelemetry.sdk  # noqa: F401
    except ImportError:
        print("skipped: the OpenTelemetry SDK is not installed (pip install 'wfrun[otel]')")
        return
    if args.parts:
        hot, encoding = parts(5 if args.smoke else 500, args.nodes)
        print(f"runner imported from {ROOT}")
        print(f"per run of {args.nodes} nodes ({args.nodes + 1} spans): the run's thread "
              f"{hot:.0f} µs, encoding {encoding:.0f} µs (CPU, in process, nothing sent)")
        return
    if args.cycles is not None:
        mode, n = args.cycles.split(":")
        with tempfile.TemporaryDirectory(prefix="bench-tracing-") as tmp:
            bench = Bench(Path(tmp), args.nodes, args.shell, timer=False)
            bench.runs(mode, int(n))
            bench.close()
        return
    rounds = ROUNDS if args.smoke else args.rounds
    runs, nodes = (rounds, 3) if args.smoke else (args.n, args.nodes)
    with tempfile.TemporaryDirectory(prefix="bench-tracing-") as tmp:
        bench = Bench(Path(tmp), nodes, args.shell)
        cpu: dict[str, list[float]] = {"off": [], "on": []}
        block = max(runs // rounds, 1)
        for _ in range(rounds):
            for mode in ("off", "on"):
                c0 = time.process_time()
                bench.runs(mode, block)
                cpu[mode].append((time.process_time() - c0) * 1000 / block)
        bench.close()
    off, on = statistics.median(cpu["off"]), statistics.median(cpu["on"])
    runs = block * rounds
    paired = statistics.median(b / a for a, b in zip(cpu["off"], cpu["on"], strict=True))
    extra = (on - off) / off * 100 if off else 0.0
    print(f"machine: {machine()}")
    print(f"runner imported from {ROOT}")
    kind = "shell (`true`)" if args.shell else "compute"
    print(f"{runs} runs each way of a {nodes}-node {kind} chain ({nodes + 1} spans a run), "
          f"{Sink.requests} export request(s) received")
    print(f"CPU per run, median block: off {off:.2f} ms, on {on:.2f} ms: {extra:+.1f} % "
          f"(aim <= {AIM_PERCENT:.0f} %); median of the {rounds} rounds' on/off: "
          f"{(paired - 1) * 100:+.1f} %")
    if args.instructions and not args.smoke:
        if shutil.which("valgrind") is None:
            sys.exit("valgrind is not installed: apt-get install valgrind")
        # Two counts a mode, FEW and FEW + counted runs: their difference leaves out
        # what happens once (imports, set-up, the first export's lazy imports).
        counted = max(runs // 10, 5)
        per = {mode: (instructions(ROOT, mode, FEW + counted, nodes, args.shell)
                      - instructions(ROOT, mode, FEW, nodes, args.shell)) / counted
               for mode in ("off", "on")}
        print(f"instructions per run ({counted} runs, callgrind, user space, all threads): "
              f"off {per['off'] / 1e6:.2f} M, on {per['on'] / 1e6:.2f} M: "
              f"{(per['on'] - per['off']) / per['off'] * 100:+.1f} %")


if __name__ == "__main__":
    main()
