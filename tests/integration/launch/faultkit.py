"""A seeded fault-injection harness over one real store (issue 9, "Prove it"): the
SQLite file, or (`store_url`) a Postgres schema with the run bundles as rows.

One seed drives a random schedule of detached starts, session launches (claimed
only at their own session's boundary), foreground runs (claimed by id), cancels and
restarts. Controller children are the same rows; their crash matrix runs with real
processes in tests/integration/controllers/test_controller_child_crashes.py.
Crashes are injected at every named point of the launch and engine path by
raising `Crash` (a BaseException, so no boundary on the run path can swallow it:
the runner is dead from then on), and
lease expiry is a jump of the store's FakeClock. After the schedule, a final
recovery drains everything; then the invariants are checked. A failing seed
replays exactly from its number: `python bench/bench_faults.py --seed N`.
"""

from __future__ import annotations

import contextlib
import json
import random
import shutil
import tempfile
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from runner.clock import FakeClock
from runner.compiler import build_catalog
from runner.engine import RunControl, RunReader
from runner.engine._runtypes import CRASH_POINTS as ENGINE_POINTS
from runner.errors import WfrunError
from runner.host.runtime._local import Workspace
from runner.launch import EngineOptions, LaunchCoordinator, PreflightError
from runner.launch._coordinator import CRASH_POINTS as LAUNCH_POINTS
from runner.launch._itemwork import HOST_ITEM_POINTS, HostItems
from runner.store import SqliteStore, Store
from runner.testing import build_coordinator

LEASE = 30.0
SESSIONS = ("session-a", "session-b")  # launches only their own session activates
POINTS = tuple(p for p in (*LAUNCH_POINTS, *ENGINE_POINTS, *HOST_ITEM_POINTS)
               if p not in ("after_session_append",))
WORKFLOW = """\
input:
  type: object
  required: [who]
  properties: {who: {type: string}}
start: first
nodes:
  first:
    action: {shell: ["sh", "-c", "echo \\"$0 $1\\" >> effects.log", "{{ run.id }}", "first"]}
  second:
    action: {shell: ["sh", "-c", "echo \\"$0 $1\\" >> effects.log", "{{ run.id }}", "second"]}
  close: {compute: "{{ {'who': input.who} }}"}
edges:
  - {from: first, to: second}
  - {from: second, to: close}
"""

# `fanout=True` seeds also start this one: a map of 8 shell items, 2 at a time (enough
# for a host's slots to claim items ahead, ADR 0014), and a parallel node; each item
# logs its run and index to effects.log.
FAN = """\
input:
  type: object
  required: [who]
  properties: {who: {type: string}}
start: each
nodes:
  each:
    map:
      over: "{{ range(ITEMS) | list }}"
      max_concurrency: 2
      do:
        action: {shell: ["sh", "-c", "echo \\"$0 item $1\\" >> effects.log", "{{ run.id }}",
                         "{{ item }}"]}
  both:
    parallel:
      branches:
        a: {action: {shell: ["sh", "-c", "echo \\"$0 branch a\\" >> effects.log",
                             "{{ run.id }}"]}}
        b: {compute: "{{ 1 }}"}
  close: {compute: "{{ {'who': input.who} }}"}
edges:
  - {from: each, to: both}
  - {from: both, to: close}
""".replace("ITEMS", "8")
FAN_ITEMS = 8


# `pure=True` seeds also start this one: compute nodes only, so a runner on folders
# writes each run whole with its ending (ADR 0009, lever 3; engine/_bundle.py).
PURE = """\
input:
  type: object
  required: [who]
  properties: {who: {type: string}}
start: one
nodes:
  one: {compute: "{{ input.who }}"}
  two: {compute: "{{ outputs.one }}"}
  close: {compute: "{{ {'who': outputs.two} }}"}
edges:
  - {from: one, to: two}
  - {from: two, to: close}
"""


class Crash(BaseException):
    """The runner died here (nothing after this point of its thread runs)."""


def drop_fds_under(folder: Path) -> None:
    """A simulated death leaves the dead runner's bundle locks open in this process;
    a real one releases them with the process (Linux /proc)."""
    import os

    prefix = str(folder.resolve())
    for name in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{name}")
        except OSError:
            continue
        if target.startswith(prefix):
            with contextlib.suppress(OSError):
                os.close(int(name))


