"""One racing process for the launch concurrency test.

    python launch_racer.py PROJECT ROLE IDS_FILE OUT_FILE SEED DEADLINE

Opens its own `SqliteStore` and `LaunchCoordinator` on PROJECT's store and races
the others until every launch in IDS_FILE has ended (or the monotonic DEADLINE
passes). ROLE is `activate` (claim_next -> activate -> run, like a host),
`cancel` (cancel random ids) or `mixed` (both, at random). Every claim it wins
and every cancel that lands is appended to OUT_FILE as a JSON line, so the test
can tell which runner did what.
"""

from __future__ import annotations

import json
import os
import random
import sys
import time
from pathlib import Path
from typing import Any

from runner.compiler import build_catalog
from runner.errors import ConflictError, NotFoundError
from runner.host.runtime._local import Workspace
from runner.launch import EngineOptions
from runner.store import SqliteStore, StoreError
from runner.testing import build_coordinator

OPEN = ["queued", "starting", "running", "parked"]


def main(argv: list[str]) -> int:
    project, role, ids_file, out_file = Path(argv[0]), argv[1], Path(argv[2]), Path(argv[3])
    rng = random.Random(int(argv[4]))
    deadline = float(argv[5])
    ids = ids_file.read_text().split()
    runner = f"racer-{role}-{os.getpid()}"
    ws = Workspace(build_catalog("workflows", project, None), project, project / ".wfrun")
    store = SqliteStore(project / ".wfrun" / "state" / "store.sqlite3")
    coordinator = build_coordinator(ws, store, "plain", runner=runner,
                                    options=EngineOptions(project_root=project))
    out = out_file.open("a", encoding="utf-8")

    def log(**fields: Any) -> None:
        out.write(json.dumps({"runner": runner, **fields}) + "\n")
        out.flush()

    def activate_one() -> bool:
        record = coordinator.claim_next(None)
        if record is None:
            return False
        log(event="claimed", run_id=record.run_id, status=record.status, epoch=record.epoch)
        outcome = coordinator.execute(
            record, on_start=lambda _act: log(event="activating", run_id=record.run_id))
        if outcome is None:
            log(event="not_activated", run_id=record.run_id)
            return True
        log(event="activated", run_id=record.run_id)
        log(event="ran", run_id=record.run_id, status=outcome.status)
        return True

    def cancel_one() -> None:
        run_id = rng.choice(ids)
        try:
            record = coordinator.cancel(run_id)
        except (ConflictError, NotFoundError):
            return
        log(event="cancel", run_id=run_id, status=record.status)

    idle_checks = 0
    while time.monotonic() < deadline:
        act = role == "activate" or (role == "mixed" and rng.random() < 0.5)
        try:
            if act:
                if activate_one():
                    continue
            else:
                cancel_one()
                time.sleep(rng.uniform(0, 0.004))
                idle_checks += 1
                if idle_checks % 20:
                    continue
            if not store.launches.query(statuses=OPEN, limit=1):
                break
            if act:
                time.sleep(0.005)
        except StoreError as exc:  # a busy store: back off and race on
            log(event="store_error", message=exc.message)
            time.sleep(0.01)
    out.close()
    store.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
