"""Four processes race to claim, activate and cancel 500 launches on one store file."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from storekit import launch

from runner.store import SqliteStore

WORKERS = 4
TOTAL = 500
WORKER = Path(__file__).with_name("race_worker.py")


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_processes_never_double_claim_and_every_launch_ends_once(tmp_path: Path) -> None:
    path = tmp_path / ".wfrun" / "state" / "store.sqlite3"
    with SqliteStore(path) as store:
        for i in range(TOTAL):
            store.launches.enqueue(launch(f"run-{i:04}"))
    outs = [tmp_path / f"worker-{n}.json" for n in range(WORKERS)]
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                str(WORKER),
                str(path),
                f"worker-{n}",
                str(n),
                str(TOTAL),
                str(outs[n]),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        for n in range(WORKERS)
    ]
    for proc in procs:
        _, err = proc.communicate(timeout=100)
        assert proc.returncode == 0, err.decode()
    logs = [json.loads(out.read_text()) for out in outs]

    claims = [tuple(c) for log in logs for c in log["claims"]]
    claimed_runs = Counter(run_id for run_id, _, _ in claims)
    assert max(claimed_runs.values()) == 1, "a launch was claimed twice"
    assert len({token for _, token, _ in claims}) == len(claims)
    assert all(epoch == 1 for _, _, epoch in claims)

    done = [r for log in logs for r in log["done"]]
    cancelled = [r for log in logs for r in log["cancelled"]]
    running = [r for log in logs for r in log["running"]]
    lost = [tuple(x) for log in logs for x in log["activation_lost"]]
    assert len(done) == len(set(done))
    assert len(cancelled) == len(set(cancelled))
    assert sorted(running) == sorted(done), "an activated launch did not finish"
    # A claimed launch's live lease refuses a token-less cancel (its holder is asked
    # instead, ADR 0009 lever 3): no activation is overruled, and the cancels that
    # landed took queued launches before any claim.
    assert lost == []
    refused = [tuple(x) for log in logs for x in log["refused"]]
    assert any(reason == "lease_active" and status == "starting"
               for _, reason, status in refused)
    assert all(status != "queued" for _, _, status in refused)
    assert not set(cancelled) & {run_id for run_id, _, _ in claims}
    assert done
    assert cancelled

    with SqliteStore(path) as store:
        final = {r.run_id: r for r in store.launches.query(limit=TOTAL + 1)}
        events = store.run_events.read(limit=20 * TOTAL)
    assert len(final) == TOTAL
    assert {r.status for r in final.values()} <= {"done", "cancelled"}
    assert {r for r, rec in final.items() if rec.status == "done"} == set(done)
    assert {r for r, rec in final.items() if rec.status == "cancelled"} == set(cancelled)
    terminal = Counter(e.run_id for e in events if e.type in ("launch.done", "launch.cancelled"))
    assert set(terminal) == set(final)
    assert set(terminal.values()) == {1}
    assert all(rec.input_cleared for rec in final.values())