@dataclass
class Report:
    seed: int
    launches: int = 0
    crashes: int = 0
    points: set[str] = field(default_factory=set)  # the crash points that fired
    host_items: int = 0  # items host item workers claimed (ADR 0008 phase 2)
    problems: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"seed": self.seed, "launches": self.launches, "crashes": self.crashes,
                "problems": self.problems}


def open_store(root: Path, store_url: str | None, clock: FakeClock) -> Store:
    if store_url is None:
        return SqliteStore(root / ".wfrun" / "state" / "store.sqlite3", clock=clock)
    from runner.store.postgres import PostgresStore

    return PostgresStore(store_url, clock=clock, pool_size=2)


class World:
    def __init__(self, root: Path, seed: int, store_url: str | None = None,
                 hosted: bool = False) -> None:
        self.root = root
        # Runners are hosts (ADR 0008 phase 2): a run parks at a shared map and host
        # item workers (`items` steps) run its items.
        self.hosted = hosted
        self.rng = random.Random(seed)
        (root / ".wfrun" / "workflows").mkdir(parents=True)
        (root / ".wfrun" / "workflows" / "job.yaml").write_text(WORKFLOW)
        (root / ".wfrun" / "workflows" / "fan.yaml").write_text(FAN)
        (root / ".wfrun" / "workflows" / "pure.yaml").write_text(PURE)
        self.clock = FakeClock()
        self.ws = Workspace(build_catalog("workflows", root, None), root, root / ".wfrun")
        self.store = open_store(root, store_url, self.clock)
        self.rows = self.ws.bundle_rows(self.store)  # None on SQLite: bundle folders
        self.reader = RunReader(self.ws.runs_dir, self.rows)
        self.crashes = 0
        self.points: set[str] = set()
        self.runners = 0

    def coordinator(self, crash_every: float) -> LaunchCoordinator:
        """A new runner (a new process, as far as the store can tell)."""
        self.runners += 1
        rng = self.rng

        def crash(point: str) -> None:
            if point in POINTS and rng.random() < crash_every:
                self.crashes += 1
                self.points.add(point)
                raise Crash(point)

        options = EngineOptions(project_root=self.root, crash_point=crash,
                                items_on_hosts=self.hosted)
        return build_coordinator(self.ws, self.store, "plain",
                                 runner=f"runner-{self.runners}", clock=self.clock,
                                 options=options, lease_seconds=LEASE, crash=crash,
                                 scrub_input=False, rows=self.rows)

    def effects(self) -> list[str]:
        path = self.root / "effects.log"
        return path.read_text().splitlines() if path.exists() else []


def run_seed(seed: int, *, steps: int = 12, crash_every: float = 0.08,
             store_url: str | None = None, fanout: bool = False,
             pure: bool = False) -> Report:
    """One seed; `store_url`: an empty Postgres schema to run it on (else SQLite);
    `fanout`: every other launch runs the map-and-parallel workflow; `pure`: every
    other launch runs compute nodes only (written whole with its ending)."""
    tmp = Path(tempfile.mkdtemp(prefix=f"wfrun-fault-{seed}-"))
    try:
        return _run(World(tmp / "p", seed, store_url, hosted=fanout and seed % 2 == 1),
                    seed, steps, crash_every, "fan" if fanout else "pure" if pure else None)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _run(w: World, seed: int, steps: int, crash_every: float,
         other: str | None = None) -> Report:
    report = Report(seed)
    rng = w.rng
    co = w.coordinator(crash_every)
    items = co.host_items()  # this runner's host item worker
    ids: list[str] = []
    kinds = ["start", "start", "session", "foreground", "drain", "drain", "session_drain",
             "cancel", "expire", "restart"] + (["items", "items"] if other == "fan" else [])
    for step in range(steps):
        ref = other if other is not None and step % 2 == 0 else "job"
        action = rng.choice(kinds)
        try:
            if action in ("start", "foreground", "session"):
                session = rng.choice(SESSIONS) if action == "session" else None
                value = {"who": f"w{rng.randrange(1000)}"}
                if action == "foreground":  # queued and claimed in one commit, as `wfrun run`
                    record = co.prepare_here(ref, value)
                    ids.append(record.run_id)
                    co.execute(record, control=RunControl())
                else:
                    record = co.prepare(ref, value, session_id=session)
                    ids.append(record.run_id)
            elif action in ("drain", "session_drain"):
                session = rng.choice(SESSIONS) if action == "session_drain" else None
                if session is not None:
                    co.recover_expired(session)  # a session boundary, as the controller does
                claimed = co.claim_next(session)
                if claimed is not None:
                    co.execute(claimed)
            elif action == "items":
                report.host_items += _host_items(items, rng.randint(1, 3))
            elif action == "cancel" and ids:
                co.cancel(rng.choice(ids))
            elif action == "expire":
                w.clock.advance(LEASE + 1)
            else:
                co = w.coordinator(crash_every)
                items.close()
                items = co.host_items()
        except Crash:
            drop_fds_under(w.ws.runs_dir)
            co = w.coordinator(crash_every)  # the process died; a new one starts later
            items.close()  # (its lease renewals die with it)
            items = co.host_items()
            w.clock.advance(LEASE + 1)
        except (WfrunError, PreflightError):
            pass  # a refused cancel or claim: the race was lost, nothing changed
    # Final recovery: no more crashes; expire every lease and drain until idle.
    co = w.coordinator(0.0)
    items.close()
    items = co.host_items()
    w.clock.advance(LEASE + 1)
    # Again while it moves anything: a run resumed below may park at its map, and its
    # items then run in host slots, which re-queues it.
    for _ in range(4):
        if not _recover(co, items, ids, report):
            break
    items.close()
    report.launches = len(ids)
    report.crashes = w.crashes
    report.points = set(w.points)
    report.problems = check_invariants(w, ids)
    w.store.close()
    return report


