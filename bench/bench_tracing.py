"""What OpenTelemetry tracing costs a run (issue 40): CPU per run, tracing off vs on.

    .venv/bin/python bench/bench_tracing.py               # 3 process pairs x 12 block pairs
    .venv/bin/python bench/bench_tracing.py --procs 4 --pairs 20 --block 40
    .venv/bin/python bench/bench_tracing.py --shell       # shell nodes: a step that does work
    .venv/bin/python bench/bench_tracing.py --smoke       # tiny sizes: the code paths only
    .venv/bin/python bench/bench_tracing.py --instructions  # + instructions per run
    .venv/bin/python bench/bench_tracing.py --parts       # the run thread's and encoding's CPU
    .venv/bin/python bench/bench_tracing.py --cli         # a `wfrun run` process per run
    .venv/bin/python bench/bench_tracing.py --host --instructions --pairs 12 --block 20
                                       # one process draining runs, on/off by turns
    .venv/bin/python bench/bench_tracing.py --root DIR ...  # `runner` from DIR

How it measures, so that another machine of this kind gets the same figure:

- Tracing is switched on the way a user does it: a worker process started with
  `OTEL_EXPORTER_OTLP_ENDPOINT` naming a collector fake on 127.0.0.1 (its own process,
  tests/fakes/otlp_receiver.py: a threaded HTTP server that decodes every request with
  `opentelemetry-proto`, as a collector does), the other worker with no `OTEL_*` at all.
  Both run `Engine(durability="full")` runs of a 20-node chain (21 spans a run: the run
  and its nodes) in folders under /var/tmp (file creation under a crowded /tmp costs
  10x more and varies, bench/benchkit.py `file_create_cost`).
- CPU, not wall: each worker reads `time.process_time()` (every thread of it: the run's,
  the exporter's) plus `getrusage(RUSAGE_CHILDREN)` (its shell steps) around a block of
  runs. An "on" block ends when its spans are encoded and the collector has answered,
  so deferred work is counted. The collector's CPU is not wfrun's and is not counted.
- Interleaved pairs: the driver asks the two workers for one block each, in a random
  order per pair (seeded), so a minute's load hits both; the figure is the median of
  the pairs' own on/off ratios, with their quartiles. Several process pairs (`--procs`)
  so a process's memory layout and hash seed (fixed per pair, the same for both) are
  sampled too; each pair's median is printed, their spread is the figure's.
- `--cli`: the cost a `wfrun run` user sees, start-up included (setting tracing up,
  the exit's last send): one `python -m runner run` process per run of the same
  chain in one project, off and on in a random order per pair, CPU from
  `RUSAGE_CHILDREN` (user + system) around each; with `--instructions`, one process
  a mode under callgrind too.
- Instructions per run (`--instructions`): `perf stat -e instructions:u` when the CPU
  exposes its counters; where it does not (a VM, as here: `<not supported>`), valgrind's
  callgrind, the documented fallback. Two counts a mode (FEW and FEW + 200 runs, one
  process each, each from a collected heap) whose difference leaves out start-up;
  all threads, user space, one hash seed, no export timer (batches go when full).

- `--host`: the cost inside a long-lived worker (a host draining many runs), taken
  where the process-to-process noise cannot reach it: ONE process, tracing set up
  from the environment once, runs in blocks with tracing on and off by turns (an
  "off" block's runs get the engine's observer unchanged, as with no endpoint),
  interleaved pairs in a random order, each block from a collected heap and ending
  when its spans are encoded and answered. CPU per block natively; with
  `--instructions` the same blocks again under callgrind, one count a block
  (`--dump-before=getsid`: the worker calls `os.getsid` at each block's start and
  nothing else calls it; the run's timed state.json rewrite held to its native
  behaviour, none mid-run, where callgrind's slowness would make it fire every few
  nodes, as often as the load allowed). Printed: each measure's per-run difference
  (on - off, the mean of the pairs') with its 95 % confidence interval (Student's t
  over the pairs).

Aim (issue 40): tracing on costs <= 10 % CPU per run.
"""

from __future__ import annotations

import argparse
import gc
import math
import os
import random
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))

from benchkit import machine, use_root  # noqa: E402

ROOT = use_root()  # `--root DIR`: `runner` from an older checkout (before/after)

NODES = 20
AIM_PERCENT = 10.0
FEW = 3  # runs of the smaller instruction count (--instructions)
WARM = 20  # runs before the first block: imports, template environments, the connection


