"""The crash matrix (seed 000, tests 9 and 14): a real session process is SIGKILLed at
each named point of a launch, then restarted on the same store and session log.

Points: after the queued commit before the tool reply; after the claim; during
`starting` (bundle created, launch not yet running); before the executor is
released (running, no node started); after the failure follow-up is appended to
the session but before its turn intent is resolved.

After the restart nothing is lost (every launch ends, the run completes), nothing
is activated twice (one bundle and one `run_started` per run, each shell side
effect once), and every turn intent has at most one follow-up in the session log.
A second restart changes nothing. Every point runs on both backends (`store_url`:
the SQLite file, or a Postgres schema with the run bundles as rows).
"""

from __future__ import annotations

import signal
from collections import Counter
from pathlib import Path

import pytest
from launch_it_kit import STEADY, TERMINAL, Project, event_counts

from runner.launch._intents import AGENT_STEP_TYPE, DEFERRED_TURN_TYPE, NOTIFICATION_TYPE

START = "please start steady"
BREAK = "please start steady and break it"
# Restarts move the store clock past every lease the killed process held.
RESTART_OFFSET = 120.0

# point -> (launch status after the kill, does a bundle exist yet), with the bundle in a
# folder. A database bundle's first write commits with the launch's `running` and the
# first node's start (launch/_activator.py RunLink): until `after_running` there is nothing.
ACTIVATION_POINTS = {
    "after_queued_commit": ("queued", False),
    "after_claim": ("starting", False),
    "during_starting": ("starting", True),
    "before_executor_release": ("running", True),
    "after_running": ("running", True),
}
IN_DATABASE = {"during_starting": ("starting", False),
               "before_executor_release": ("starting", False)}


@pytest.fixture
def project(tmp_path: Path, store_url: str | None) -> Project:
    proj = Project(tmp_path / "proj", store_url)
    proj.write_workflow("steady", STEADY)
    return proj


def killed(proc: object) -> bool:
    return getattr(proc, "returncode", None) == -signal.SIGKILL


def assert_consistent(project: Project, interrupted: str | None = None) -> None:
    """The invariants every point must leave behind after a restart. `interrupted`: the
    node whose start the kill had recorded (it never ran), so it was started twice."""
    launches = project.launches()
    assert launches, "the launch was lost"
    assert all(r.status in TERMINAL for r in launches), [(r.run_id, r.status) for r in launches]
    effects = project.effects()
    for record in launches:
        assert record.input_json is None  # private input is gone once it ended
        if record.status == "done":
            manifest = project.manifest(record.run_id)
            assert manifest is not None
            assert manifest["status"] == "completed"
            counts = event_counts(project.trace(record.run_id))
            assert counts[("run_started", None)] == 1
            assert counts[("node_started", "before")] == 1 + (interrupted == "before")
            assert counts[("node_started", "after")] == 1
            assert effects[("before", record.run_id)] == 1
            assert effects[("after", record.run_id)] == 1
        else:
            assert project.manifest(record.run_id) is None
            assert not [k for k in effects if k[1] == record.run_id]
    assert set(project.bundles()) == {r.run_id for r in launches if r.status == "done"}
    if project.store_url is not None:  # the bundles are rows (only live logs are files)
        assert not [p for p in project.runs_dir.rglob("*")
                    if p.name in ("trace.jsonl", "manifest.json")]
    # At most one follow-up per turn intent, and every intent resolved exactly once.
    follow_ups = Counter(e["details"]["turnIntentId"] for e in project.custom(DEFERRED_TURN_TYPE))
    assert all(n == 1 for n in follow_ups.values()), follow_ups
    for intent in project.intents():
        assert intent["resolved_at"] is not None, intent["intent_id"]
        assert follow_ups[intent["intent_id"]] == 1
    steps = Counter((e["details"]["runId"], e["details"]["step"], e["details"]["attempt"])
                    for e in project.custom(AGENT_STEP_TYPE))
    assert all(n == 1 for n in steps.values()), steps
    notes = Counter(e["details"]["notificationId"] for e in project.custom(NOTIFICATION_TYPE))
    assert all(n == 1 for n in notes.values()), notes


