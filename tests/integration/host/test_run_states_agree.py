"""Issue 34: one run-state vocabulary. For every state a run can be in, `wfrun runs`,
`status`, `show`, `why`, the HTTP API (`/api/runs`, `/api/runs/RUN`) and the web view
(the run page's badge, the runs page's counts) call the run by the same name, because
they all read it from `run_state`.

The states are made the way they happen (statekit), in one project; the web view is a
real `wfrun ui` on a free loopback port.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
from harness import Session, wfrun
from statekit import build_states
from waiting import wait_for_line

pytestmark = pytest.mark.timeout(180)  # a dozen sessions, a `wfrun ui`, ~40 CLI calls

#: What `why` says first for a run in each state (never "finished" unless it completed).
WHY = {
    "queued": r"^queued ",
    "starting": r"^starting on runner ",
    "running": r"^running on runner ",
    "parked": r"^parked ",
    "waiting": r"^waiting for an answer at ask: `wfrun answer ",
    "completed": r"^finished: completed$",
    "failed": r"^failed: \w+: ",
    "timed_out": r"^timed out: run_timed_out: ",
    "cancelled": r"^cancelled$",
}
#: The web view's count chip each state is counted under.
CHIP = {"timed_out": "failed"}


@contextmanager
def ui_server(root: Path) -> Iterator[str]:
    proc = subprocess.Popen([sys.executable, "-m", "runner", "--project", str(root), "ui"],
                            cwd=root, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=dict(os.environ))
    try:
        assert proc.stdout is not None
        line = wait_for_line(proc.stdout, r"^wfrun ui: http://")
        found = re.search(r"(http://\S+)", line)
        assert found is not None
        yield found[1].split("?", 1)[0].rstrip("/")
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()


def test_every_surface_names_every_state_alike(tmp_path: Path,
                                               store_url: str | None) -> None:
    made: list[Session] = []
    try:
        expected = {run: state for run, (_launch, state) in
                    build_states(tmp_path, made, store_url).items()}
        assert set(expected.values()) == set(WHY)  # every state is in the table
        root = made[0].root

        listed = {row["run_id"]: row["status"]
                  for row in json.loads(wfrun(root, "runs", "--json").stdout)["runs"]}
        with ui_server(root) as base:
            api_rows = httpx.get(f"{base}/api/runs?per_page=500").json()
            api_list = {row["run_id"]: row["status"] for row in api_rows["rows"]}
            for run_id, state in expected.items():
                named = {"runs": listed.get(run_id)}
                named["status"] = json.loads(
                    wfrun(root, "status", "--json", run_id).stdout)["status"]
                named["show"] = json.loads(wfrun(root, "show", "--json", run_id).stdout)["status"]
                why = json.loads(wfrun(root, "why", "--json", run_id).stdout)
                named["why"] = why["status"]
                named["api list"] = api_list.get(run_id)
                run = httpx.get(f"{base}/api/runs/{run_id}").json()
                named["api run"] = run["status"]
                if "live" in run:  # a bundle exists: the live part names it too
                    named["api live"] = run["live"]["status"]
                page = httpx.get(f"{base}/runs/{run_id}").text
                badge = re.search(r'id="run-status" data-status="([^"]+)"', page)
                named["page badge"] = badge[1] if badge else None
                assert set(named.values()) == {state}, (run_id, named)
                assert re.search(WHY[state], why["reasons"][0]), (state, why["reasons"])
                if state != "completed":
                    assert not any("finished" in r for r in why["reasons"]), why["reasons"]
            # The runs page's counts: each run under its own state's chip; a waiting run
            # is never counted as done (there is no done chip at all).
            chips = Counter(CHIP.get(s, s) for s in expected.values())
            assert api_rows["counts"] == {s: chips.get(s, 0) for s in api_rows["counts"]}
            assert "done" not in api_rows["counts"]
            html = httpx.get(f"{base}/runs").text
            for state, n in chips.items():
                assert re.search(rf'data-status="{state}">{state} <b>{n}</b>', html), state
        # `runs --status S` pages exactly the runs in S, queued and parked ones included.
        for state in set(expected.values()):
            rows = json.loads(wfrun(root, "runs", "--json", "--status", state).stdout)["runs"]
            assert sorted(r["run_id"] for r in rows) == sorted(
                r for r, s in expected.items() if s == state), state
    finally:
        for s in made:
            s.close()