def _runs_parent() -> str | None:
    var = Path("/var/tmp")
    return str(var) if var.is_dir() and os.access(var, os.W_OK) else None


def _clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("OTEL_", "WFRUN_", "TRACEPARENT"))}
    env.update(extra)
    return env


# -- the collector fake (its own process) -----------------------------------------

def collector() -> None:
    """`--collector`: a real OTLP/HTTP receiver; prints its endpoint, then answers
    `count` on stdin with the spans it decoded so far; exits at EOF."""
    from fakes.otlp_receiver import OtlpReceiver

    class Counting(OtlpReceiver):
        decoded = 0

        def take(self, request: Any) -> None:  # decoded, counted, not kept
            n = sum(len(s.spans) for r in request.resource_spans for s in r.scope_spans)
            with self._lock:
                self.requests += 1
                Counting.decoded += n

    receiver = Counting().start()
    print(receiver.endpoint, flush=True)
    for line in sys.stdin:
        if line.strip() == "count":
            print(f"{Counting.decoded} {receiver.requests}", flush=True)
    receiver.stop()


# -- a worker: one mode, many blocks -----------------------------------------------

def chain(folder: Path, n: int, shell: bool = False) -> Any:
    from runner.compiler import Compiler

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


class Worker:
    """The runs of one mode in this process; tracing (if any) from the environment."""

    def __init__(self, folder: Path, nodes: int, shell: bool) -> None:
        from runner.engine import Engine, _tracing

        self.tracing = _tracing.active()
        self.definition = chain(folder, nodes, shell)
        self.engine = Engine(runs_dir=folder / "runs", project_root=folder)

    def flush(self) -> None:
        """Every span made so far encoded and sent (an older runner: its SDK provider)."""
        if self.tracing is None:
            return
        if hasattr(self.tracing, "flush"):
            self.tracing.flush()
        else:
            self.tracing.provider.force_flush()

    def runs(self, n: int) -> float:
        """Runs `n` runs and sends their spans; the CPU seconds this thread spent on
        the runs themselves (the flush left out: it is the exporter's work)."""
        t0 = time.thread_time()
        for _ in range(n):
            outcome = self.engine.start(self.definition)
            if outcome.status != "completed":
                sys.exit(f"a run ended {outcome.status}")
        mine = time.thread_time() - t0
        self.flush()  # the block's spans sent: their export is counted
        return mine

    def block(self, n: int) -> tuple[float, float, float, float]:
        """Ms per run: CPU (this process, all threads, and its children), the run
        thread's CPU alone, wall, and user-space CPU (this process and its children)."""
        kids, me = (resource.getrusage(resource.RUSAGE_CHILDREN),
                    resource.getrusage(resource.RUSAGE_SELF))
        c0, w0 = time.process_time(), time.perf_counter()
        mine = self.runs(n)
        cpu, wall = time.process_time() - c0, time.perf_counter() - w0
        kids2, me2 = (resource.getrusage(resource.RUSAGE_CHILDREN),
                      resource.getrusage(resource.RUSAGE_SELF))
        cpu += (kids2.ru_utime - kids.ru_utime) + (kids2.ru_stime - kids.ru_stime)
        user = (me2.ru_utime - me.ru_utime) + (kids2.ru_utime - kids.ru_utime)
        return cpu * 1000 / n, mine * 1000 / n, wall * 1000 / n, user * 1000 / n


def worker(nodes: int, shell: bool) -> None:
    """`--worker`: warm up, say `ready`, then for each `N` on stdin run N runs and
    print their ms per run (`Worker.block`)."""
    with tempfile.TemporaryDirectory(prefix="bench-tracing-", dir=_runs_parent()) as tmp:
        work = Worker(Path(tmp), nodes, shell)
        work.runs(WARM)
        print("ready", flush=True)
        for line in sys.stdin:
            print(" ".join(map(str, work.block(int(line)))), flush=True)
        if work.tracing is not None:
            work.tracing.close()


def cycles(mode: str, n: int, nodes: int, shell: bool, collector: bool = True) -> None:
    """`--cycles MODE:N`: N runs and exit (counted from outside). `collector=False`
    (`--gc-off`): no automatic collection during the runs, so a count holds the
    code's own instructions, not whether a full collection fell among the runs."""
    with tempfile.TemporaryDirectory(prefix="bench-tracing-", dir=_runs_parent()) as tmp:
        work = Worker(Path(tmp), nodes, shell)
        if (work.tracing is not None) != (mode == "on"):
            sys.exit(f"--cycles {mode}: tracing is {'on' if work.tracing else 'off'}")
        # From a collected heap: whether a full collection (~1 M instructions a run
        # when it lands among 20 runs) falls inside the counted runs depended on what
        # the start-up left, and moved one mode's count by 10 % between processes.
        gc.collect()
        if not collector:
            gc.disable()
        work.runs(n)
        if work.tracing is not None:
            work.tracing.close()


