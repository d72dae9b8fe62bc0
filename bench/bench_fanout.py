"""What a fan-out item costs (issue 37, ADR 0008): figures printed, never asserted.

    .venv/bin/python bench/bench_fanout.py            # 200, 2,000, 10,000 compute items;
                                                      # 1,000 x `sleep 0.1` at 16 at once
    .venv/bin/python bench/bench_fanout.py --smoke    # 200 compute items; 20 x sleep 0.01

One process, a real `SqliteStore` (WAL, synchronous=FULL) in a temporary project, one
foreground run per figure (`wfrun run` without process start-up). Per-item CPU is the
run's CPU (time.process_time) minus a 1-item map's, over the item count (aim: flat, at
most 1 ms per compute item). A shell item's CPU: a 500-item map of `true` at 16 at
once, the same subtraction (the `true` processes' own CPU is not this process's). The
shell map's wall time is set beside its floor
(items x sleep / max_concurrency), the aim being at most the same work as 1,000 huey
tasks on 16 workers (bench/bench_vs_queues.py measures those).
"""

from __future__ import annotations

import argparse
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--smoke", action="store_true", help="small sizes, seconds")
    args = parser.parse_args()
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
