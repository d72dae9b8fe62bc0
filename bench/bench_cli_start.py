"""Cold start of the CLI: wall time of one `wfrun` process, beside `python -c pass`.

    .venv/bin/python bench/bench_cli_start.py            # figures
    .venv/bin/python bench/bench_cli_start.py -n 50 --json
    .venv/bin/python bench/bench_cli_start.py --check    # exit 1 if an aim is missed
    .venv/bin/python bench/bench_cli_start.py --no-postgres  # SQLite only
    .venv/bin/python bench/bench_cli_start.py --instructions  # + instruction counts
    .venv/bin/python bench/bench_cli_start.py --against main   # before/after pairs
    .venv/bin/python bench/bench_cli_start.py --against main --only 'status,run NAME'

Agents and hooks call wfrun on every turn, so each figure is the whole process as a
shell starts it (the console script when installed, else `python -m runner`):
interpreter start, imports, the command, exit. The commands run interleaved, one of
each per round, so a burst of load elsewhere hits them all alike; the load average
is printed before and after, and each command's CPU time (user + system) beside its
wall time: on a loaded machine the wall time waits for a core, the CPU time hardly.
The project has one finished run: `status` reads the store (no active launch),
`runs` lists that run, `validate NAME` compiles one small workflow with an input
schema and a template, and `hook claude-code` answers a Stop event with nothing to
deliver and no `wfrun mcp` server (bench/bench_hook.py measures it against a live
server). Aims (issue 15), p50 on a quiet machine: <= 150 ms for
--help, status and validate NAME; <= 100 ms for the hook. `runs` has no aim of its
own and is shown for comparison.

With the PostgreSQL 15 server binaries installed (scripts/setup), `status`, `runs`
and `show RUN` are also run on a throwaway cluster's store (WFRUN_STORE, one finished
run there too): aim (issue 34 item 12) at most 2x the SQLite figure. The store's
layout check ran on every command there (~0.6 s); a store that passed it now opens
on one catalog query, over the one connection the command makes. `--instructions`
adds each command's user-space instructions under callgrind (one process each: a
figure the machine's load cannot move; psycopg's own import is most of the
difference, and the server's work is not in it). The counts come from `perf stat`
where the machine exposes the counter, else from callgrind.

`--against REF` (issue 34 item 11) runs each command of this tree and of the git ref
REF (its runner/ and built-in definitions extracted to a temporary folder,
byte-compiled, and put first on PYTHONPATH), both as `python -m runner` in the same
project, in interleaved pairs whose order alternates each round; it prints each
side's p50 wall and CPU time, the ratio, and with `--instructions` each side's
instruction count. `run NAME`, `start`, `list --json` and `controllers --json` join
the list there: the commands the e2e tests start most; so do `controller list NAME`,
`events NAME KEY`, `apply NAME KEY FILE` (on the project's one controller, `tidy`)
and `host --once` (a host with that controller and nothing to do).
"""

from __future__ import annotations

import argparse
import json
import os
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

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # pgcluster
from benchkit import machine

SCRIPT = Path(sys.executable).parent / "wfrun"
AIMS_P50_MS = {"wfrun --help": 150.0, "wfrun status": 150.0, "wfrun validate NAME": 150.0,
               "wfrun hook claude-code": 100.0}
WORKFLOW = """\
input:
  type: object
  properties: {name: {type: string}}
start: hello
nodes:
  hello: {compute: "{{ {'greeting': 'hi ' ~ (input.name | default('there'))} }}"}
"""

