"""Seed 000 test 17: status for every launch and run state, by tool and by `wfrun status`.

Each state is produced the way it happens, in its own session of one project (one
store): the host's listener is driven by hand where a turn must stay unfinished.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from harness import Scripted, Session, make_session, wfrun
from statekit import WORKFLOWS, build_states

pytestmark = pytest.mark.timeout(30)


def test_seed17_status_for_every_launch_and_run_state(tmp_path: Path,
                                                      store_url: str | None) -> None:
    made: list[Session] = []
    try:
        expected = build_states(tmp_path, made, store_url)
        observer = made[0]
        with_bundle = {r for r in expected if observer.has_bundle(r)}
        assert len(with_bundle) == 7  # all but queued, starting, and the two that never ran
        launch_states = {launch for launch, _ in expected.values()}
        assert launch_states == {"queued", "starting", "running", "parked", "done", "failed",
                                 "cancelled"}
        run_states = {status for _, status in expected.values()}
        assert {"running", "waiting", "completed", "failed", "timed_out",
                "cancelled"} <= run_states
        for run_id, (launch, status) in expected.items():
            reply = observer.controller.on_tool_call("c", "workflow",
                                                     {"action": "status", "runId": run_id})
            assert not reply.is_error
            assert reply.content.split(" (")[0] == f"Run {run_id}: {status}", reply.content
            assert reply.details["status"] == status
            assert reply.details["launch"]["status"] == launch
            out = wfrun(observer.root, "status", "--json", run_id)
            assert out.code == 0, out
            view = json.loads(out.stdout)
            assert (view["run_id"], view["status"], view["launch"]["status"]) == (
                run_id, status, launch)
            if run_id in with_bundle:
                assert view["run"]["run_id"] == run_id
            else:  # status works from the launch row alone
                assert view["run"] is None
            if launch == "failed":
                code = {"failed": "source_changed", "timed_out": "run_timed_out"}.get(
                    status, "run_failed")
                if status == "failed" and view["run"] is not None:
                    code = "run_failed"  # it started, then a node failed
                assert view["error"]["code"] == code
                assert reply.content.endswith(f"({code}: {view['error']['message']})")
            else:
                assert view["error"] is None
        # Without a run id: the session's own reservation, else the run it displayed
        # last (seed 000, issue 34.17), and a plain "nothing" in a session without runs.
        by_session = {s.session_id: s for s in made}
        queued_run = next(r for r, (la, _) in expected.items() if la == "queued")
        mine = by_session["s-queued"].controller.on_tool_call("c", "workflow",
                                                              {"action": "status"})
        assert mine.content == f"Run {queued_run}: queued"
        shown = by_session["s-completed"].controller.on_tool_call("c", "workflow",
                                                                  {"action": "status"})
        assert shown.content.endswith(": completed"), shown.content
        assert expected[shown.details["runId"]] == ("done", "completed")
        fresh = make_session(tmp_path / "fresh", Scripted(), WORKFLOWS, session_id="s-none",
                             store_url=store_url)
        made.append(fresh)
        none = fresh.controller.on_tool_call("c", "workflow", {"action": "status"})
        assert none.content == "no workflow is queued or running in this session"
        # `wfrun status` lists what is not finished, before any bundle exists.
        listing = json.loads(wfrun(observer.root, "status", "--json").stdout)["launches"]
        assert {row["launch"]["status"] for row in listing} == {"queued", "starting",
                                                                 "running", "parked"}
        unknown = wfrun(observer.root, "status", "nope-20260101T000000Z-00000000")
        assert unknown.code == 3
        assert "no launch or run" in unknown.stderr
    finally:
        for s in made:
            s.close()
