"""Fuzz the compiler and the CLI with mutated definitions (issue 10's proof).

    .venv/bin/python bench/fuzz_definitions.py                 # 10,000 cases, seed 0
    .venv/bin/python bench/fuzz_definitions.py --cases 20000 --seed 7

Cases come from tests/fuzzing.py (structure-aware mutations of fixtures/definitions/
valid plus hostile YAML snippets). Two passes over the same cases:

1. in process: `Compiler.compile_path` on each file, under a 5 s alarm; counts
   exceptions (tracebacks) and hangs, and the slowest case;
2. through the real CLI: the files in projects of 500, `wfrun validate --format json`
   and `wfrun list --json` on each project in a subprocess; every output must be
   valid JSON naming every file, with no traceback on stderr.

Prints the figures and exits 1 when any traceback, hang or invalid output is found.
"""

from __future__ import annotations

import argparse
import json
import random
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO))

from fuzzing import case  # noqa: E402

from runner.compiler import Compiler  # noqa: E402
from runner.compiler.discovery import build_catalog  # noqa: E402

HANG_SECONDS = 5
BATCH = 500


class _Hang(Exception):
    pass


def _alarm(_sig: int, _frame: Any) -> None:
    raise _Hang


def _write(folder: Path, index: int, text: str | bytes) -> Path:
    path = folder / f"case{index:05d}.yaml"
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text)
    return path


def in_process(cases: list[tuple[str, str | bytes]], root: Path) -> dict[str, Any]:
    folder = root / ".wfrun" / "workflows"
    folder.mkdir(parents=True)
    catalog = build_catalog("workflows", root, None)
    signal.signal(signal.SIGALRM, _alarm)
    errors: list[str] = []
    hangs = 0
    slowest = (0.0, -1)
    for i, (origin, text) in enumerate(cases):
        path = _write(folder, i, text)
        start = time.perf_counter()
        signal.alarm(HANG_SECONDS)
        try:
            json.dumps(Compiler(catalog).compile_path(path).to_json())
        except _Hang:
            hangs += 1
        except Exception:
            errors.append(f"case {i} (from {origin}): {traceback.format_exc(limit=3)}")
        finally:
            signal.alarm(0)
        took = time.perf_counter() - start
        slowest = max(slowest, (took, i))
        path.unlink()
    return {"tracebacks": len(errors), "hangs": hangs, "slowest_s": round(slowest[0], 3),
            "slowest_case": slowest[1], "examples": errors[:3]}


def through_cli(cases: list[tuple[str, str | bytes]], root: Path) -> dict[str, Any]:
    bad: list[str] = []
    for start in range(0, len(cases), BATCH):
        project = root / f"p{start}"
        folder = project / ".wfrun" / "workflows"
        folder.mkdir(parents=True)
        names = {_write(folder, i, text).stem
                 for i, (_o, text) in enumerate(cases[start:start + BATCH], start)}
        for argv, key in ((["validate", "--format", "json"], "files"), (["list", "--json"], None)):
            done = subprocess.run([sys.executable, "-m", "runner", "--project", str(project),
                                   *argv], capture_output=True, text=True, timeout=900,
                                  check=False)
            where = f"{' '.join(argv)} on cases {start}..{start + BATCH - 1}"
            if "Traceback" in done.stderr or done.returncode not in (0, 1):
                bad.append(f"{where}: exit {done.returncode}: {done.stderr[-500:]}")
                continue
            try:
                out = json.loads(done.stdout)
            except ValueError:
                bad.append(f"{where}: output is not JSON: {done.stdout[:200]!r}")
                continue
            rows = out[key] if key else (out if isinstance(out, list) else
                                         out.get("workflows", []))
            seen = {r.get("name") for r in rows}
            if not names <= seen:
                bad.append(f"{where}: {len(names - seen)} files missing from the output")
    return {"invalid_outputs": len(bad), "examples": bad[:3]}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--cases", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-cli", action="store_true")
    args = parser.parse_args()
    rng = random.Random(args.seed)
    cases = [case(rng) for _ in range(args.cases)]
    with tempfile.TemporaryDirectory() as tmp:
        t = time.perf_counter()
        inproc = in_process(cases, Path(tmp) / "inproc")
        print(f"in process: {args.cases} cases in {time.perf_counter() - t:.1f} s, "
              f"{inproc['tracebacks']} tracebacks, {inproc['hangs']} hangs over "
              f"{HANG_SECONDS} s, slowest {inproc['slowest_s']} s (case "
              f"{inproc['slowest_case']})")
        for example in inproc["examples"]:
            print(example)
        cli: dict[str, Any] = {"invalid_outputs": 0, "examples": []}
        if not args.no_cli:
            t = time.perf_counter()
            cli = through_cli(cases, Path(tmp) / "cli")
            print(f"CLI: validate + list on {args.cases} files in {time.perf_counter() - t:.1f} s, "
                  f"{cli['invalid_outputs']} tracebacks or invalid JSON outputs")
            for example in cli["examples"]:
                print(example)
    failed = inproc["tracebacks"] or inproc["hangs"] or cli["invalid_outputs"]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