TIDY = """\
reconcile: ./tidy.py:reconcile
spec:
  type: object
  additionalProperties: false
  required: [repository, number]
  properties:
    repository: {type: string, pattern: "^[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+$"}
    number: {type: integer, minimum: 1}
initial_status: {phase: new}
"""


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def timed(cmd: list[str], cwd: Path, env: dict[str, str],
          stdin: bytes | None = None) -> tuple[float, float]:
    """(wall ms, CPU ms) of one process. The CPU time (user + system, from the child's
    rusage) barely moves with load elsewhere, so it says what a quiet machine's wall
    time would be when the measured wall is inflated by waiting for a core."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    out = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, timeout=120, input=stdin)
    elapsed = (time.perf_counter() - start) * 1000
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime) * 1000
    if out.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed (exit {out.returncode}): "
                         f"{out.stderr.decode()[-300:]}")
    return elapsed, cpu


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--smoke", action="store_true",
                    help="tiny sizes: the script runs, figures mean nothing (tests use it)")
    ap.add_argument("--no-postgres", action="store_true", help="skip the Postgres rows")
    ap.add_argument("-n", type=int, default=30, help="runs of each command")
    ap.add_argument("--check", action="store_true", help="exit 1 if a p50 misses the aim")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--instructions", action="store_true",
                    help="add instruction counts (perf, else callgrind; one process each)")
    ap.add_argument("--against", metavar="REF",
                    help="interleaved before/after pairs: this tree against git ref REF")
    ap.add_argument("--only", metavar="NAMES",
                    help="with --against: these commands only, comma-separated "
                         "(e.g. 'status,run NAME')")
    args = ap.parse_args()
    if args.smoke:  # the Postgres rows start a cluster: bench_pg_scale's smoke covers it
        args.n, args.no_postgres = 1, True
    if args.against:
        return against(args)
    wfrun = [str(SCRIPT)] if SCRIPT.exists() else [sys.executable, "-m", "runner"]
    commands = {
        "python -c pass": [sys.executable, "-c", "pass"],
        "wfrun --help": [*wfrun, "--help"],
        "wfrun status": [*wfrun, "status"],
        "wfrun validate NAME": [*wfrun, "validate", "greet"],
        "wfrun runs": [*wfrun, "runs"],
        "wfrun show RUN": [*wfrun, "show", "RUN"],
        "wfrun hook claude-code": [*wfrun, "hook", "claude-code"],
    }
    cluster = None
    if not args.no_postgres and Path(PG_INITDB).exists():
        from pgcluster import PgCluster

        cluster = PgCluster()
        cluster.start()
    elif not args.no_postgres:
        print(f"no Postgres rows: {PG_INITDB} is not installed (scripts/setup installs it)")
    try:
        status = measure(args, wfrun, commands, cluster)
        if args.smoke:  # the pairs' code path too, against this tree's own commit
            args.against = "HEAD"
            status = against(args) or status
        return status
    finally:
        if cluster is not None:
            cluster.stop()


PG_INITDB = "/usr/lib/postgresql/15/bin/initdb"
RATIO_AIM = 2.0
PG_COMMANDS = ("wfrun status", "wfrun runs", "wfrun show RUN")


def one_run(wfrun: list[str], root: Path, env: dict[str, str]) -> str:
    """The project's one finished run on this store; its id."""
    out = subprocess.run([*wfrun, "run", "greet", "-i", "name=bench", "--json"], cwd=root,
                         env=env, capture_output=True, text=True, timeout=120, check=False)
    if out.returncode != 0:
        raise SystemExit(f"wfrun run failed (exit {out.returncode}): {out.stderr[-300:]}")
    return str(json.loads(out.stdout)["run_id"])


def instructions(cmd: list[str], cwd: Path, env: dict[str, str], stdin: bytes | None) -> int:
    """User-space instructions of one process: `perf stat` where the counter is exposed
    (a virtual machine often hides it), else callgrind (needs valgrind; ~50x slower)."""
    perf = subprocess.run(["perf", "stat", "-x,", "-e", "instructions:u", *cmd], cwd=cwd,
                          env=env, capture_output=True, timeout=600, input=stdin,
                          check=False) if shutil.which("perf") else None
    if perf is not None and perf.returncode == 0:
        counted = re.search(rb"^(\d+),[^,]*,instructions:u", perf.stderr, re.MULTILINE)
        if counted is not None:
            return int(counted[1])
    out = subprocess.run(["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null",
                          *cmd], cwd=cwd, env=env, capture_output=True, timeout=600,
                         input=stdin, check=False)
    found = re.search(rb"Collected : (\d+)", out.stderr)
    if out.returncode != 0 or found is None:
        raise SystemExit(f"callgrind of {' '.join(cmd)} failed: {out.stderr[-300:]!r}")
    return int(found[1])


def bench_project(tmp: Path) -> tuple[Path, dict[str, str]]:
    """A project holding the greeting workflow, and an environment without the
    caller's wfrun, Python or Claude settings (its own WFRUN_HOME)."""
    root = tmp / "proj"
    (root / ".wfrun" / "workflows").mkdir(parents=True)
    (root / ".wfrun" / "workflows" / "greet.yaml").write_text(WORKFLOW)
    controllers = root / ".wfrun" / "controllers"
    controllers.mkdir()
    (controllers / "tidy.yaml").write_text(TIDY)
    # One pass settles the key: the same spec applied again wakes nothing, so every
    # `host --once` after the first finds no work.
    (controllers / "tidy.py").write_text("def reconcile(ctx, resource):\n"
                                         "    return ctx.settled({'phase': 'tidy'})\n")
    (root / "spec.json").write_text(json.dumps({"repository": "octo/widgets", "number": 7}))
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("WFRUN_", "PYTHON", "CLAUDE"))}
    env["WFRUN_HOME"] = str(tmp / "home")
    return root, env


