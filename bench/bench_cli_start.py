"""Cold start of the CLI: wall time of one `wfrun` process, beside `python -c pass`.

    .venv/bin/python bench/bench_cli_start.py            # figures
    .venv/bin/python bench/bench_cli_start.py -n 50 --json
    .venv/bin/python bench/bench_cli_start.py --check    # exit 1 if the aim is missed

Agents and hooks call wfrun on every turn, so each figure is the whole process as a
shell starts it (the console script when installed, else `python -m runner`):
interpreter start, imports, the command, exit. The commands run interleaved, one of
each per round, so a burst of load elsewhere hits them all alike. `status` reads an
empty store in a fresh project; `validate NAME` compiles one small workflow with a
template. Aim (issue 15): p50 <= 150 ms each on a quiet machine.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchkit import machine

SCRIPT = Path(sys.executable).parent / "wfrun"
AIM_P50_MS = 150.0
WORKFLOW = """\
input:
  type: object
  properties: {name: {type: string}}
start: hello
nodes:
  hello: {compute: "{{ {'greeting': 'hi ' ~ (input.name | default('there'))} }}"}
"""


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def timed(cmd: list[str], cwd: Path, env: dict[str, str]) -> float:
    start = time.perf_counter()
    out = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, timeout=120)
    elapsed = (time.perf_counter() - start) * 1000
    if out.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed (exit {out.returncode}): "
                         f"{out.stderr.decode()[-300:]}")
    return elapsed


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-n", type=int, default=30, help="runs of each command")
    ap.add_argument("--check", action="store_true", help="exit 1 if a p50 misses the aim")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    wfrun = [str(SCRIPT)] if SCRIPT.exists() else [sys.executable, "-m", "runner"]
    commands = {
        "python -c pass": [sys.executable, "-c", "pass"],
        "wfrun --help": [*wfrun, "--help"],
        "wfrun status": [*wfrun, "status"],
        "wfrun validate NAME": [*wfrun, "validate", "greet"],
    }
    with tempfile.TemporaryDirectory(prefix="wfrun-bench-cli-") as tmp:
        root = Path(tmp) / "proj"
        (root / ".wfrun" / "workflows").mkdir(parents=True)
        (root / ".wfrun" / "workflows" / "greet.yaml").write_text(WORKFLOW)
        env = {k: v for k, v in os.environ.items() if not k.startswith(("WFRUN_", "PYTHON"))}
        env["WFRUN_HOME"] = str(Path(tmp) / "home")
        for cmd in commands.values():  # warm-up: byte-code caches, the store file
            timed(cmd, root, env)
        samples: dict[str, list[float]] = {name: [] for name in commands}
        for _ in range(args.n):
            for name, cmd in commands.items():
                samples[name].append(timed(cmd, root, env))
    figures = {name: {"p50_ms": round(statistics.median(v), 1),
                      "p90_ms": round(pct(v, 0.9), 1), "min_ms": round(min(v), 1)}
               for name, v in samples.items()}
    missed = [name for name, f in figures.items()
              if name.startswith("wfrun") and f["p50_ms"] > AIM_P50_MS]
    if args.json:
        print(json.dumps({"machine": machine(), "runs": args.n, "aim_p50_ms": AIM_P50_MS,
                          "figures": figures, "missed": missed}, indent=2))
    else:
        print(f"machine: {machine()}; load average {os.getloadavg()[0]:.2f}")
        print(f"{args.n} runs each, interleaved; aim p50 <= {AIM_P50_MS:.0f} ms for wfrun")
        print(f"{'command':<22}{'p50 ms':>9}{'p90 ms':>9}{'min ms':>9}")
        for name, f in figures.items():
            mark = "  (over the aim)" if name in missed else ""
            print(f"{name:<22}{f['p50_ms']:>9.1f}{f['p90_ms']:>9.1f}{f['min_ms']:>9.1f}{mark}")
    return 1 if args.check and missed else 0


if __name__ == "__main__":
    sys.exit(main())
