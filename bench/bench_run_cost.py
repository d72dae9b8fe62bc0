"""What one trivial 3-node queued run costs: CPU, SQL statements, commits, file syscalls.

    .venv/bin/python bench/bench_run_cost.py            # 200 runs
    .venv/bin/python bench/bench_run_cost.py -n 50 --no-scrub
    .venv/bin/python bench/bench_run_cost.py --root DIR     # `runner` from DIR (before)
    .venv/bin/python bench/bench_run_cost.py --split        # CPU per part of the run

One process, one real `SqliteStore` (WAL, synchronous=FULL) in a temporary project,
a 3-node compute chain, every cycle on one worker thread, as a `wfrun host` slot
runs its runs (`--same-thread`: on the main thread; `--new-thread`: a new thread per
run, as hosts did before their workers lived for the host's life: each new thread
pays for cold caches and fresh stack pages, ~2 ms here). Each cycle is `prepare`
(the committed `queued` row) -> `execute` of the launch queued the cycle before
(activation, 3 nodes, the ending, whose commit claims the launch just queued, as a
busy `wfrun host` slot takes its next run; `--no-chain`: `claim_next` -> `execute`,
a claim of its own), i.e. a detached `wfrun start` + host slot without process
start-up. Counted per run, from the second run on (the first pays imports and compiles):

- CPU ms (time.process_time) and wall ms, median; the mean CPU split into user and
  kernel time (os.times over all the runs);
- SQL statements sent (sqlite3's trace callback: every statement, PRAGMAs and
  BEGIN/COMMIT included) and COMMITs;
- file-system calls made through Python's os module: fsync, fdatasync, renames
  (os.replace/rename), chmods (os.chmod/fchmod), mkdir calls (and how many of them
  failed because the folder existed), files created (os.open with O_CREAT).

`--split` also prints where the CPU goes: each thread's CPU time (thread_time) charged
to the innermost of these parts it is spent in: the store (every call into its domain
classes, SQLite included), the bundle (every FolderBundle method: its file system calls
and Python), the compile cache (`Workspace.compile`), template rendering, and the rest
(the engine's and the launch layer's own Python). The wrappers cost a little CPU too.

Printed beside them, measured in the same run: one fsync'd 1-line append and one
WAL synchronous=FULL commit of a one-row insert on this disk, so the figures can be
compared with the disk's floor.
"""

from __future__ import annotations

import argparse
import collections
import cProfile
import inspect
import os
import pstats
import queue
import sqlite3
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchkit import (  # bench/ is on sys.path
    CHAIN3,
    file_create_cost,
    machine,
    plain_coordinator,
    settled_project,
    sqlite_commit_cost,
    use_root,
)

ROOT = use_root()  # `--root DIR`: `runner` from DIR (benchkit.use_root)

from runner.compiler import build_catalog  # noqa: E402
from runner.host.runtime._local import Workspace  # noqa: E402
from runner.store import SqliteStore  # noqa: E402

WORKFLOW = CHAIN3

COUNTS: collections.Counter[str] = collections.Counter()
STATEMENTS: list[str] | None = None  # `--statements`: the last run's, in order


def _counting(name: str, fn: Callable[..., Any],
              key: Callable[..., str | None] | None = None) -> Callable[..., Any]:
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        label = key(*args, **kwargs) if key else name
        try:
            return fn(*args, **kwargs)
        except FileExistsError:
            COUNTS[f"{name} (failed: exists)"] += 1
            raise
        finally:
            if label:
                COUNTS[label] += 1
    return wrapper


def _open_key(path: Any, flags: int, *args: Any, **kwargs: Any) -> str | None:
    return "files created (O_CREAT)" if flags & os.O_CREAT else None