def host(nodes: int, shell: bool, pairs: int, block: int, seed: int) -> None:
    """`--host-worker`: many runs in this one process (a host draining runs), tracing
    on and off by turns: `pairs` pairs of blocks of `block` runs, each pair's order
    random (seeded). Tracing is set up once from the environment; an "off" block's
    runs get the engine's observer unchanged, as with no endpoint (`_tracing.observer`
    is consulted per run). An "on" block ends when its spans are encoded and the
    collector has answered (the exporter's thread and this one's flush both counted).
    Each block starts with `os.getsid(0)`, which nothing else here calls: under
    callgrind `--dump-before=getsid` closes the previous block's count there. Prints
    one line a block: mode, CPU ms a run (all threads and children), the run
    thread's CPU ms a run, wall ms a run."""
    from runner.engine import _runner, _tracing

    if os.environ.get("BENCH_TRACING_SLOWED"):
        # Under callgrind a run is ~50x slower, so the run's state.json rewrite, which
        # waits STATE_EVERY (0.1 s) between node ends, fell every few nodes, as many
        # times as the block's speed (the machine's load, and tracing's own slowing)
        # allowed: a 20-node run natively takes ~5 ms and rewrites on no timer. The
        # native behaviour, at every speed.
        _runner.STATE_EVERY = 3600.0
    with tempfile.TemporaryDirectory(prefix="bench-tracing-", dir=_runs_parent()) as tmp:
        work = Worker(Path(tmp), nodes, shell)
        tracing = work.tracing
        if tracing is None:
            sys.exit("--host-worker: tracing is off (OTEL_EXPORTER_OTLP_ENDPOINT unset)")
        for mode in ("on", "off"):  # warm both paths: imports, the connection
            _tracing.current = tracing if mode == "on" else None
            work.tracing = _tracing.current
            work.runs(WARM)
        order = random.Random(seed)
        for _ in range(pairs):
            modes = ["off", "on"]
            order.shuffle(modes)
            for mode in modes:
                _tracing.current = tracing if mode == "on" else None
                work.tracing = _tracing.current
                # Each block from a collected heap, outside its count: whether a full
                # collection (several M instructions) lands in a block then depends on
                # what the block's own runs allocate, not on what came before.
                gc.collect()
                os.getsid(0)  # the block's first instruction count starts here
                cpu, thread, wall, _ = work.block(block)
                print(f"{mode} {cpu} {thread} {wall}", flush=True)
        os.getsid(0)  # and the last block's ends here
        _tracing.current = work.tracing = tracing
        tracing.close()


# -- the driver ----------------------------------------------------------------------

class Child:
    def __init__(self, argv: list[str], env: dict[str, str]) -> None:
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     env=env, text=True, bufsize=1)

    def ask(self, line: str | None = None) -> str:
        assert self.proc.stdin is not None
        assert self.proc.stdout is not None
        if line is not None:
            self.proc.stdin.write(line + "\n")
            self.proc.stdin.flush()
        answer = self.proc.stdout.readline()
        if not answer:
            sys.exit(f"{self.proc.args[2:5]} ended ({self.proc.wait()})")
        return answer.strip()

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        if self.proc.wait(timeout=60) != 0:
            sys.exit(f"{self.proc.args[2:5]} exited {self.proc.returncode}")


def _me(*args: str) -> list[str]:
    return [sys.executable, __file__, "--root", str(ROOT), *args]


def quartiles(values: list[float]) -> tuple[float, float, float]:
    if len(values) < 2:
        return values[0], values[0], values[0]
    q1, q2, q3 = statistics.quantiles(values, n=4, method="inclusive")
    return q1, q2, q3


