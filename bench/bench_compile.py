"""Compiler benchmarks: a cold `wfrun validate` of a corpus, a warm compile of a big graph.

    .venv/bin/python bench/bench_compile.py            # both figures
    .venv/bin/python bench/bench_compile.py --check    # exit 1 if an aim is missed
    .venv/bin/python bench/bench_compile.py --profile  # cProfile of both, top 25
    .venv/bin/python bench/bench_compile.py --against DIR  # A/B: `runner` from DIR too
    .venv/bin/python bench/bench_compile.py --instructions  # + callgrind counts (slow)

(a) writes 200 typical workflows (10-30 nodes of every kind, switches, decisions,
    templates, JSON Schemas, a few includes) to a temporary project and times
    the whole `wfrun validate DIR` process, start to exit: median of 5 runs.
(b) writes one 2,000-node workflow and times `Compiler().compile_path()` in
    this process after a warm-up: median of 7, a fresh Compiler each time.
(c) the cold compile of a 5,000-node chain (bench_graph_size's file: node i
    computes `{{ outputs.n<i-1> + 1 }}`): `Compiler().compile_path()` once in a
    fresh process whose imports are done (no cache warm): median of 5 processes.

Aims (DESIGN §8 dev loop; 2-core machine): (a) < 1.5 s, (b) < 300 ms, (c) ~450 ms
(issue 34 item 18: 442 ms before the reference checks, 2,464 ms after).

The machine is shared: each figure has its CPU time beside the wall time, and
`--against DIR` (a copy of another commit's tree: `git archive main runner | tar -x
-C DIR`) runs (a) and (c) for both trees interleaved, one of each per round, so a
burst of load elsewhere hits both alike. `--instructions` adds the user-space
instructions of one (a) process and one (c) compile, per tree, under callgrind
(repeatable to ~0.3 %: a figure the load cannot move; needs valgrind).
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import pstats
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

from benchkit import machine  # noqa: E402

from runner.compiler import Compiler  # noqa: E402

CORPUS_FILES = 200
BIG_NODES = 2000
CHAIN_NODES = 5000
AIM_CORPUS_S = 1.5
AIM_BIG_MS = 300.0
AIM_CHAIN_MS = 450.0

# Agent output schemas recur across a real corpus (a verdict, a plan, a summary).
_SHARED_SCHEMAS: list[dict[str, Any]] = [
    {"type": "object", "required": ["summary"],
     "properties": {"summary": {"type": "string", "minLength": 1}}},
    {"type": "object", "required": ["steps"],
     "properties": {"steps": {"type": "array", "items": {"type": "string"}}}},
    {"type": "object", "required": ["files", "notes"],
     "properties": {"files": {"type": "array", "items": {"type": "string"}},
                    "notes": {"type": "string"}}},
]


def _verdict_schema(tag: str) -> dict[str, Any]:
    return {"type": "object", "required": ["verdict", "reason"],
            "properties": {"verdict": {"enum": ["ok", "retry", f"skip_{tag}"]},
                           "reason": {"type": "string"},
                           "score": {"type": "integer", "minimum": 0, "maximum": 10}}}


def _input_schema(i: int) -> dict[str, Any]:
    return {"type": "object", "required": ["task"], "additionalProperties": False,
            "properties": {"task": {"type": "string", "minLength": 1},
                           f"option_{i}": {"type": "boolean"},
                           "paths": {"type": "array", "items": {"type": "string"}},
                           "level": {"enum": ["low", "medium", "high"]}}}


def _t(expr: str) -> str:
    """A Jinja substitution, spelled out so f-strings stay readable."""
    return "{{ " + expr + " }}"


def workflow(name: str, n: int, seed: int, include: str | None = None) -> dict[str, Any]:
    """A connected workflow of `n` nodes cycling through every node kind.

    Node i usually leads to i+1; decisions loop back, actions route on their
    outcome, verdict agents branch ahead. The last node ends the run. Texts name
    the workflow, so no two files share a template (as in a real corpus).
    """
    ids = [f"step_{k}" for k in range(n)]
    nodes: dict[str, Any] = {}
    edges: list[dict[str, Any]] = []
    pattern = ("agent", "compute", "action", "decision", "notify", "verdict", "compute",
               "agent")
    task = _t("input.task")
    for k, nid in enumerate(ids):
        last = k == n - 1
        nxt = ids[k + 1] if not last else None
        kind = "notify_final" if last else pattern[(k + seed) % len(pattern)]
        prev = ids[k - 1] if k else None
        if kind == "agent":
            previous = f"Previous: {_t(f'outputs.{prev} | tojson')}\n" if prev else ""
            nodes[nid] = {"agent": {
                "prompt": f"Work on {task} ({name}, part {k}).\n{previous}Be concise.",
                "output": _SHARED_SCHEMAS[(k + seed) % len(_SHARED_SCHEMAS)]},
                "timeout": "20m"}
            edges.append({"from": nid, "to": nxt})
        elif kind == "verdict":
            target2 = ids[min(k + 2, n - 1)]
            nodes[nid] = {"agent": {"prompt": f"Judge {task}: is {name}/{k} fine?",
                                    "output": _verdict_schema(str(seed % 7))},
                          "retry": {"attempts": 2, "backoff": "5s"}}
            edges.append({"from": nid, "switch": {
                "on": "$.verdict",
                "cases": {"ok": nxt, "retry": nid if k == 0 else prev,
                          f"skip_{seed % 7}": target2}}})
        elif kind == "compute":
            nodes[nid] = {"compute": _t(f"{{'part': {k}, 'task': input.task | upper, "
                                        f"'in': '{name}', "
                                        "'n': (input.paths | default([])) | length}")}
            edges.append({"from": nid, "to": nxt})
        elif kind == "action":
            nodes[nid] = {"action": {"shell": ["git", "diff", "--stat", task],
                                     "cwd": _t("project.root | default('.')"),
                                     "env": {"PART": str(k)}, "allow_nonzero_exit": k % 3 == 0},
                          "timeout": "2m"}
            edges.append({"from": nid, "switch": {
                "on": "$result.outcome",
                "cases": {"ok": nxt, "failed": nxt, "timed_out": ids[n - 1]}}})
        elif kind == "decision":
            back = ids[max(0, k - 3)]
            nodes[nid] = {"decision": {
                "question": f"Is part {k} of {name} done? {_t('outputs | tojson')}",
                "choices": {"done": nxt, "again": back}}}
        elif kind == "notify":
            nodes[nid] = {"notify": {"kind": "progress",
                                     "message": f"Part {k} of {name} finished: {task}"}}
            edges.append({"from": nid, "to": nxt})
        elif seed % 5 == 0:
            nodes[nid] = {"checkpoint": {"summary": f"Approve {name}: {task}?"}}
        else:
            nodes[nid] = {"notify": {"kind": "final", "message": f"{name} done: "
                                     "{% for k, v in outputs.items() %}{{ k }} {% endfor %}"}}
    doc: dict[str, Any] = {
        "name": name,
        "title": f"{name}: {task}",
        "description": f"Generated benchmark workflow {seed}.",
        "input": _input_schema(seed),
        "start": ids[0],
        "max_steps": 4 * n,
        "defaults": {"timeout": "15m"},
        "nodes": nodes,
        "edges": edges,
    }
    if include is not None:
        # Enter the child from the start and come back through its exit.
        doc["includes"] = {"sub": {"workflow": include, "input": {"task": task}}}
        doc["start"] = "sub"
        doc["edges"].append({"from": "sub.done", "to": ids[0]})
    return doc


def child() -> dict[str, Any]:
    doc = workflow("child", 6, 1)
    last = next(reversed(doc["nodes"]))
    doc["nodes"][last] = {"compute": "{{ outputs | length }}"}
    doc["exits"] = {"done": {"from": last}}
    doc["input"] = {"type": "object", "properties": {"task": {"type": "string"}}}
    return doc


def dump(doc: dict[str, Any]) -> str:
    """Block-style YAML like a person writes, via ruamel (already a dependency)."""
    from ruamel.yaml import YAML

    y = YAML()
    y.default_flow_style = False
    y.width = 100
    buf = io.StringIO()
    y.dump(doc, buf)
    return buf.getvalue()


def write_corpus(folder: Path, files: int = CORPUS_FILES) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    lib = folder.parent / "lib"
    lib.mkdir(exist_ok=True)
    (lib / "child.yaml").write_text(dump(child()))
    paths = []
    for i in range(files):
        n = 10 + (i * 7) % 21  # 10..30 nodes
        name = f"wf-{i:03d}"
        include = "../lib/child.yaml" if i % 10 == 0 else None
        path = folder / f"{name}.yaml"
        path.write_text(dump(workflow(name, n, i, include)))
        paths.append(path)
    return paths


def wfrun_command() -> list[str]:
    """`wfrun` as the console script runs it, from the checkout next to this file."""
    return [sys.executable, "-m", "runner"]


def _child_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def time_validate(folder: Path, runs: int = 5, files: int = CORPUS_FILES,
                  root: Path = REPO, warm_up: bool = True) -> tuple[list[float], list[float]]:
    """Wall and CPU seconds of whole `wfrun validate DIR` processes.

    The first run is discarded: it warms the OS page cache and writes bytecode
    (which a normal install has; some sandboxes set PYTHONDONTWRITEBYTECODE).
    """
    cmd = [*wfrun_command(), "validate", str(folder)]
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("WFRUN_") and k != "PYTHONDONTWRITEBYTECODE"}
    env["WFRUN_HOME"] = str(folder.parent / "home")
    env["PYTHONPATH"] = os.pathsep.join([str(root), *filter(None, [env.get("PYTHONPATH")])])
    walls, cpus = [], []
    for i in range(runs + 1 if warm_up else runs):
        c0, t0 = _child_cpu(), time.perf_counter()
        proc = subprocess.run(cmd, cwd=folder.parent, env=env, capture_output=True, text=True,
                              check=False)
        wall, cpu = time.perf_counter() - t0, _child_cpu() - c0
        if proc.returncode != 0:
            sys.exit(f"wfrun validate failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
        if proc.stdout.count("\nok ") + proc.stdout.startswith("ok ") != files:
            sys.exit(f"expected {files} valid files:\n{proc.stdout[-2000:]}")
        if i or not warm_up:
            walls.append(wall)
            cpus.append(cpu)
    return walls, cpus


def time_big(path: Path, runs: int = 7) -> tuple[list[float], list[float], int]:
    """Wall and CPU milliseconds of in-process compiles, a fresh Compiler each."""
    result = Compiler().compile_path(path)  # warm-up: imports, template envs
    if not result.valid or result.definition is None:
        sys.exit("the big workflow does not compile:\n"
                 + "\n".join(d.message for d in result.diagnostics[:10]))
    size = len(result.definition.nodes)
    walls, cpus = [], []
    for _ in range(runs):
        c0, t0 = time.process_time(), time.perf_counter()
        result = Compiler().compile_path(path)
        walls.append((time.perf_counter() - t0) * 1000)
        cpus.append((time.process_time() - c0) * 1000)
        assert result.valid
    return walls, cpus, size


def chain_yaml(n: int) -> str:
    """bench_graph_size's chain: node i computes `{{ outputs.n<i-1> + 1 }}`."""
    lines = ["name: chain", "start: n0", f"max_steps: {n + 10}", "nodes:",
             '  n0: {compute: "{{ 0 }}"}']
    lines += [f'  n{i}: {{compute: "{{{{ outputs.n{i - 1} + 1 }}}}"}}' for i in range(1, n)]
    lines.append("edges:")
    lines += [f"  - {{from: n{i}, to: n{i + 1}}}" for i in range(n - 1)]
    return "\n".join(lines) + "\n"


