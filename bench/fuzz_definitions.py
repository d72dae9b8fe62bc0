"""Fuzz the compiler and the CLI with mutated definitions (issue 10's proof).

    .venv/bin/python bench/fuzz_definitions.py                 # 10,000 cases, seed 0
    .venv/bin/python bench/fuzz_definitions.py --cases 20000 --seed 7
    .venv/bin/python bench/fuzz_definitions.py --sizes          # big files only

Cases come from tests/fuzzing.py (structure-aware mutations of fixtures/definitions/
valid and fixtures/controllers/valid, hostile YAML snippets, and the four compiler
crasher classes of issue 35 as seeds: 400-digit durations, a NUL in a hook path,
`!!set` as an input, initial_status or expression). Two passes over the same cases:

1. in process: each file compiled as wfrun would (`Compiler.compile_path`, or
   `compile_controller` for a controller's mutant), under a 5 s alarm; counts
   exceptions and `internal-error` diagnostics (tracebacks), hangs, and the slowest;
2. through the real CLI: the files in projects of 500, `wfrun validate --format json`
   and `wfrun list --json` on each project in a subprocess; every output must be
   valid JSON naming every file, with no traceback on stderr.

Prints the figures and exits 1 when any traceback, hang or invalid output is found.

`--sizes` instead times `wfrun validate --format json` (one process each: wall, CPU,
peak RSS) on the big cases: 4 MiB with ~134,000 mistakes (over the cap), a file at the
1 MiB cap with every node wrong, and a valid 1 MiB chain. Aim: at most 2 s per file.
"""

from __future__ import annotations

import argparse
import json
import os
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

from fuzzing import case, compile_case  # noqa: E402

from runner.compiler._diagnostics import INTERNAL_ERROR  # noqa: E402

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
    signal.signal(signal.SIGALRM, _alarm)
    errors: list[str] = []
    hangs = 0
    slowest = (0.0, -1)
    for i, (origin, text) in enumerate(cases):
        start = time.perf_counter()
        signal.alarm(HANG_SECONDS)
        try:
            diags = compile_case(root, i, origin, text)
            # The compiler's own safety net turns a crash into this diagnostic: still
            # a crash for the fuzzer.
            crashed = [d.message for d in diags if d.code == INTERNAL_ERROR]
            if crashed:
                errors.append(f"case {i} (from {origin}): {crashed[0]}")
        except _Hang:
            hangs += 1
        except Exception:
            errors.append(f"case {i} (from {origin}): {traceback.format_exc(limit=3)}")
        finally:
            signal.alarm(0)
        took = time.perf_counter() - start
        slowest = max(slowest, (took, i))
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


def _mistakes(limit: int) -> str:
    lines, size, i = ["start: n0", "nodes:"], 20, 0
    while size + 40 < limit:
        lines.append(f"  n{i}: {{agent: x, bogus: 1}}")
        size += len(lines[-1]) + 1
        i += 1
    return "\n".join(lines) + "\n"


def _chain(limit: int) -> str:
    nodes, edges, size, i = ["start: n0", "nodes:"], ["edges:"], 20, 0
    while size + 200 < limit:  # the last node and the headers fit in the margin
        nodes.append(f'  n{i}: {{compute: "{{{{ {i} + 1 }}}}"}}')
        edges.append(f"  - {{from: n{i}, to: n{i + 1}}}")
        size += len(nodes[-1]) + len(edges[-1]) + 2
        i += 1
    nodes.append(f'  n{i}: {{compute: "1"}}')
    return "\n".join(nodes + edges) + "\n"


def sizes(root: Path) -> int:
    from runner.compiler._sources import MAX_DEFINITION_BYTES as CAP

    cases = {"over_cap_4mib_mistakes": _mistakes(4 * 1024 * 1024),
             "at_cap_mistakes": _mistakes(CAP), "at_cap_valid_chain": _chain(CAP)}
    slow = 0
    for name, text in cases.items():
        project = root / name
        (project / ".wfrun" / "workflows").mkdir(parents=True)
        (project / ".wfrun" / "workflows" / f"{name}.yaml").write_text(text)
        argv = [sys.executable, "-m", "runner", "--project", str(project), "validate", name,
                "--format", "json"]
        start = time.perf_counter()
        with (root / f"{name}.json").open("w+b") as sink:
            proc = subprocess.Popen(argv, stdout=sink, stderr=subprocess.DEVNULL)
            _, status, usage = os.wait4(proc.pid, 0)  # this child's own CPU and peak RSS
            proc.returncode = os.waitstatus_to_exitcode(status)
            wall = time.perf_counter() - start
            sink.seek(0)
            out = sink.read()
        diags = json.loads(out)["files"][0]["diagnostics"]
        codes = sorted({d["code"] for d in diags})[:3]
        print(f"{name}: {len(text.encode()) / 2**20:.2f} MiB, {wall:.2f} s wall, "
              f"{usage.ru_utime + usage.ru_stime:.2f} s CPU, {usage.ru_maxrss / 1024:.0f} MiB "
              f"peak RSS, {len(diags)} diagnostics {codes}, exit {proc.returncode}")
        slow += (usage.ru_utime + usage.ru_stime) > 2.0
    print(f"aim: <= 2 s CPU per file; {slow} over")
    return 1 if slow else 0


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--smoke", action="store_true",
        help="tiny sizes: the script runs, figures mean nothing (tests use it)")
    parser.add_argument("--cases", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-cli", action="store_true")
    parser.add_argument("--sizes", action="store_true", help="time the big-file cases only")
    args = parser.parse_args()
    if args.smoke:
        args.cases = 20
    if args.sizes:
        with tempfile.TemporaryDirectory() as tmp:
            return sizes(Path(tmp))
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