def compare(endpoint: str, args: argparse.Namespace) -> dict[str, Any]:
    """The interleaved pairs: per process pair, `pairs` blocks each way."""
    shape = ["--nodes", str(args.nodes), *(["--shell"] if args.shell else [])]
    order = random.Random(args.seed)
    ratios: list[float] = []
    per_procs: list[float] = []
    cpu: dict[str, list[float]] = {"off": [], "on": []}
    wall: dict[str, list[float]] = {"off": [], "on": []}
    thread: dict[str, list[float]] = {"off": [], "on": []}  # the run's thread alone
    user: dict[str, list[float]] = {"off": [], "on": []}  # user space only
    for p in range(args.procs):
        seed = str(args.seed + p)  # one layout per pair: the same for off and on
        workers = {"off": Child(_me("--worker", *shape), _clean_env(PYTHONHASHSEED=seed)),
                   "on": Child(_me("--worker", *shape), _clean_env(
                       PYTHONHASHSEED=seed, OTEL_EXPORTER_OTLP_ENDPOINT=endpoint))}
        for child in workers.values():
            if child.ask() != "ready":
                sys.exit("a worker did not start")
        mine: list[float] = []
        for _ in range(args.pairs):
            got: dict[str, float] = {}
            modes = ["off", "on"]
            order.shuffle(modes)
            for mode in modes:
                c, t, w, u = (float(x) for x in workers[mode].ask(str(args.block)).split())
                user[mode].append(u)
                got[mode] = c
                cpu[mode].append(c)
                thread[mode].append(t)
                wall[mode].append(w)
            if got["off"] > 0:  # CPU time is counted in ticks: a tiny block may read 0
                mine.append(got["on"] / got["off"] - 1)
        for child in workers.values():
            child.close()
        ratios += mine
        per_procs.append(statistics.median(mine or [math.nan]))
    return {"ratios": ratios, "per_procs": per_procs, "cpu": cpu, "wall": wall,
            "thread": thread, "user": user}


def _cli_project(folder: Path, nodes: int, shell: bool) -> tuple[list[str], dict[str, str]]:
    """A project holding the chain, and the `wfrun run` command that runs it once
    (`runner` from ROOT: `--root` works here too)."""
    flows = folder / "proj" / ".wfrun" / "workflows"
    flows.mkdir(parents=True)
    chain(folder, nodes, shell)  # compiles: the chain is valid before any process runs
    (flows / "chain.yaml").write_text((folder / "chain.yaml").read_text())
    env = _clean_env(WFRUN_HOME=str(folder / "home"), PYTHONPATH=str(ROOT))
    return [sys.executable, "-m", "runner", "run", "chain", "-q"], env


def _count(argv: list[str], env: dict[str, str], cwd: Path | None = None) -> tuple[int, str]:
    """User-space instructions of one process (all threads): perf where the CPU
    counts them, else callgrind."""
    if shutil.which("perf"):
        out = subprocess.run(["perf", "stat", "-x,", "-e", "instructions:u", *argv],
                             capture_output=True, text=True, check=False, env=env, cwd=cwd)
        found = re.search(r"^(\d+),[^,]*,instructions:u", out.stderr, re.M)
        if out.returncode == 0 and found:
            return int(found.group(1)), "perf stat instructions:u"
    if shutil.which("valgrind") is None:
        sys.exit("neither perf's instruction counter nor valgrind is available "
                 "(apt-get install valgrind)")
    out = subprocess.run(["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null",
                          *argv], capture_output=True, text=True, check=False, env=env, cwd=cwd)
    found = re.search(r"Collected\s*:\s*(\d+)", out.stderr)
    if out.returncode != 0 or found is None:
        sys.exit(f"valgrind failed ({out.returncode}): {out.stderr.strip()[-400:]}")
    return int(found.group(1)), "callgrind (perf: no instruction counter here)"


def cli(endpoint: str, args: argparse.Namespace) -> dict[str, Any]:
    """`--cli`: `pairs` x `procs` pairs of `wfrun run` processes, off and on in a
    random order per pair; CPU ms per process (the children's rusage)."""
    order = random.Random(args.seed)
    cpu: dict[str, list[float]] = {"off": [], "on": []}
    ratios: list[float] = []
    counts: dict[str, tuple[int, str]] = {}
    with tempfile.TemporaryDirectory(prefix="bench-tracing-cli-", dir=_runs_parent()) as tmp:
        argv, env = _cli_project(Path(tmp), args.nodes, args.shell)
        envs = {"off": env, "on": {**env, "OTEL_EXPORTER_OTLP_ENDPOINT": endpoint}}
        cwd = Path(tmp) / "proj"

        def one(mode: str) -> float:
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            done = subprocess.run(argv, env=envs[mode], cwd=cwd, capture_output=True,
                                  text=True, check=False)
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            if done.returncode != 0:
                sys.exit(f"wfrun run ({mode}) exited {done.returncode}: {done.stderr[-400:]}")
            return ((after.ru_utime - before.ru_utime)
                    + (after.ru_stime - before.ru_stime)) * 1000

        for mode in ("off", "on"):  # warm: byte-code caches, the store file
            one(mode)
        for _ in range(args.procs * args.pairs):
            modes = ["off", "on"]
            order.shuffle(modes)
            got = {mode: one(mode) for mode in modes}
            for mode, used in got.items():
                cpu[mode].append(used)
            if got["off"] > 0:
                ratios.append(got["on"] / got["off"] - 1)
        if args.instructions and not args.smoke:
            for mode in ("off", "on"):
                counts[mode] = _count(argv, {**envs[mode], "PYTHONHASHSEED": "0"}, cwd)
    # Runs traced: the warm one, one a pair, and the counted one.
    return {"cpu": cpu, "ratios": ratios, "counts": counts,
            "traced": 1 + args.procs * args.pairs + ("on" in counts)}


