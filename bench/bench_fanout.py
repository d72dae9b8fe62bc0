"""What a fan-out item costs (issue 37, ADR 0008): figures printed, never asserted.

    .venv/bin/python bench/bench_fanout.py            # 200, 2,000, 10,000 compute items;
                                                      # 1,000 x `sleep 0.1` at 16 at once
    .venv/bin/python bench/bench_fanout.py --smoke    # 200 compute items; 20 x sleep 0.01
    .venv/bin/python bench/bench_fanout.py --instructions [-n 100]  # shell items, callgrind
    .venv/bin/python bench/bench_fanout.py --root DIR ...  # `runner` from DIR (before)

One process, a real `SqliteStore` (WAL, synchronous=FULL) in a temporary project, one
foreground run per figure (`wfrun run` without process start-up). Per-item CPU is the
run's CPU (time.process_time) minus a 1-item map's, over the item count (aim: flat, at
most 1 ms per compute item). A shell item's CPU: a 500-item map of `true` at 16 at
once, the same subtraction (the `true` processes' own CPU is not this process's). The
shell map's wall time is set beside its floor
(items x sleep / max_concurrency), the aim being at most the same work as 1,000 huey
tasks on 16 workers (bench/bench_fanout_hosts.py --part huey runs both, interleaved).

`--instructions`: user-space instructions per shell item (`true`, 16 at once) in the
runner process, counted by valgrind's callgrind (a map of N items minus a map of 1,
each in its own process; the `true` processes are not traced). CPU time moves by tens
of percent between identical runs on a shared VM; the count does not, so it is the
figure to compare two versions by (`--root DIR`). Kernel work (fsync, process start)
is not counted.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

from benchkit import machine, use_root  # bench/ is on sys.path

ROOT = use_root()

from runner.compiler import build_catalog  # noqa: E402
from runner.engine import RunControl  # noqa: E402
from runner.host.runtime._foreground import run_workflow  # noqa: E402
from runner.host.runtime._local import Workspace, open_store  # noqa: E402

COMPUTE = """\
    start: each
    max_steps: 100000
    nodes:
      each:
        map:
          over: "{{ range(input.n) | list }}"
          max_items: 100000
          do: {compute: "{{ {'i': item, 'twice': item * 2} }}"}
"""
SHELL = """\
    start: each
    max_steps: 100000
    nodes:
      each:
        map:
          over: "{{ range(input.n) | list }}"
          max_concurrency: AT_ONCE
          do: {action: {shell: [sleep, "SECONDS"]}}
"""
TRUE = """\
    start: each
    max_steps: 100000
    nodes:
      each:
        map:
          over: "{{ range(input.n) | list }}"
          max_concurrency: 16
          do: {action: {shell: ["true"]}}
"""


def _project(root: Path, flows: dict[str, str]) -> Workspace:
    folder = root / ".wfrun" / "workflows"
    folder.mkdir(parents=True)
    for name, text in flows.items():
        (folder / f"{name}.yaml").write_text(textwrap.dedent(text))
    return Workspace(build_catalog("workflows", root, None), root, root / ".wfrun" / "state")


def _run(ws: Workspace, name: str, n: int) -> tuple[float, float]:
    """(CPU seconds, wall seconds) of one run of `name` over n items."""
    store = open_store(ws)
    try:
        cpu, wall = time.process_time(), time.perf_counter()
        out = run_workflow(ws, store, name, {"n": n}, RunControl())
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    finally:
        store.close()
    assert out.status == "completed", out.error
    return cpu, wall


def _true_map(n: int) -> None:
    """One run of the `true` map over n items (what callgrind counts, imports and all)."""
    with tempfile.TemporaryDirectory() as tmp:
        _run(_project(Path(tmp), {"true": TRUE}), "true", n)


def _counted(n: int) -> int:
    argv = [sys.executable, __file__, "--root", str(ROOT), "--true-map", str(n)]
    out = subprocess.run(["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null",
                          *argv], capture_output=True, text=True, check=False)
    found = re.search(r"Collected\s*:\s*(\d+)", out.stderr)
    if out.returncode != 0 or found is None:
        sys.exit(f"valgrind failed ({out.returncode}): {out.stderr.strip()[-400:]}")
    return int(found.group(1))


def instructions(n: int) -> None:
    if shutil.which("valgrind") is None:
        print("instructions skipped: valgrind is not installed (apt-get install valgrind)")
        return
    base, total = _counted(1), _counted(n)
    print(f"shell items (`true`, {n} at 16 at once, the runner process, callgrind): "
          f"{(total - base) / (n - 1) / 1e6:.3f} M user-space instructions per item")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--smoke", action="store_true", help="small sizes, seconds")
    parser.add_argument("--instructions", action="store_true",
                        help="count a shell item's instructions (callgrind) and stop")
    parser.add_argument("-n", type=int, default=100, help="--instructions: items")
    parser.add_argument("--true-map", type=int, help=argparse.SUPPRESS)  # under valgrind
    args = parser.parse_args()
    if args.true_map is not None:
        _true_map(args.true_map)
        return
    if args.instructions:
        print(f"# bench_fanout  {machine()}  runner from {ROOT}")
        instructions(max(args.n, 2))
        return
    sizes = (200,) if args.smoke else (200, 2_000, 10_000)
    shell_n, at_once, seconds = (20, 4, 0.01) if args.smoke else (1_000, 16, 0.1)
    print(f"# bench_fanout  {machine()}  runner from {ROOT}")
    with tempfile.TemporaryDirectory() as tmp:
        shell = SHELL.replace("AT_ONCE", str(at_once)).replace("SECONDS", str(seconds))
        ws = _project(Path(tmp), {"compute": COMPUTE, "shell": shell, "true": TRUE})
        _run(ws, "compute", 1)  # imports, compiles, the store's first open
        base, _ = _run(ws, "compute", 1)
        print(f"{'compute items':>14} {'run CPU ms':>11} {'CPU ms/item':>12} {'wall ms':>9}")
        for n in sizes:
            cpu, wall = _run(ws, "compute", n)
            print(f"{n:>14,} {cpu * 1000:>11.1f} {(cpu - base) * 1000 / n:>12.3f} "
                  f"{wall * 1000:>9.1f}")
        true_n = 50 if args.smoke else 500
        cpus = sorted((_run(ws, "true", true_n)[0] - base) * 1000 / true_n for _ in range(3))
        print(f"shell items (`true`, {true_n} at 16 at once, this process's CPU, children "
              f"excluded): {cpus[1]:.2f} ms/item (median of 3; {cpus[0]:.2f}-{cpus[2]:.2f})")
        cpu, wall = _run(ws, "shell", shell_n)
        floor = shell_n * seconds / at_once
        print(f"shell map: {shell_n:,} x sleep {seconds} at {at_once} at once: wall "
              f"{wall:.2f} s (floor {floor:.2f} s, {floor / wall:.2f}x of it), CPU "
              f"{cpu * 1000 / shell_n:.2f} ms/item")


if __name__ == "__main__":
    main()
