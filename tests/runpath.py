"""One warm queued run of the 3-node chain, traced (issue 36's path tests): the `runner`
functions it enters, as (module, qualified name).

Queued, claimed and run the way `wfrun start` and a host do it (`prepare`, `claim_next`,
`execute` on the coordinator `detached_coordinator` builds), in a settled project (as a
host's is), after a first run that warms every cache; traced with `sys.setprofile` on
every thread. `bench/bench_path.py --list` prints the same path whole.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

import runner
from runner.host.runtime._launches import detached_coordinator
from runner.launch import LaunchCoordinator
from runner.testing import sqlite_store, workspace

CHAIN3 = (Path(__file__).resolve().parents[1] / "fixtures" / "workflows"
          / "chain3.yaml").read_text()
RUNNER = str(Path(runner.__file__).resolve().parent) + "/"


def module_of(filename: str) -> str | None:
    """`runner.x.y` for a file under runner/, else None."""
    if not filename.startswith(RUNNER):
        return None
    return "runner." + filename[len(RUNNER):].removesuffix(".py").replace("/", ".")


def settled(root: Path) -> None:
    """A project whose folders have existed a while, as a host's have: a folder that
    changed within a second of a catalog's scan makes each compile re-scan them."""
    dot = root / ".wfrun"
    for sub in ("workflows", "state", "runs"):
        (dot / sub).mkdir(parents=True, exist_ok=True)
    then = time.time() - 10
    for path in (dot / "workflows", dot / "state", dot / "runs", dot, root):
        os.utime(path, (then, then))


def trace_plain_run(root: Path, inspect: Callable[[LaunchCoordinator], None] | None = None,
                    ) -> set[tuple[str, str]]:
    """(module, function) of every `runner` function the second of two queued runs of
    the chain enters; `inspect` sees the coordinator first."""
    workspace(root, workflows={"chain3": CHAIN3})
    settled(root)
    ws = workspace(root)  # its catalog scanned after the folders settled
    seen: set[tuple[str, str]] = set()

    def profile(frame: FrameType, event: str, _arg: Any) -> None:
        if event == "call":
            name = module_of(frame.f_code.co_filename)
            if name is not None:
                seen.add((name, frame.f_code.co_qualname))

    with sqlite_store(ws) as store:
        coordinator = detached_coordinator(ws, store)
        if inspect is not None:
            inspect(coordinator)

        def run() -> None:
            coordinator.prepare("chain3", {})
            record = coordinator.claim_next(None)
            assert record is not None
            outcome = coordinator.execute(record)
            assert outcome is not None
            assert outcome.status == "completed"
            assert outcome.final_output == 3

        run()  # warm: the compiled definition, the templates, lazy imports
        threading.setprofile(profile)
        sys.setprofile(profile)
        try:
            run()
        finally:
            sys.setprofile(None)
            threading.setprofile(None)  # type: ignore[arg-type]
    return seen