def install_counters() -> None:
    os.fsync = _counting("fsync", os.fsync)  # type: ignore[assignment]
    os.fdatasync = _counting("fdatasync", os.fdatasync)  # type: ignore[assignment]
    os.replace = _counting("rename", os.replace)  # type: ignore[assignment]
    os.rename = _counting("rename", os.rename)  # type: ignore[assignment]
    os.chmod = _counting("chmod", os.chmod)  # type: ignore[assignment]
    os.fchmod = _counting("chmod", os.fchmod)  # type: ignore[assignment]
    os.mkdir = _counting("mkdir", os.mkdir)  # type: ignore[assignment]
    os.open = _counting("open", os.open, _open_key)  # type: ignore[assignment]
    sqlite3.connect = _counting("SQLite connections opened", sqlite3.connect)  # type: ignore[assignment]


def trace(statement: str) -> None:
    COUNTS["SQL statements"] += 1
    if STATEMENTS is not None:
        STATEMENTS.append(" ".join(statement.split())[:150])
    head = statement.lstrip().split(None, 1)[0].upper() if statement.strip() else ""
    if head == "COMMIT":
        COUNTS["SQL COMMITs"] += 1
    elif head in ("SELECT", "INSERT", "UPDATE", "DELETE", "PRAGMA", "BEGIN"):
        COUNTS[f"SQL {head}"] += 1


OUTSIDE = "outside"  # CPU outside every wrapped part: the rest, counted from os.times


class Split:
    """Exclusive CPU per part: each thread charges its CPU time to the innermost part."""

    def __init__(self) -> None:
        self.cpu: collections.Counter[str] = collections.Counter()
        self._local = threading.local()

    def _stack(self) -> list[list[Any]]:
        stack: list[list[Any]] | None = getattr(self._local, "stack", None)
        if stack is None:
            stack = self._local.stack = [[OUTSIDE, time.thread_time()]]
        return stack

    def wrap(self, owner: Any, name: str, part: str) -> None:
        setattr(owner, name, self.charged(getattr(owner, name), part))

    def charged(self, fn: Callable[..., Any], part: str) -> Callable[..., Any]:
        def charged(*args: Any, **kwargs: Any) -> Any:
            stack, now = self._stack(), time.thread_time()
            self.cpu[stack[-1][0]] += now - stack[-1][1]
            stack.append([part, now])
            try:
                return fn(*args, **kwargs)
            finally:
                stack, now = self._stack(), time.thread_time()
                top = stack.pop()
                self.cpu[top[0]] += now - top[1]
                stack[-1][1] = now
        return charged

    def wrap_class(self, cls: type, part: str) -> None:
        for name, member in list(vars(cls).items()):
            if name.startswith("__") or isinstance(member, type):
                continue
            if isinstance(member, (staticmethod, classmethod)):
                setattr(cls, name, type(member)(self.charged(member.__func__, part)))
            elif inspect.isfunction(member):
                setattr(cls, name, self.charged(member, part))

    def install(self) -> None:
        from runner.engine import _nodes as nodes
        from runner.engine._bundle import FolderBundle
        from runner.store.domain import _intents as intents
        from runner.store.domain import _launch_queries as events
        from runner.store.domain import _launches as launches
        from runner.store.domain import _notifications as notifications
        from runner.store.domain import _pages as pages

        self.wrap_class(FolderBundle, "bundle (files)")
        for cls in (launches.LaunchQueue, pages.LaunchPages, events.RunEvents,
                    events.EventLog, intents.TurnIntents, notifications.Notifications):
            self.wrap_class(cls, "store (SQLite)")
        self.wrap(Workspace, "compile", "compile cache")
        self.wrap(nodes, "render_native", "templates")

    def reset(self) -> None:
        stack = self._stack()
        stack[-1][1] = time.thread_time()
        self.cpu.clear()