def _recover(co: LaunchCoordinator, items: HostItems, ids: list[str],
             report: Report) -> bool:
    """Drain until idle (claims, host items), then resume what is parked; True if any
    of it moved."""
    moved = False
    for session in (None, *SESSIONS):
        for _ in range(len(ids) * 3 + 5):
            if session is not None:
                co.recover_expired(session)
            claimed = co.claim_next(session)
            ran = 0 if session is not None else _host_items(items, 4)
            report.host_items += ran
            if claimed is None and not ran:
                break
            moved = True
            if claimed is not None:
                co.execute(claimed)
    for record in co.store.launches.query(statuses=["parked"]):
        co.execute(co.claim(record.run_id))  # explicit resumes of what a person parked
        moved = True
    return moved


def _host_items(items: HostItems, want: int) -> int:
    """A host's free slots run up to `want` shared items, one after another."""
    claimed = items.claim(want)
    for claim in claimed:
        items.run(claim, RunControl())
    return len(claimed)


AGREES = {"done": ("completed", "waiting"), "failed": ("failed", "timed_out", None),
          "cancelled": ("cancelled", None)}


def check_invariants(w: World, ids: list[str]) -> list[str]:
    problems: list[str] = []
    effects = w.effects()
    for run_id in ids:
        record = w.store.launches.get(run_id)
        if record is None:
            problems.append(f"{run_id}: launch row lost")
            continue
        status = w.reader.status(run_id)
        if record.status not in AGREES:
            problems.append(f"{run_id}: launch not terminal ({record.status})")
            continue
        if status not in AGREES[record.status]:
            problems.append(f"{run_id}: launch {record.status} but bundle {status}")
        if record.status == "failed" and not record.error_code:
            problems.append(f"{run_id}: failed without a code")
        if record.input_json is not None:
            problems.append(f"{run_id}: private input kept after it ended")
        if w.reader.exists(run_id) and w.reader.started(run_id):
            trace = w.reader.trace(run_id)
            if [e["type"] for e in trace].count("run_started") != 1:
                problems.append(f"{run_id}: run_started is not exactly once")
            started = trace[0].get("payload", {})
            if not isinstance(started.get("input"), dict) or "who" not in started["input"]:
                problems.append(f"{run_id}: a node could run without the input")
            for node in ("first", "second"):
                ran = effects.count(f"{run_id} {node}")
                finished = sum(1 for e in trace if e["type"] == "node_finished"
                               and e.get("node") == node)
                # A completed node never runs again; an interrupted one at most twice.
                if finished and ran > 2:
                    problems.append(f"{run_id}: {node} ran {ran} times")
                if ran > 2:
                    problems.append(f"{run_id}: {node} ran {ran} times (budget is 2)")
            if status == "completed" and w.reader.final_output(run_id) != started["input"]:
                problems.append(f"{run_id}: final output does not match the input")
            if record.workflow_ref == "fan":
                problems.extend(_fan_problems(w, run_id, trace, effects, status))
        elif record.status == "done":
            problems.append(f"{run_id}: done without a bundle")
    for held in w.store.launches.query(statuses=["queued", "starting", "running"]):
        problems.append(f"{held.run_id}: still {held.status} after recovery")
    for session in SESSIONS:
        held = w.store.launches.find_session_reservation(session)
        if held is not None:
            problems.append(f"{session}: reservation held by {held.run_id} ({held.status})")
        if session in {r.origin_session_id for r in w.store.launches.query()}:
            # At most one follow-up per run, and one only for a run that failed.
            for intent in w.store.turn_intents.list_eligible(session):
                row = w.store.launches.get(intent.run_id)
                if intent.cause in ("launch_failed", "failed", "timed_out") and (
                        row is None or row.status != "failed"):
                    problems.append(f"{intent.run_id}: a failure follow-up for a "
                                    f"{row.status if row else 'missing'} launch")
    for run_id in ids:
        pending = w.store.turn_intents.list_pending(run_id)
        if len(pending) > 1:
            problems.append(f"{run_id}: {len(pending)} pending follow-ups")
        record = w.store.launches.get(run_id)
        if record is not None and record.origin_session_id is None and pending:
            problems.append(f"{run_id}: a detached launch has a session follow-up")
    return problems


