"""A controller manager in its own process, for the crash and multi-process tests.

    python ctl_driver.py PROJECT [--lease S] [--workers N] [--agent SPEC]
                                 [--once | --serve] [--wait S]

It wires the project's store, discovered controllers and child workflows exactly
as `wfrun controller run` does (runner.host.runtime._controllers.make_manager), plus two
things the CLI does not expose: the claim lease, and a crash seam. With
`CTL_CRASH_AT=<point>[:<n>]` in the environment (a point of
runner.controllers._effects.CRASH_POINTS or manager.MANAGER_CRASH_POINTS, or
`before_child_queued`: a child's attempt is saved, its launch row not yet queued)
the process SIGKILLs itself the n-th time it passes that point, the way a power
cut or OOM kill would. The launch and engine points (`WFRUN_CRASH_AT`) work here
too: child runs read it.

--once: run passes until nothing is ready, then wait for child runs this
process started and keep going until nothing is ready and no child is active
(or --wait seconds passed). --serve: run workers until SIGTERM. Prints `ready`
on stderr once the manager exists. With `WFRUN_CLOCK_FILE=path` the store and the
manager read the time from that file (runner.clock.FileClock), so leases and
delayed wake-ups come due when the test moves the file on.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from runner.clock import clock_from_env
from runner.compiler import build_catalog
from runner.controllers import ManagerConfig
from runner.controllers._effects import CRASH_POINTS
from runner.controllers._manager import MANAGER_CRASH_POINTS
from runner.host.runtime._controllers import discover, make_manager
from runner.host.runtime._local import Workspace, make_executor, open_store

#: Where a child's attempt is saved but its launch row not yet queued.
CHILD_POINTS = ("before_child_queued",)


def crash_hook(spec: str | None) -> Callable[[str], None] | None:
    if not spec:
        return None
    point, _, count = spec.partition(":")
    assert point in CRASH_POINTS + CHILD_POINTS + MANAGER_CRASH_POINTS, spec
    target, seen = int(count or 1), [0]

    def crash(name: str) -> None:
        if name == point:
            seen[0] += 1
            if seen[0] == target:
                sys.stderr.write(f"crashing at {point}\n")
                sys.stderr.flush()
                os.kill(os.getpid(), signal.SIGKILL)

    return crash


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("project")
    ap.add_argument("--lease", type=float, default=30.0)
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--agent", default=None)
    ap.add_argument("--once", action="store_true")
    ap.add_argument("--serve", action="store_true")
    ap.add_argument("--wait", type=float, default=10.0)
    args = ap.parse_args()
    root = Path(args.project).resolve()
    ws = Workspace(build_catalog("workflows", root, None), root, root / ".state",
                   clock=clock_from_env())
    store = open_store(ws)
    manager = make_manager(ws, store, discover(ws, None),
                           executor=make_executor(args.agent, ws.clock),
                           config=ManagerConfig(workers=args.workers, lease_seconds=args.lease,
                                                idle_poll=0.05))
    hook = crash_hook(os.environ.get("CTL_CRASH_AT"))
    if hook is not None:
        manager.crash = hook
        if manager.children is not None:
            launcher: Any = manager.children.launcher
            launch = launcher.launch

            def crashing_launch(run_id: str, workflow: str, run_input: Any) -> str | None:
                hook("before_child_queued")
                result: str | None = launch(run_id, workflow, run_input)
                return result

            launcher.launch = crashing_launch
    sys.stderr.write("ready\n")
    sys.stderr.flush()
    if args.serve:
        stop = threading.Event()
        signal.signal(signal.SIGTERM, lambda *_: stop.set())
        manager.start()
        stop.wait()
        manager.stop(grace=5)
        return 0
    passes = 0
    deadline = time.monotonic() + args.wait
    children = manager.children
    while True:
        # As `wfrun controller run --once`: a child wakes its parent before it stops
        # counting as busy, so stop after a pass that followed "not busy" found nothing.
        was_busy = children is not None and children.busy
        ran = manager.run_until_idle()
        passes += ran
        if (not was_busy and not ran) or time.monotonic() > deadline:
            break
        if not ran:
            time.sleep(0.05)
    print(f"passes {passes}")
    if children is not None:
        children.shutdown(grace=5)
    store.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
