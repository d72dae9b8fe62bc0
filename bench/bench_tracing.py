"""What OpenTelemetry tracing costs a run (issue 40): CPU per run, tracing off vs on.

    .venv/bin/python bench/bench_tracing.py             # 200 runs each way
    .venv/bin/python bench/bench_tracing.py -n 50
    .venv/bin/python bench/bench_tracing.py --shell     # shell nodes: a step that does work
    .venv/bin/python bench/bench_tracing.py --smoke     # tiny sizes: the code paths only

One process, `Engine(durability="full")` runs of a 20-node compute chain (21 spans
each: the run and its nodes), in blocks alternating off and on so drift hits both
alike; the figure is the median block's CPU per run. On:
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
import statistics
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from benchkit import machine  # noqa: E402

from runner.compiler import Compiler, WorkflowDefinition  # noqa: E402
from runner.engine import Engine  # noqa: E402

NODES = 20
ROUNDS = 5  # blocks of runs, alternating off and on, so drift hits both alike
AIM_PERCENT = 10.0


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("-n", type=int, default=200, help="runs each way")
    parser.add_argument("--shell", action="store_true",
                        help="shell nodes (`true`) instead of trivial compute nodes")
    parser.add_argument("--smoke", action="store_true")
    args = parser.parse_args()
    runs, nodes = (ROUNDS, 3) if args.smoke else (args.n, NODES)
    server = ThreadingHTTPServer(("127.0.0.1", 0), Sink)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    os.environ["OTEL_EXPORTER_OTLP_ENDPOINT"] = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        from runner.engine._tracing import Tracing
        tracing = Tracing()  # its exporter reads the endpoint now
    except ImportError:
        print("skipped: the OpenTelemetry SDK is not installed (pip install 'wfrun[otel]')")
        return
    finally:
        # Gone before the first run: the engine's own tracing (from the environment)
        # stays off, so "off" is untraced and "on" is traced once.
        del os.environ["OTEL_EXPORTER_OTLP_ENDPOINT"]
    with tempfile.TemporaryDirectory(prefix="bench-tracing-") as tmp:
        folder = Path(tmp)
        definition = chain(folder, nodes, args.shell)
        engines = {"off": Engine(runs_dir=folder / "off", project_root=folder),
                   "on": Engine(runs_dir=folder / "on", project_root=folder,
                                observer=tracing.observer(None))}
        for engine in engines.values():  # warm-up: imports, template environments
            engine.start(definition)
        tracing.provider.force_flush()
        cpu: dict[str, list[float]] = {"off": [], "on": []}
        block = max(runs // ROUNDS, 1)
        for _ in range(ROUNDS):
            for mode, engine in engines.items():
                c0 = time.process_time()
                for _ in range(block):
                    outcome = engine.start(definition)
                    if outcome.status != "completed":
                        sys.exit(f"a run ended {outcome.status}")
                if mode == "on":  # the block's spans sent: their export is counted
                    tracing.provider.force_flush()
                cpu[mode].append((time.process_time() - c0) * 1000 / block)
    tracing.close()
    server.shutdown()
    off, on = statistics.median(cpu["off"]), statistics.median(cpu["on"])
    runs = block * ROUNDS
    extra = (on - off) / off * 100 if off else 0.0
    print(f"machine: {machine()}")
    kind = "shell (`true`)" if args.shell else "compute"
    print(f"{runs} runs each way of a {nodes}-node {kind} chain ({nodes + 1} spans a run), "
          f"{Sink.requests} export request(s) received")
    print(f"CPU per run, median block: off {off:.2f} ms, on {on:.2f} ms: {extra:+.1f} % "
          f"(aim <= {AIM_PERCENT:.0f} %)")


if __name__ == "__main__":
    main()