# One cold compile in a fresh process: imports first (not timed), then the compile.
_COLD = """
import json, sys, time
sys.path.insert(0, sys.argv[1])
from pathlib import Path
from runner.compiler import Compiler
import runner.compiler._compile
assert runner.compiler.__file__.startswith(sys.argv[1]), runner.compiler.__file__
if sys.argv[3] == "time":
    c0, t0 = time.process_time(), time.perf_counter()
result = Compiler().compile_path(Path(sys.argv[2])) if sys.argv[3] != "imports" else None
if sys.argv[3] == "time":
    assert result is not None and result.valid, result and result.diagnostics[:3]
    print(json.dumps([(time.perf_counter() - t0) * 1000, (time.process_time() - c0) * 1000]))
"""


def time_chain(path: Path, root: Path = REPO) -> tuple[float, float]:
    """(wall ms, CPU ms) of one cold compile of the chain in a fresh process."""
    out = subprocess.run([sys.executable, "-c", _COLD, str(root), str(path), "time"],
                         capture_output=True, text=True, check=False)
    if out.returncode != 0:
        sys.exit(f"the chain does not compile:\n{out.stderr[-2000:]}")
    wall, cpu = json.loads(out.stdout)
    return wall, cpu


def instructions(cmd: list[str], cwd: Path, env: dict[str, str] | None = None) -> int:
    """User-space instructions of one process under callgrind."""
    out = subprocess.run(["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null",
                          *cmd], cwd=cwd, env=env, capture_output=True, text=True, check=False)
    found = re.search(r"Collected : (\d+)", out.stderr)
    if out.returncode != 0 or found is None:
        sys.exit(f"callgrind failed:\n{out.stderr[-2000:]}")
    return int(found[1])


