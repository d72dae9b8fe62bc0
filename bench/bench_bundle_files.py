"""The folder bundle's file work alone, for one trivial 3-node run: CPU and wall per run.

    .venv/bin/python bench/bench_bundle_files.py                  # 4 rounds of 150 bundles
    .venv/bin/python bench/bench_bundle_files.py --before DIR     # and `runner` from DIR,
                                                                  # interleaved round by round
    .venv/bin/python bench/bench_bundle_files.py --smoke          # one round of 5

Each bundle makes the writes `FolderBundle` makes for a queued 3-node compute run
(create, snapshot and first manifest, `run_started` fsync'd, three node pairs held
and written, the ending fsync'd, state.json, the final manifest, the seal), with no
store and no engine: on a loaded VM the store's and the interpreter's noise swamps
a few hundred microseconds of kernel time in `bench_run_cost`, and here it does
not. Every round runs in a fresh process; with `--before`, the two versions
alternate, so each pair meets the same disk. Printed per round and as medians:
process CPU (user + kernel) and wall time per bundle.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
WARM = 10


def _event(seq: int, kind: str) -> dict[str, Any]:
    if kind == "run_started":
        payload: dict[str, Any] = {"workflow": "w", "input": {}, "digest": "sha256:0",
                                   "manifest": {"workflow_ref": "w", "title": "w",
                                                "source": None, "sources": [],
                                                "started_at": "2026-12-05T00:00:00.000Z"}}
    else:
        payload = {"output": seq}
    return {"schema": "wfrun.trace-event.v1", "seq": seq, "type": kind, "run_id": "r",
            "payload": payload}


def child(root: Path, n: int) -> dict[str, float]:
    """One round: N bundles from `runner` under `root`; CPU and wall ms per bundle."""
    sys.path.insert(0, str(root))
    from runner._canonical import canonical_json
    from runner.engine._space import FolderSpace

    runs = Path(tempfile.mkdtemp(prefix="wfrun-bundle-files-"))
    snapshot = canonical_json({"name": "w", "nodes": {"a": {}, "b": {}, "c": {}}})

    def one(i: int) -> None:
        bundle = FolderSpace(runs).create(f"w-{i}")
        bundle.write_workflow(snapshot)
        bundle.write_manifest({"run_id": f"w-{i}", "workflow": "w", "status": "running",
                               "definition_digest": "sha256:0", "finished_at": None})
        bundle.append([_event(1, "run_started")], sync=True)
        bundle.append([_event(2, "node_started")], sync=False)
        for seq in (3, 5):
            bundle.append([_event(seq, "node_finished"), _event(seq + 1, "node_started")],
                          sync=False)
        bundle.append([_event(7, "node_finished"), _event(8, "run_completed")], sync=True)
        bundle.replace_state({"trace_seq": 8, "status": "completed"})
        manifest = bundle.read_manifest()
        manifest.update(status="completed", finished_at="2026-12-05T00:00:01.000Z")
        bundle.write_manifest(manifest)
        bundle.seal()

    for i in range(WARM):
        one(-1 - i)
    cpu, wall = time.process_time(), time.perf_counter()
    for i in range(n):
        one(i)
    return {"cpu_ms": (time.process_time() - cpu) * 1000 / n,
            "wall_ms": (time.perf_counter() - wall) * 1000 / n}


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("-n", type=int, default=150, help="bundles per round")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--before", type=Path, metavar="DIR",
                    help="also `runner` from DIR (`git archive C runner | tar -x -C DIR`)")
    ap.add_argument("--smoke", action="store_true", help="one round of 5 bundles")
    ap.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child is not None:
        print(json.dumps(child(args.child, args.n)))
        return 0
    n, rounds = (5, 1) if args.smoke else (args.n, args.rounds)
    roots = {"this tree": REPO}
    if args.before is not None:
        roots["before"] = args.before.resolve()
    seen: dict[str, list[dict[str, float]]] = {name: [] for name in roots}
    for r in range(rounds):
        for name, root in roots.items():
            out = subprocess.run([sys.executable, __file__, "--child", str(root), "-n", str(n)],
                                 check=True, capture_output=True, text=True).stdout
            seen[name].append(json.loads(out))
            print(f"round {r + 1}/{rounds} {name}: {seen[name][-1]['cpu_ms']:.3f} ms CPU, "
                  f"{seen[name][-1]['wall_ms']:.2f} ms wall per bundle", flush=True)
    for name, figures in seen.items():
        print(f"{name:10} median CPU {statistics.median(f['cpu_ms'] for f in figures):.3f} ms, "
              f"wall {statistics.median(f['wall_ms'] for f in figures):.2f} ms per bundle "
              f"({n} bundles x {rounds} rounds)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
