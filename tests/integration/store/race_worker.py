"""One process of the multi-process claim/cancel race (run by test_store_race.py).

    python race_worker.py STORE_PATH WORKER_NAME SEED TOTAL OUT_JSON

Claims launches until none is queued, activating and finishing each one; in
between it cancels launches that other workers are activating (`starting`, whose
live lease refuses a token-less cancel: only the holder may end them) or are about
to claim, so cancellation races claiming and activation. Everything it
observed goes to OUT_JSON for the test to cross-check against the store.
"""

from __future__ import annotations

import json
import random
import sys
import time
from pathlib import Path

from runner.store import LaunchRecord, SqliteStore


def main(path: str, name: str, seed: int, total: int, out: str) -> None:
    rng = random.Random(seed)
    log: dict[str, list[object]] = {
        "claims": [],
        "running": [],
        "done": [],
        "cancelled": [],
        "activation_lost": [],
        "refused": [],  # token-less cancels refused: [run_id, reason, status]
    }
    frontier = 0
    with SqliteStore(path) as store:
        while True:
            roll = rng.random()
            target = None
            if roll < 0.25:  # a launch another worker is activating right now
                starting = store.launches.query(statuses=["starting"], limit=4)
                target = rng.choice(starting).run_id if starting else None
            elif roll < 0.45:  # a queued launch just ahead of the claim frontier
                target = f"run-{min(total - 1, max(0, frontier + rng.randint(-2, 4))):04}"
            if target is not None:
                result = store.launches.cancel(target)
                if isinstance(result, LaunchRecord):
                    log["cancelled"].append(target)
                else:
                    log["refused"].append([target, result.reason, result.status])
            claimed = store.launches.claim_next(runner_id=name, lease_seconds=600)
            if claimed is None:
                if not store.launches.query(statuses=["queued"], limit=1):
                    break
                continue
            token = claimed.claim_token or ""
            frontier = int(claimed.run_id.split("-")[1])
            log["claims"].append([claimed.run_id, token, claimed.epoch])
            time.sleep(rng.random() * 0.003)  # activation work: source check, engine build
            running = store.launches.mark_running(claimed.run_id, token)
            if not isinstance(running, LaunchRecord):
                log["activation_lost"].append([claimed.run_id, running.reason, running.status])
                continue
            log["running"].append(claimed.run_id)
            time.sleep(rng.random() * 0.002)  # the run itself
            done = store.launches.finish(claimed.run_id, token)
            if isinstance(done, LaunchRecord):
                log["done"].append(claimed.run_id)
    Path(out).write_text(json.dumps(log))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5])