def count_instructions(folder: Path, chain: Path, root: Path) -> dict[str, int]:
    """(a) one whole validate process; (c) the chain's compile (a process that
    compiles it, less one that only imports)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("WFRUN_")}
    env["WFRUN_HOME"] = str(folder.parent / "home")
    env["PYTHONPATH"] = str(root)
    validate = instructions([*wfrun_command(), "validate", str(folder)], folder.parent, env)
    base = [sys.executable, "-c", _COLD, str(root), str(chain)]
    compiled = instructions([*base, "compile"], folder.parent)
    imports = instructions([*base, "imports"], folder.parent)
    return {"validate_corpus": validate, "chain_compile": compiled - imports}


def profile(folder: Path, big: Path) -> None:
    def show(prof: cProfile.Profile, title: str) -> None:
        out = io.StringIO()
        pstats.Stats(prof, stream=out).sort_stats("cumulative").print_stats(25)
        print(f"--- {title} ---\n{out.getvalue()}")

    prof = cProfile.Profile()
    prof.enable()
    Compiler().compile_path(big)
    prof.disable()
    show(prof, "compile 2,000 nodes (first, includes warm-up)")
    prof = cProfile.Profile()
    prof.enable()
    Compiler().compile_path(big)
    prof.disable()
    show(prof, "compile 2,000 nodes (warm)")
    # Dumped by an exit handler: the CLI ends with os._exit once its handlers ran.
    code = ("import atexit, cProfile, sys; sys.argv = ['wfrun', 'validate', %r]; "
            "from runner.cli import main; prof = cProfile.Profile(); "
            "atexit.register(lambda: prof.dump_stats(%r)); prof.enable(); main()")
    stats = folder.parent / "validate.prof"
    subprocess.run([sys.executable, "-c", code % (str(folder), str(stats))],
                   cwd=folder.parent, capture_output=True, check=False)
    out = io.StringIO()
    pstats.Stats(str(stats), stream=out).sort_stats("cumulative").print_stats(30)
    print(f"--- wfrun validate (whole process) ---\n{out.getvalue()}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if an aim is missed")
    parser.add_argument("--profile", action="store_true", help="print cProfile reports")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.add_argument("--against", type=Path, metavar="DIR",
                        help="also measure `runner` from DIR, interleaved (A/B)")
    parser.add_argument("--instructions", action="store_true",
                        help="add callgrind instruction counts of (a) and (c)")
    parser.add_argument("--smoke", action="store_true",
                        help="tiny sizes: the script runs, figures mean nothing (tests use it)")
    args = parser.parse_args()
    files, nodes, chain_nodes, runs = (5, 50, 50, 1) if args.smoke else (
        CORPUS_FILES, BIG_NODES, CHAIN_NODES, 0)
    roots = {"this tree": REPO}
    if args.against is not None:
        roots[str(args.against)] = args.against.resolve()
    tmp = Path(tempfile.mkdtemp(prefix="wfrun-bench-"))
    try:
        folder = tmp / "corpus"
        paths = write_corpus(folder, files)
        big = tmp / "big.yaml"
        big.write_text(dump(workflow("big", nodes, 3)))
        chain = tmp / "chain" / "chain.yaml"
        chain.parent.mkdir()
        chain.write_text(chain_yaml(chain_nodes))
        if args.profile:
            profile(folder, big)
            return 0
        corpus: dict[str, tuple[list[float], list[float]]] = {r: ([], []) for r in roots}
        cold: dict[str, tuple[list[float], list[float]]] = {r: ([], []) for r in roots}
        for root in roots.values():  # warm-up: bytecode, page cache
            time_validate(folder, 0, files, root)
            time_chain(chain, root)
        for _ in range(runs or 5):  # interleaved: one of each per round
            for name, root in roots.items():
                wall, cpu = time_validate(folder, 1, files, root, warm_up=False)
                corpus[name][0].extend(wall)
                corpus[name][1].extend(cpu)
                wall_ms, cpu_ms = time_chain(chain, root)
                cold[name][0].append(wall_ms)
                cold[name][1].append(cpu_ms)
        big_walls, big_cpus, size = time_big(big, runs or 7)
        counted = {name: count_instructions(folder, chain, root)
                   for name, root in roots.items()} if args.instructions else {}
        figures: dict[str, Any] = {
            "machine": machine(), "load_average": round(os.getloadavg()[0], 2),
            "corpus": {"files": len(paths), "bytes": sum(p.stat().st_size for p in paths),
                       "aim_s": AIM_CORPUS_S, **{
                           name: {"median_s": round(statistics.median(w), 3),
                                  "median_cpu_s": round(statistics.median(c), 3),
                                  "runs_s": [round(t, 3) for t in w]}
                           for name, (w, c) in corpus.items()}},
            "chain": {"nodes": chain_nodes, "aim_ms": AIM_CHAIN_MS, **{
                name: {"median_ms": round(statistics.median(w), 1),
                       "median_cpu_ms": round(statistics.median(c), 1),
                       "runs_ms": [round(t, 1) for t in w]}
                for name, (w, c) in cold.items()}},
            "big": {"nodes": size, "bytes": big.stat().st_size,
                    "median_ms": round(statistics.median(big_walls), 1),
                    "median_cpu_ms": round(statistics.median(big_cpus), 1),
                    "runs_ms": [round(t, 1) for t in big_walls], "aim_ms": AIM_BIG_MS},
            "instructions": counted,
        }
        if args.json:
            print(json.dumps(figures, indent=2))
        else:
            print(f"machine: {figures['machine']}; load average {figures['load_average']}")
            c, b = figures["corpus"], figures["big"]
            for name in roots:
                f, g = c[name], figures["chain"][name]
                print(f"[{name}]")
                print(f"  (a) cold `wfrun validate` of {c['files']} files "
                      f"({c['bytes'] // 1024} KiB): median {f['median_s']:.3f} s wall, "
                      f"{f['median_cpu_s']:.3f} s CPU (aim < {AIM_CORPUS_S} s)  "
                      + " ".join(f"{t:.3f}" for t in f["runs_s"]))
                print(f"  (c) cold compile of a {chain_nodes}-node chain: median "
                      f"{g['median_ms']:.0f} ms wall, {g['median_cpu_ms']:.0f} ms CPU "
                      f"(aim ~{AIM_CHAIN_MS:.0f} ms)  "
                      + " ".join(f"{t:.0f}" for t in g["runs_ms"]))
                if name in counted:
                    n = counted[name]
                    print(f"  instructions: (a) {n['validate_corpus'] / 1e6:,.0f} M, "
                          f"(c) {n['chain_compile'] / 1e6:,.0f} M")
            print(f"(b) warm compile of {size} nodes ({b['bytes'] // 1024} KiB, this tree): "
                  f"median {b['median_ms']:.1f} ms wall, {b['median_cpu_ms']:.1f} ms CPU "
                  f"(aim < {AIM_BIG_MS:.0f} ms)  " + " ".join(f"{t:.1f}" for t in b["runs_ms"]))
        mine = figures["corpus"]["this tree"]["median_s"], figures["chain"]["this tree"]
        missed = (mine[0] >= AIM_CORPUS_S or figures["big"]["median_ms"] >= AIM_BIG_MS
                  or mine[1]["median_ms"] >= 2 * AIM_CHAIN_MS)
        if missed:
            print("aim missed", file=sys.stderr)
        return 1 if (missed and args.check) else 0
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