def instructions(mode: str, n: int, args: argparse.Namespace, endpoint: str) -> tuple[int, str]:
    """User-space instructions of one process doing `n` runs `mode` (all threads),
    by perf where the CPU counts them, else by callgrind; and which counted."""
    argv = _me("--cycles", f"{mode}:{n}", "--nodes", str(args.nodes),
               *(["--shell"] if args.shell else []))
    extra = {"PYTHONHASHSEED": "0"}  # string hashing decides dict probes: one seed
    if mode == "on":
        # Under callgrind a run takes ~50x as long, so the exporter's 5 s timer would
        # send a request every few runs where at native speed a batch fills first.
        extra.update(OTEL_EXPORTER_OTLP_ENDPOINT=endpoint, OTEL_BSP_SCHEDULE_DELAY="3600000")
    return _count(argv, _clean_env(**extra))


def parts(runs: int, nodes: int) -> tuple[float, float]:
    """CPU µs per run on the run's thread (the observer) and encoding its spans: `runs`
    runs' events fed to a real `Tracing.observer`, then the records it queued encoded
    420 at a time (a block's worth), nothing sent."""
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
            attempt = f"{random.getrandbits(64):016x}"  # as runner/engine/_nodes.py makes it
            events.append(({"type": "node_started", "node": f"n{n}", "at": iso(now),
                            "attempt": attempt, "payload": {}}, state))
            now += 0.00025
            events.append(({"type": "node_finished", "node": f"n{n}", "at": iso(now),
                            "attempt": attempt,
                            "payload": {"kind": "compute", "outcome": "ok", "retry": 0,
                                        "duration_ms": 0, "output": n}}, state))
        events.append(({"type": "run_completed", "at": iso(now), "payload": {}}, state))
    c0 = time.process_time()
    for event, state in events:
        observe(event, state)
    hot = time.process_time() - c0
    queued, encode = list(tracing.exporter._queue), tracing._encode
    tracing.exporter._queue.clear()
    c0 = time.process_time()
    for i in range(0, len(queued), 420):
        encode(queued[i:i + 420])
    return hot / runs * 1e6, (time.process_time() - c0) / runs * 1e6


_T975 = {1: 12.71, 2: 4.30, 3: 3.18, 4: 2.78, 5: 2.57, 6: 2.45, 7: 2.36, 8: 2.31,
         9: 2.26, 10: 2.23, 12: 2.18, 15: 2.13, 20: 2.09, 25: 2.06, 30: 2.04, 40: 2.02,
         60: 2.00}  # Student's t, 97.5 %, by degrees of freedom


def interval(values: list[float]) -> tuple[float, float]:
    """The mean of `values` and the half-width of its 95 % confidence interval
    (Student's t: the pairs' differences are independent samples of one cost)."""
    mean = statistics.fmean(values)
    if len(values) < 2:
        return mean, math.inf
    df = len(values) - 1
    t = _T975[max(k for k in _T975 if k <= df)] if df <= 60 else 1.96
    return mean, t * statistics.stdev(values) / math.sqrt(len(values))


def _host_argv(args: argparse.Namespace) -> list[str]:
    return _me("--host-worker", "--nodes", str(args.nodes), "--pairs", str(args.pairs),
               "--block", str(args.block), "--seed", str(args.seed),
               *(["--shell"] if args.shell else []))


def _blocks(lines: str) -> list[tuple[str, list[float]]]:
    out = []
    for line in lines.splitlines():
        mode, *numbers = line.split()
        out.append((mode, [float(x) for x in numbers]))
    return out