def measure(args: argparse.Namespace, wfrun: list[str], commands: dict[str, list[str]],
            cluster: Any) -> int:
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="wfrun-bench-cli-") as tmp:
        root, env = bench_project(Path(tmp))
        stop = json.dumps({"hook_event_name": "Stop", "session_id": "bench-cli-start",
                           "cwd": str(root), "stop_hook_active": False}).encode()
        stdin = {"wfrun hook claude-code": stop}
        envs = {name: env for name in commands}
        run_ids = {"sqlite": one_run(wfrun, root, env)}
        if cluster is not None:
            pg_env = {**env, "WFRUN_STORE": cluster.create_schema("bench_cli")}
            run_ids["postgres"] = one_run(wfrun, root, pg_env)
            for name in PG_COMMANDS:
                commands[f"{name} (postgres)"] = [
                    run_ids["postgres"] if a == "RUN" else a for a in commands[name]]
                envs[f"{name} (postgres)"] = pg_env
        commands["wfrun show RUN"] = [
            run_ids["sqlite"] if a == "RUN" else a for a in commands["wfrun show RUN"]]
        for name, cmd in commands.items():  # warm-up: byte-code caches, the store file
            timed(cmd, root, envs[name], stdin.get(name))
        samples: dict[str, list[float]] = {name: [] for name in commands}
        cpu: dict[str, list[float]] = {name: [] for name in commands}
        for _ in range(args.n):
            for name, cmd in commands.items():
                wall, used = timed(cmd, root, envs[name], stdin.get(name))
                samples[name].append(wall)
                cpu[name].append(used)
        counted = {name: instructions(cmd, root, envs[name], stdin.get(name))
                   for name, cmd in commands.items()} if args.instructions else {}
    load_after = os.getloadavg()
    figures = {name: {"p50_ms": round(statistics.median(v), 1),
                      "p95_ms": round(pct(v, 0.95), 1), "min_ms": round(min(v), 1),
                      "cpu_p50_ms": round(statistics.median(cpu[name]), 1)}
               for name, v in samples.items()}
    missed = [name for name, aim in AIMS_P50_MS.items() if figures[name]["p50_ms"] > aim]
    for name, count in counted.items():
        figures[name]["instructions_m"] = round(count / 1e6, 1)
    ratios = {name: round(figures[f"{name} (postgres)"]["p50_ms"] / figures[name]["p50_ms"], 2)
              for name in PG_COMMANDS if f"{name} (postgres)" in figures}
    cpu_ratios = {name: round(figures[f"{name} (postgres)"]["cpu_p50_ms"]
                              / figures[name]["cpu_p50_ms"], 2)
                  for name in ratios}
    missed += [f"{name} (postgres)" for name, ratio in ratios.items() if ratio > RATIO_AIM]
    load = f"load average {load_before[0]:.2f} before, {load_after[0]:.2f} after"
    if args.json:
        print(json.dumps({"machine": machine(), "load_average": [load_before[0], load_after[0]],
                          "runs": args.n, "aims_p50_ms": AIMS_P50_MS, "figures": figures,
                          "postgres_over_sqlite": ratios, "cpu_postgres_over_sqlite": cpu_ratios,
                          "ratio_aim": RATIO_AIM,
                          "missed": missed}, indent=2))
    else:
        print(f"machine: {machine()}; {load}")
        print(f"{args.n} runs each, interleaved")
        print(f"{'command':<27}{'p50 ms':>9}{'p95 ms':>9}{'min ms':>9}{'CPU p50':>9}"
              f"{'aim p50':>9}{'M instr':>9}")
        for name, f in figures.items():
            aim = AIMS_P50_MS.get(name)
            mark = "  (over the aim)" if name in missed else ""
            shown = f"{aim:.0f}" if aim else "-"
            count = f"{f['instructions_m']:.0f}" if "instructions_m" in f else "-"
            print(f"{name:<27}{f['p50_ms']:>9.1f}{f['p95_ms']:>9.1f}{f['min_ms']:>9.1f}"
                  f"{f['cpu_p50_ms']:>9.1f}{shown:>9}{count:>9}{mark}")
        for name, ratio in ratios.items():
            extra = ""
            if "instructions_m" in figures[name]:
                pg = figures[f"{name} (postgres)"]["instructions_m"]
                extra = f", instructions {pg / figures[name]['instructions_m']:.2f}x"
            print(f"{name}: Postgres / SQLite p50 {ratio:.2f}x, CPU {cpu_ratios[name]:.2f}x"
                  f"{extra} (aim <= {RATIO_AIM:.0f}x)")
    return 1 if args.check and missed else 0


# --- before/after pairs against a git ref ------------------------------------------