def _fan_problems(w: World, run_id: str, trace: list[dict[str, Any]], effects: list[str],
                  status: str | None) -> list[str]:
    """A map's and a parallel node's items: none started a third time, none ran more
    often than it was started, every one ended once the run completed, and each
    fan-out node ended once per visit."""
    from runner.store.domain._fanout import ItemKey

    problems: list[str] = []
    for node, labels in (("each", [f"item {i}" for i in range(FAN_ITEMS)]),
                         ("both", ["branch a"])):
        ends = sum(1 for e in trace if e["type"] in ("node_finished", "node_failed")
                   and e.get("node") == node and not e["payload"].get("will_retry"))
        if ends > 1:
            problems.append(f"{run_id}: {node} ended {ends} times")
        rows = w.store.fanout.items(ItemKey(run_id, node, 1))
        for row in rows:
            if row.starts > 2:
                problems.append(f"{run_id}: {node}[{row.index}] started {row.starts} times")
            if status == "completed" and row.state in ("pending", "running"):
                problems.append(f"{run_id}: {node}[{row.index}] {row.state} after the run")
        for i, label in enumerate(labels):
            ran = effects.count(f"{run_id} {label}")
            starts = rows[i].starts if i < len(rows) else 0
            if ran > max(starts, 0) or ran > 2:
                problems.append(f"{run_id}: {node}[{i}] ran {ran} times, started {starts}")
    return problems


def main(argv: list[str]) -> int:
    """`--seeds N` (default 1000) or `--seed S`: print one JSON line per failing seed
    and a summary. `--help` prints the options; an unknown one is a usage error."""
    import argparse
    import time

    parser = argparse.ArgumentParser(
        prog="bench_faults.py", description="Seeded crash injection over one real SQLite "
        "store; exits 1 if any seed broke an invariant.")
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--seeds", type=int, default=1000, metavar="N",
                       help="run seeds 0..N-1 (default 1000)")
    which.add_argument("--seed", type=int, metavar="S", help="run one seed")
    parser.add_argument("--fanout", action="store_true",
                        help="maps and parallel nodes too (issue 37)")
    parser.add_argument("--pure", action="store_true",
                        help="pure runs, written whole with their endings (ADR 0009)")
    args = parser.parse_args(argv)
    seeds = [args.seed] if args.seed is not None else list(range(args.seeds))
    fanout, pure = args.fanout, args.pure
    t0 = time.perf_counter()
    failed = 0
    launches = crashes = host_items = 0
    points: Counter[str] = Counter()
    for seed in seeds:
        report = run_seed(seed, fanout=fanout, pure=pure)
        launches += report.launches
        crashes += report.crashes
        host_items += report.host_items
        points.update(report.points)
        if report.problems:
            failed += 1
            print(json.dumps(report.to_json()))
    elapsed = time.perf_counter() - t0
    print(json.dumps({"seeds": len(seeds), "failed": failed, "launches": launches,
                      "crashes_injected": crashes, "host_items": host_items,
                      "seeds_per_point": dict(sorted(points.items())),
                      "seconds": round(elapsed, 1),
                      "ms_per_seed": round(elapsed * 1000 / max(len(seeds), 1), 1)}))
    return 1 if failed else 0