def restart_twice(project: Project, interrupted: str | None = None) -> None:
    """Restart, check the invariants; a second restart must change nothing."""
    proc = project.drive("none", offset=RESTART_OFFSET)
    assert proc.returncode == 0, proc.stderr
    assert_consistent(project, interrupted)
    log_before = project.session_log.read_bytes()
    launches_before = [(r.run_id, r.status, r.epoch) for r in project.launches()]
    proc = project.drive("none", offset=2 * RESTART_OFFSET)
    assert proc.returncode == 0, proc.stderr
    assert project.session_log.read_bytes() == log_before
    assert [(r.run_id, r.status, r.epoch) for r in project.launches()] == launches_before


@pytest.mark.slow
@pytest.mark.parametrize("point", sorted(ACTIVATION_POINTS))
def test_crash_during_activation_loses_and_duplicates_nothing(project: Project,
                                                              point: str) -> None:
    proc = project.drive(point, prompt=START)
    assert killed(proc), (proc.returncode, proc.stderr)
    # Where the kill left the launch.
    status, has_bundle = ACTIVATION_POINTS[point]
    if project.store_url is not None:
        status, has_bundle = IN_DATABASE.get(point, (status, has_bundle))
    [record] = project.launches()
    assert record.status == status
    assert project.manifest(record.run_id) is not None if has_bundle else \
        project.bundles() == []
    assert not project.effects(), "a node ran before the executor was released"
    started = [n for t, n in event_counts(project.trace(record.run_id)) if t == "node_started"]
    # Only a database bundle's first write carries a node's start (that node never ran).
    interrupted = "before" if project.store_url and point == "after_running" else None
    assert started == ([] if interrupted is None else [interrupted])
    replies = [e for e in project.session_entries() if e.get("role") == "toolResult"]
    if point == "after_queued_commit":
        assert replies == []  # the model never saw the run id
        assert record.input_json is not None  # activation still needs the private input
    else:
        assert replies[0]["details"]["runId"] == record.run_id

    restart_twice(project, interrupted)
    [after] = project.launches()
    assert after.run_id == record.run_id
    assert after.status == "done"
    assert project.custom(DEFERRED_TURN_TYPE) == []


@pytest.mark.slow
def test_crash_after_session_append_sends_one_follow_up(project: Project) -> None:
    proc = project.drive("after_session_append", prompt=BREAK)
    assert killed(proc), (proc.returncode, proc.stderr)
    [failed] = project.launches()
    assert (failed.status, failed.error_code) == ("failed", "source_changed")
    [message] = project.custom(DEFERRED_TURN_TYPE)
    assert message["content"].startswith(f"Workflow steady failed to start (run "
                                         f"{failed.run_id}): the workflow source changed")
    assert "call workflow start again only after you correct the cause" in message["content"]
    [intent] = project.intents()
    assert intent["intent_id"] == message["details"]["turnIntentId"]
    assert intent["resolved_at"] is None  # killed between the append and the resolution

    restart_twice(project)
    first, retry = project.launches()
    assert first.run_id == failed.run_id
    assert first.status == "failed"
    # The model read the follow-up and started again; the corrected run completed.
    assert retry.status == "done"
    assert len(project.custom(DEFERRED_TURN_TYPE)) == 1
    [intent] = project.intents()
    assert intent["resolution"] == "fallback"


@pytest.mark.slow
def test_clean_run_matches_the_crashed_ones(project: Project) -> None:
    """The control case: no crash, same evidence (so the checks above can tell)."""
    proc = project.drive("none", prompt=START)
    assert proc.returncode == 0, proc.stderr
    assert_consistent(project)
    [record] = project.launches()
    assert record.status == "done"
    assert project.effects() == Counter({("before", record.run_id): 1,
                                         ("after", record.run_id): 1})