PAIR_COMMANDS = {
    "--version": ["--version"],
    "--help": ["--help"],
    "status": ["status"],
    "status --json": ["status", "--json"],
    "runs": ["runs"],
    "list --json": ["list", "--json"],
    "controllers --json": ["controllers", "--json"],
    "start NAME": ["start", "greet", "-i", "name=bench"],
    "run NAME": ["run", "greet", "-i", "name=bench", "--json"],
    # The controller verbs the e2e tests start ~72 of, on the project's `tidy` controller
    # (bench_project), and a host that starts its manager and finds nothing to do.
    "controller list NAME": ["controller", "list", "tidy", "--json"],
    "controller events NAME KEY": ["controller", "events", "tidy", "k1", "--json"],
    "controller apply NAME KEY FILE": ["controller", "apply", "tidy", "k1", "spec.json"],
    "host --once": ["host", "--once", "-q"],
}


def extract(ref: str, into: Path) -> Path:
    """REF's runner/ package under `into` (byte-compiled, as an install would be), with
    the built-in definitions/ and controllers/ beside it as in a checkout."""
    repo = Path(__file__).resolve().parents[1]
    archive = subprocess.run(["git", "archive", ref, "runner", "definitions", "controllers"],
                             cwd=repo,
                             capture_output=True, timeout=120, check=False)
    if archive.returncode != 0:
        raise SystemExit(f"git archive {ref} failed: {archive.stderr.decode()[-300:]}")
    into.mkdir(parents=True)
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive.stdout, check=True,
                   timeout=120)
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(into / "runner")],
                   env={k: v for k, v in os.environ.items()
                        if k != "PYTHONDONTWRITEBYTECODE"}, check=True, timeout=300)
    return into


def against(args: argparse.Namespace) -> int:
    """This tree's commands against REF's, in pairs; each pair's order alternates."""
    names = ["--version", "status"] if args.smoke else list(PAIR_COMMANDS)
    if args.only:
        names = [n.strip() for n in args.only.split(",")]
        unknown = [n for n in names if n not in PAIR_COMMANDS]
        if unknown:
            raise SystemExit(f"--only: no command {unknown[0]!r}; one of "
                             f"{', '.join(PAIR_COMMANDS)}")
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="wfrun-bench-cli-pairs-") as tmp:
        root, env = bench_project(Path(tmp))
        before_root = extract(args.against, Path(tmp) / "before")
        sides = {"before": {**env, "PYTHONPATH": str(before_root)},
                 "after": {**env, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}}
        base = [sys.executable, "-m", "runner"]
        one_run(base, root, sides["after"])  # the store exists and holds one finished run
        for side_env in sides.values():  # warm-up: byte-code caches, the store file
            for name in names:
                timed([*base, *PAIR_COMMANDS[name]], root, side_env)
        wall: dict[tuple[str, str], list[float]] = {}
        cpu: dict[tuple[str, str], list[float]] = {}
        for round_no in range(args.n):
            order = ["before", "after"] if round_no % 2 == 0 else ["after", "before"]
            for name in names:
                for side in order:
                    spent, used = timed([*base, *PAIR_COMMANDS[name]], root, sides[side])
                    wall.setdefault((name, side), []).append(spent)
                    cpu.setdefault((name, side), []).append(used)
        counted = {(name, side): instructions([*base, *PAIR_COMMANDS[name]], root,
                                              sides[side], None)
                   for name in names for side in sides} if args.instructions else {}
    load_after = os.getloadavg()
    rows = {}
    for name in names:
        row: dict[str, float] = {}
        for side in ("before", "after"):
            row[f"{side}_p50_ms"] = round(statistics.median(wall[name, side]), 1)
            row[f"{side}_cpu_p50_ms"] = round(statistics.median(cpu[name, side]), 1)
            if (name, side) in counted:
                row[f"{side}_instructions_m"] = round(counted[name, side] / 1e6, 1)
        row["cpu_ratio"] = round(row["after_cpu_p50_ms"] / row["before_cpu_p50_ms"], 2)
        rows[name] = row
    if args.json:
        print(json.dumps({"machine": machine(), "against": args.against, "runs": args.n,
                          "load_average": [load_before[0], load_after[0]], "figures": rows},
                         indent=2))
        return 0
    print(f"machine: {machine()}; load average {load_before[0]:.2f} before, "
          f"{load_after[0]:.2f} after")
    print(f"{args.n} pairs each, interleaved; before = {args.against}, after = this tree; "
          "both `python -m runner`")
    print(f"{'wfrun ...':<20}{'wall before':>12}{'after':>8}{'CPU before':>12}{'after':>8}"
          f"{'CPU x':>7}{'M instr before':>16}{'after':>8}")
    for name, row in rows.items():
        counts = (f"{row['before_instructions_m']:>16.0f}{row['after_instructions_m']:>8.0f}"
                  if "before_instructions_m" in row else f"{'-':>16}{'-':>8}")
        print(f"{name:<20}{row['before_p50_ms']:>12.1f}{row['after_p50_ms']:>8.1f}"
              f"{row['before_cpu_p50_ms']:>12.1f}{row['after_cpu_p50_ms']:>8.1f}"
              f"{row['cpu_ratio']:>7.2f}{counts}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