def main() -> int:
    from bench_engine import time_fsync  # here: it puts REPO first on sys.path

    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--smoke", action="store_true",
        help="tiny sizes: the script runs, figures mean nothing (tests use it)")
    parser.add_argument("-n", type=int, default=200)
    parser.add_argument("--no-chain", action="store_true",
                        help="claim each launch apart (before chained claims)")
    parser.add_argument("--no-scrub", action="store_true",
                        help="no WAL checkpoint after input is cleared (to compare)")
    threads = parser.add_mutually_exclusive_group()
    threads.add_argument("--same-thread", action="store_true",
                         help="run every cycle on the main thread (default: on one worker "
                              "thread, as a `wfrun host` slot does)")
    threads.add_argument("--new-thread", action="store_true",
                         help="run each cycle on a new thread")
    parser.add_argument("--split", action="store_true",
                        help="also print where the CPU goes (store, bundle, templates...)")
    parser.add_argument("--fresh", action="store_true",
                        help="a project made this second (its first second's compiles "
                             "re-scan the folders; default: one settled 10 s ago)")
    parser.add_argument("--statements", action="store_true",
                        help="also print the last run's SQL statements, in order")
    parser.add_argument("--profile", type=int, metavar="N", default=0,
                        help="also cProfile the measured runs (on the main thread) and "
                             "print the N functions with the most own time")
    parser.add_argument("--callees", action="append", metavar="NAME",
                        help="with --profile: also print what functions matching NAME call")
    args = parser.parse_args()
    if args.profile:
        args.same_thread = True  # cProfile profiles the thread that enables it
    if args.smoke:
        args.n = 5
    tmp = Path(tempfile.mkdtemp(prefix="wfrun-bench-runcost-"))
    root = tmp / "proj"
    settled_project(root, {"three.yaml": WORKFLOW})  # `--fresh`: as a new project is
    if args.fresh:
        os.utime(root / ".wfrun" / "runs")  # a folder changed now: compiles re-scan
    fsync_ms, commit_ms = time_fsync(tmp), sqlite_commit_cost(tmp)
    create_us = file_create_cost(tmp)
    ws = Workspace(build_catalog("workflows", root, None), root, root / ".wfrun")
    store = SqliteStore(root / ".wfrun" / "state" / "store.sqlite3")
    split = Split() if args.split else None
    if split is not None:
        split.install()  # first: the coordinator's launch book takes the queue's methods
    coord = plain_coordinator(ws, store, "bench-cost",
                              scrub_input=not args.no_scrub)
    install_counters()
    cpu, wall = [], []
    times0 = os.times()
    # CPU time, not wall: fsync and commit waits would hide the Python otherwise.
    profiler = cProfile.Profile(time.thread_time) if args.profile else None
    traced: list[bool] = []

    def traced_connection() -> None:
        # The store's own hook: this thread's read connection and the process's one
        # write connection (every write goes through it since items37).
        if not traced:
            hook = getattr(store._db, "trace", None)  # a `--root` runner may lack it
            if hook is not None:
                hook(trace)
            else:
                store._db.connection().set_trace_callback(trace)
            traced.append(True)

    # A host slot's steady state: the slot's next launch is claimed with the last run's
    # ending (`next_claim`), so each cycle queues one launch and runs the one claimed
    # before. `--no-chain`, or a `--root` runner without chained claims: a claim of
    # its own per run, as before.
    chain = getattr(coord, "next_claim", None) if not args.no_chain else None
    pending: list[Any] = []

    def cycle() -> Any:
        traced_connection()
        coord.prepare("three", None)
        if chain is None:
            record = coord.claim_next(None)
            assert record is not None
            return coord.execute(record)
        if not pending:  # the first cycle: one launch ahead, as a busy queue has
            coord.prepare("three", None)
            pending.append(coord.claim_next(None))
        then = chain()
        outcome = coord.execute(pending.pop(), then_claim=then)
        pending.append(then.record)
        return outcome

    # One worker for every run, as `wfrun host` keeps one thread per slot in use.
    asks: queue.SimpleQueue[bool] = queue.SimpleQueue()
    answers: queue.SimpleQueue[Any] = queue.SimpleQueue()

    def work() -> None:
        while asks.get():
            try:
                answers.put(cycle())
            except BaseException as exc:  # reported by the main thread
                answers.put(exc)

    worker = threading.Thread(target=work, daemon=True, name="bench-worker")
    if not (args.same_thread or args.new_thread):
        worker.start()
    for i in range(args.n + 1):
        if i == 1:
            COUNTS.clear()  # the first run pays imports and compiles
            if split is not None:
                split.reset()
            times0 = os.times()
            if profiler is not None:
                profiler.enable()
        global STATEMENTS
        STATEMENTS = [] if args.statements else None
        c0, t0 = time.process_time(), time.perf_counter()
        if args.same_thread:
            outcome = cycle()
        elif args.new_thread:
            box: list[Any] = []
            thread = threading.Thread(target=lambda out=box: out.append(cycle()))
            thread.start()
            thread.join()
            outcome = box[0] if box else None
        else:
            asks.put(True)
            outcome = answers.get()
            if isinstance(outcome, BaseException):
                raise outcome
        cpu.append((time.process_time() - c0) * 1000)
        wall.append((time.perf_counter() - t0) * 1000)
        if outcome is None or outcome.status != "completed" or outcome.final_output != 3:
            sys.exit(f"the run did not complete: {outcome}")
    times1 = os.times()
    if profiler is not None:
        profiler.disable()
    asks.put(False)
    store.close()
    runs = args.n
    # os.times ticks in 10 ms: only the totals over all runs split user from kernel time.
    user = (times1.user - times0.user) / runs * 1000
    kernel = (times1.system - times0.system) / runs * 1000
    print(f"machine: {machine()}")
    print(f"runner imported from {ROOT}")
    print(f"disk ({tmp.parent}): one fsync'd append {fsync_ms:.3f} ms; one WAL FULL commit "
          f"{commit_ms:.3f} ms; one file created {create_us:.0f} µs CPU")
    where = ("the main thread" if args.same_thread else
             "a new thread per run" if args.new_thread else "one worker thread")
    shape = "prepare -> claim -> execute" if chain is None else "prepare -> execute + claim"
    print(f"3-node queued run ({shape}), {runs} runs, "
          f"{where}, "
          f"scrub {'off' if args.no_scrub else 'on'}:")
    print(f"  CPU  median {statistics.median(cpu[1:]):.2f} ms per run")
    print(f"  CPU  mean   {user + kernel:.2f} ms per run: user {user:.2f}, kernel {kernel:.2f}")
    print(f"  wall median {statistics.median(wall[1:]):.2f} ms per run")
    for name in sorted(COUNTS):
        print(f"  {name:<28} {COUNTS[name] / runs:6.2f} per run")
    if STATEMENTS is not None:
        print("  the last run's statements (the enqueue of the next run first):")
        for number, statement in enumerate(STATEMENTS, 1):
            print(f"    {number:2}. {statement}")
    if profiler is not None:
        print(f"  cProfile (the profiler's own cost inflates every figure), per {runs} runs:")
        stats = pstats.Stats(profiler, stream=sys.stdout)
        stats.sort_stats("tottime").print_stats(args.profile)
        stats.sort_stats("cumulative").print_stats("runner/", args.profile)
        for name in args.callees or ():
            stats.print_callees(name)
    if split is not None:
        parts = {k: v * 1000 / runs for k, v in split.cpu.items() if k != OUTSIDE}
        parts["the rest (engine, launch)"] = user + kernel - sum(parts.values())
        print("  CPU by part (all threads; the rest is the process's CPU minus the parts;")
        print("  the wrappers' own cost is in the parts):")
        for part, ms in sorted(parts.items(), key=lambda kv: -kv[1]):
            print(f"    {part:<26} {ms:6.2f} ms per run")
    return 0


if __name__ == "__main__":
    sys.exit(main())