def _pairs(modes: list[str], values: list[float]) -> list[float]:
    """on - off of each interleaved pair (two consecutive blocks, either order)."""
    diffs = []
    for i in range(0, len(modes) - 1, 2):
        got = dict(zip(modes[i:i + 2], values[i:i + 2], strict=True))
        diffs.append(got["on"] - got["off"])
    return diffs


def host_cpu(endpoint: str, args: argparse.Namespace) -> list[tuple[str, list[float]]]:
    """`--host`: the blocks of one process, natively (CPU times)."""
    env = _clean_env(PYTHONHASHSEED=str(args.seed), OTEL_EXPORTER_OTLP_ENDPOINT=endpoint)
    done = subprocess.run(_host_argv(args), env=env, capture_output=True, text=True,
                          check=False)
    if done.returncode != 0:
        sys.exit(f"the host worker exited {done.returncode}: {done.stderr[-600:]}")
    return _blocks(done.stdout)


def host_instructions(endpoint: str, args: argparse.Namespace) -> tuple[list[str], list[int]]:
    """`--host --instructions`: the same blocks under callgrind, one count a block
    (`--dump-before=getsid`: the worker calls it at each block's start and after the
    last); all threads, user space. The export timer is off (a block's spans go in
    its flush, or as a batch fills): a run is ~50x slower under callgrind, and the
    5 s timer would send a request every few runs where natively a batch fills."""
    if shutil.which("valgrind") is None:
        sys.exit("--instructions needs valgrind's callgrind (apt-get install valgrind); "
                 "perf has no instruction counter on this VM")
    env = _clean_env(PYTHONHASHSEED=str(args.seed), OTEL_EXPORTER_OTLP_ENDPOINT=endpoint,
                     OTEL_BSP_SCHEDULE_DELAY="3600000", BENCH_TRACING_SLOWED="1")
    with tempfile.TemporaryDirectory(prefix="bench-tracing-cg-") as tmp:
        out = Path(tmp) / "callgrind.out"
        done = subprocess.run(["valgrind", "--tool=callgrind", "--dump-before=getsid",
                               "--dump-line=no", f"--callgrind-out-file={out}",
                               *_host_argv(args)],
                              env=env, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            sys.exit(f"callgrind exited {done.returncode}: {done.stderr[-600:]}")
        modes = [mode for mode, _ in _blocks(done.stdout)]
        counts = []
        for n in range(1, len(modes) + 2):  # .1: start-up and warm-up; then a block each
            found = re.search(r"^summary:\s*(\d+)", (Path(f"{out}.{n}")).read_text(), re.M)
            if found is None:
                sys.exit(f"no count in callgrind's dump {n}")
            counts.append(int(found.group(1)))
    return modes, counts[1:]


def report_host(endpoint: str, sink: Child, args: argparse.Namespace) -> None:
    blocks = host_cpu(endpoint, args)
    modes = [mode for mode, _ in blocks]
    counted = None
    if args.instructions:
        counted = host_instructions(endpoint, args)
    decoded, requests = (int(x) for x in sink.ask("count").split())
    sink.close()
    runs = (WARM + args.pairs * args.block) * (2 if counted else 1)
    if decoded != runs * (args.nodes + 1):
        sys.exit(f"the collector decoded {decoded} spans, not {runs * (args.nodes + 1)}")
    kind = "shell (`true`)" if args.shell else "compute"
    print(f"machine: {machine()}; load average {os.getloadavg()[0]:.1f}")
    print(f"runner imported from {ROOT}")
    print(f"one process (a host draining runs), tracing on and off by turns: {args.pairs} "
          f"interleaved block pairs x {args.block} runs of a {args.nodes}-node {kind} chain "
          f"({args.nodes + 1} spans a run); the collector decoded {decoded} spans in "
          f"{requests} requests")
    for name, column in (("CPU (all threads)", 0), ("the run's thread", 1), ("wall", 2)):
        values = [numbers[column] for _, numbers in blocks]
        off = statistics.fmean(v for m, v in zip(modes, values, strict=True) if m == "off")
        mean, half = interval(_pairs(modes, values))
        print(f"{name} per run: off {off:.3f} ms, on - off {mean * 1000:+.0f} µs "
              f"± {half * 1000:.0f} (95 % CI) = {mean / off * 100:+.1f} % "
              f"({(mean - half) / off * 100:+.1f} .. {(mean + half) / off * 100:+.1f} %)")
    if counted:
        modes, counts = counted
        per_run = [c / args.block for c in counts]
        off = statistics.fmean(v for m, v in zip(modes, per_run, strict=True) if m == "off")
        mean, half = interval(_pairs(modes, per_run))
        print(f"instructions per run (callgrind, user space, all threads; "
              f"{args.pairs * args.block} runs a mode): off {off / 1e6:.3f} M, on - off "
              f"{mean / 1e6:+.3f} M ± {half / 1e6:.3f} (95 % CI) = {mean / off * 100:+.2f} % "
              f"({(mean - half) / off * 100:+.2f} .. {(mean + half) / off * 100:+.2f} %; "
              f"aim <= {AIM_PERCENT:.0f} %)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--procs", type=int, default=3,
                        help="process pairs (off and on workers), default 3")
    parser.add_argument("--pairs", type=int, default=12,
                        help="interleaved block pairs per process pair, default 12")
    parser.add_argument("--block", type=int, default=40, help="runs per block, default 40")
    parser.add_argument("--seed", type=int, default=1, help="the blocks' order; hash seeds")
    parser.add_argument("--shell", action="store_true",
                        help="shell nodes (`true`) instead of trivial compute nodes")
    parser.add_argument("--instructions", action="store_true",
                        help="also count instructions per run off and on")
    parser.add_argument("--counted", type=int, default=200,
                        help="runs the instruction count covers a mode, default 200 (a full "
                             "collection lands among them: fewer runs, a coarser figure)")
    parser.add_argument("--nodes", type=int, default=NODES, help=argparse.SUPPRESS)
    parser.add_argument("--gc-off", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--host", action="store_true",
                        help="one process draining runs, tracing on and off by turns "
                             "(--pairs x --block); with --instructions, callgrind's count "
                             "a block; per-run deltas with 95 %% confidence intervals")
    parser.add_argument("--host-worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--collector", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--cycles", help=argparse.SUPPRESS)  # MODE:N, counted from outside
    parser.add_argument("--parts", action="store_true",
                        help="only the in-process parts: CPU per run on the run's thread "
                             "and encoding, 500 runs' events fed to the observer")
    parser.add_argument("--cli", action="store_true",
                        help="a `wfrun run` process per run (start-up and exit counted); "
                             "--procs x --pairs process pairs")
    parser.add_argument("--smoke", action="store_true")
    args = parser.parse_args()
    try:
        import opentelemetry.proto
        import opentelemetry.sdk  # noqa: F401
    except ImportError:
        print("skipped: the OpenTelemetry SDK is not installed (pip install 'wfrun[otel]')")
        return
    if args.collector:
        return collector()
    if args.worker:
        return worker(args.nodes, args.shell)
    if args.host_worker:
        return host(args.nodes, args.shell, args.pairs, args.block, args.seed)
    if args.cycles is not None:
        mode, n = args.cycles.split(":")
        return cycles(mode, int(n), args.nodes, args.shell, not args.gc_off)
    if args.parts:
        hot, encoding = parts(5 if args.smoke else 500, args.nodes)
        print(f"runner imported from {ROOT}")
        print(f"per run of {args.nodes} nodes ({args.nodes + 1} spans): the run's thread "
              f"{hot:.0f} µs, encoding {encoding:.0f} µs (CPU, in process, nothing sent)")
        return
    if args.smoke:
        args.procs, args.pairs, args.block, args.nodes = 1, 2, 2, 3

    sink = Child(_me("--collector"), _clean_env())
    endpoint = sink.ask()
    if args.host:
        return report_host(endpoint, sink, args)
    if args.cli:
        return report_cli(sink, cli(endpoint, args), args)
    found = compare(endpoint, args)
    decoded, requests = (int(x) for x in sink.ask("count").split())
    runs = args.procs * (WARM + args.pairs * args.block)
    expected = runs * (args.nodes + 1)
    if decoded != expected:
        sys.exit(f"the collector decoded {decoded} spans, not {expected}")
    counts: dict[str, tuple[int, str]] = {}
    if args.instructions and not args.smoke:
        for mode in ("off", "on"):
            few, how = instructions(mode, FEW, args, endpoint)
            more, how = instructions(mode, FEW + args.counted, args, endpoint)
            counts[mode] = ((more - few) // args.counted, how)
    sink.close()

    ratios, cpu, wall = found["ratios"], found["cpu"], found["wall"]
    q1, median, q3 = quartiles(ratios or [math.nan])
    kind = "shell (`true`)" if args.shell else "compute"
    print(f"machine: {machine()}; load average {os.getloadavg()[0]:.1f}")
    print(f"runner imported from {ROOT}")
    print(f"{args.procs} process pair(s) x {args.pairs} interleaved block pairs x "
          f"{args.block} runs of a {args.nodes}-node {kind} chain ({args.nodes + 1} spans "
          f"a run); the collector decoded {decoded} spans in {requests} requests")
    print(f"CPU per run (medians): off {statistics.median(cpu['off']):.2f} ms, "
          f"on {statistics.median(cpu['on']):.2f} ms; wall off "
          f"{statistics.median(wall['off']):.2f} ms, on {statistics.median(wall['on']):.2f} ms")
    print(f"tracing's CPU cost, median of {len(ratios)} pairs' on/off: {median * 100:+.1f} % "
          f"(quartiles {q1 * 100:+.1f} .. {q3 * 100:+.1f} %; aim <= {AIM_PERCENT:.0f} %)")
    user = found["user"]
    # A smoke block is a few milliseconds: its user time may read 0 at the clock's tick.
    q1, median, q3 = quartiles([b / a - 1 for a, b in zip(user["off"], user["on"], strict=True)
                                if a > 0] or [math.nan])
    print(f"user-space CPU alone (the kernel's share is mostly the trace's fsyncs, which "
          f"swing with the disk's other users): off {statistics.median(user['off']):.2f} ms, "
          f"on {statistics.median(user['on']):.2f} ms; pairs {median * 100:+.1f} % "
          f"(quartiles {q1 * 100:+.1f} .. {q3 * 100:+.1f} %)")
    thread = found["thread"]
    own = [b / a - 1 for a, b in zip(thread["off"], thread["on"], strict=True) if a > 0] \
        or [math.nan]
    # The rest of a block's CPU, on less off: the exporter's thread and the flush.
    others = (statistics.median(c - t for c, t in zip(cpu["on"], thread["on"], strict=True))
              - statistics.median(c - t for c, t in zip(cpu["off"], thread["off"],
                                                         strict=True)))
    print(f"of which the run's thread {statistics.median(own) * 100:+.1f} % (median of the "
          f"pairs), the exporter's work (its thread, the block's flush) {others * 1000:.0f} "
          "µs a run")
    print("per process pair, median: "
          + ", ".join(f"{r * 100:+.1f} %" for r in found["per_procs"]))
    if counts:
        off, on = counts["off"][0], counts["on"][0]
        print(f"instructions per run ({counts['on'][1]}, user space, all threads): "
              f"off {off / 1e6:.2f} M, on {on / 1e6:.2f} M: {(on - off) / off * 100:+.1f} %")
    if args.smoke:  # the `--cli` and `--host` code paths too
        args.pairs = 1
        sink = Child(_me("--collector"), _clean_env())
        report_cli(sink, cli(sink.ask(), args), args)
        sink = Child(_me("--collector"), _clean_env())
        report_host(sink.ask(), sink, args)


def report_cli(sink: Child, found: dict[str, Any], args: argparse.Namespace) -> None:
    decoded = int(sink.ask("count").split()[0])
    expected = found["traced"] * (args.nodes + 1)
    sink.close()
    if decoded != expected:
        sys.exit(f"the collector decoded {decoded} spans, not {expected}")
    cpu = found["cpu"]
    q1, median, q3 = quartiles(found["ratios"] or [math.nan])
    kind = "shell (`true`)" if args.shell else "compute"
    print(f"machine: {machine()}; load average {os.getloadavg()[0]:.1f}")
    print(f"runner imported from {ROOT}")
    print(f"{len(found['ratios'])} interleaved pairs of `wfrun run` processes, one run of a "
          f"{args.nodes}-node {kind} chain each; the collector decoded {decoded} spans")
    print(f"CPU per process (medians): off {statistics.median(cpu['off']):.1f} ms, "
          f"on {statistics.median(cpu['on']):.1f} ms")
    print(f"tracing's CPU cost per `wfrun run`, median of the pairs' on/off: "
          f"{median * 100:+.1f} % (quartiles {q1 * 100:+.1f} .. {q3 * 100:+.1f} %; "
          f"aim <= {AIM_PERCENT:.0f} %)")
    if found["counts"]:
        off, on = found["counts"]["off"][0], found["counts"]["on"][0]
        print(f"instructions per `wfrun run` ({found['counts']['on'][1]}, user space): "
              f"off {off / 1e6:.0f} M, on {on / 1e6:.0f} M: {(on - off) / off * 100:+.1f} %")


if __name__ == "__main__":
    main()
