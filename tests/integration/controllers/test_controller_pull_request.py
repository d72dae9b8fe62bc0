"""The pull-request acceptance controller against a fake GitHub server (seed 004, DESIGN §7).

Every test runs the real controller (controllers/pull-request.yaml), a real SQLite
store and real child workflow runs; only GitHub is fake (tests/fakes/github_server.py).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from ctlkit import HEAD, OTHER_HEAD, REPO_NAME, Harness, pr_spec
from fakes.github_server import HEAD_MODIFIED, FakeGitHub

CTL = "pull-request"
TOKEN = "ghp_s3cr3t-token-for-the-fake-server-0123456789"


def pull_path(n: int = 7) -> str:
    return f"/repos/{REPO_NAME}/pulls/{n}"


def test_pull_request_scenario_ten_enqueues_one_pass_one_merge_and_no_token_anywhere(
        harness: Harness, github: FakeGitHub, project: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """pi-workflows §6: duplicate wake-ups collapse; the merge happens once; the token
    reaches GitHub and nothing else (store file, WAL, child input, run bundles)."""
    monkeypatch.setenv("WFRUN_GITHUB_TOKEN", TOKEN)
    github.add_pull(REPO_NAME, 7, HEAD, checks="failure")
    m = harness.manager()
    m.apply(CTL, "pr7", pr_spec(github.url, repair_workflow="pr-repair-compute",
                                merge_approved=True))
    for _ in range(10):
        m.enqueue(CTL, "pr7")
    assert len(harness.store.reconcile_queue.list()) == 1

    # checks fail: one repair child, whatever the number of passes while it runs
    harness.drain(m, lambda: harness.ready(CTL, "pr7") is not None
                  and harness.ready(CTL, "pr7")["reason"] == "ChecksPending")
    for _ in range(10):
        m.enqueue(CTL, "pr7")
    m.run_until_idle()
    requests = harness.store.workflow_requests.list(harness.resource(CTL, "pr7").uid)
    assert [(r.request_key, r.state, r.attempt) for r in requests] == [
        (f"repair:1:{HEAD}", "succeeded", 1)]
    assert len(harness.run_ids()) == 1
    assert github.merges() == []

    # checks turn green: ten wake-ups, one pass, one merge
    github.set_checks(HEAD, "success")
    github.clear()
    before = m.passes
    for _ in range(10):
        m.enqueue(CTL, "pr7")
    assert m.run_until_idle() == 1
    assert m.passes - before == 1
    assert len(github.merges()) == 1
    assert github.merges()[0].body == {"sha": HEAD}
    ready = harness.ready(CTL, "pr7")
    assert ready is not None
    assert (ready["status"], ready["reason"]) == ("True", "Merged")
    assert harness.resource(CTL, "pr7").status["controller_status"]["phase"] == "merged"
    assert harness.store.reconcile_queue.list() == []

    # the token went to GitHub on every request ...
    assert github.requests
    assert all(r.headers.get("Authorization") == f"Bearer {TOKEN}" for r in github.requests)
    # ... and nowhere else
    harness.store.close()
    harness.store = harness._open()
    state_dir = project / ".wfrun" / "state"
    for path in [*state_dir.iterdir(), *(project / ".wfrun" / "runs").rglob("*")]:
        if path.is_file():
            assert TOKEN.encode() not in path.read_bytes(), path
    child_input = (project / ".wfrun" / "runs" / harness.run_ids()[0])
    assert any(child_input.rglob("*")), "the child run left a bundle"


def test_changed_head_blocks_the_merge_and_the_repair(harness: Harness,
                                                      github: FakeGitHub) -> None:
    github.add_pull(REPO_NAME, 7, OTHER_HEAD, checks="failure")
    m = harness.manager()
    m.apply(CTL, "pr7", pr_spec(github.url, repair_workflow="pr-repair-compute",
                                merge_approved=True))
    assert m.run_until_idle() == 1
    ready = harness.ready(CTL, "pr7")
    assert ready is not None
    assert (ready["status"], ready["reason"]) == ("False", "HeadChanged")
    assert github.merges() == []
    assert harness.store.workflow_requests.list() == []
    assert harness.run_ids() == []
    status = harness.resource(CTL, "pr7").status["controller_status"]
    assert status["observed_head_sha"] == OTHER_HEAD
    assert status["phase"] == "blocked"


def test_head_moving_between_read_and_merge_is_refused_by_the_sha_precondition(
        harness: Harness, github: FakeGitHub) -> None:
    """The merge PUT carries the expected sha: a push that lands after the controller
    read the pull request makes GitHub answer 409, and nothing is merged."""
    github.add_pull(REPO_NAME, 7, HEAD, checks="success")

    def push_on_status_read(method: str, path: str) -> None:
        if path.endswith("/status"):
            github.pull(REPO_NAME, 7).head_sha = OTHER_HEAD

    github.on_request = push_on_status_read
    m = harness.manager()
    m.apply(CTL, "pr7", pr_spec(github.url, merge_approved=True))
    m.run_until_idle()
    assert len(github.merges()) == 1  # tried once, with the old sha
    assert not github.pull(REPO_NAME, 7).merged
    ready = harness.ready(CTL, "pr7")
    assert ready is not None
    assert (ready["status"], ready["reason"]) == ("False", "MergeRejected")
    assert HEAD_MODIFIED in ready["message"]
    effect = harness.store.effects.list(harness.resource(CTL, "pr7").uid)
    assert [(e.effect_key, e.state) for e in effect] == [(f"merge:1:{HEAD}", "rejected")]
    # the next pass sees the new head and stops there
    github.on_request = None
    m.enqueue(CTL, "pr7")
    m.run_until_idle()
    ready = harness.ready(CTL, "pr7")
    assert ready is not None
    assert ready["reason"] == "HeadChanged"
    assert len(github.merges()) == 1


def _repair_then(harness: Harness, github: FakeGitHub, **spec: object) -> None:
    """Fail the checks, let the repair child (whose output says "merge now") finish."""
    m = harness.manager()
    m.apply(CTL, "pr7", pr_spec(github.url, repair_workflow="pr-repair", **spec))
    harness.drain(m, lambda: any(r.state == "succeeded"
                                 for r in harness.store.workflow_requests.list()))
    harness.drain(m, lambda: harness.store.reconcile_queue.get(CTL, "pr7") is None
                  or harness.store.reconcile_queue.get(CTL, "pr7").available_at
                  > harness.store.now_ms())


@pytest.mark.parametrize(("approved", "checks_after", "head_after", "reason"), [
    (False, "success", HEAD, "ApprovalRequired"),  # green and on the head, not approved
    (True, "failure", HEAD, "ChecksPending"),  # approved, checks still red
    (True, "success", OTHER_HEAD, "HeadChanged"),  # approved, green, but another head
], ids=["not-approved", "checks-still-red", "head-moved"])
def test_agent_output_saying_merge_now_does_not_authorize_a_merge(
        harness: Harness, github: FakeGitHub, approved: bool, checks_after: str,
        head_after: str, reason: str) -> None:
    github.add_pull(REPO_NAME, 7, HEAD, checks="failure")
    _repair_then(harness, github, merge_approved=approved)
    req = harness.store.workflow_requests.list()
    assert [(r.state, r.attempt) for r in req] == [("succeeded", 1)]
    output = harness.managers[0].children.reader.final_output(req[0].run_id)  # type: ignore[union-attr,arg-type]
    assert output["decision"] == "merge now"
    assert output["merge_approved"] is True
    # the world after the repair
    github.set_checks(HEAD, checks_after)
    github.set_head(REPO_NAME, 7, head_after)
    m = harness.manager()
    for _ in range(3):
        m.enqueue(CTL, "pr7")
        m.run_until_idle()
        harness.clock.advance(31)
    assert github.merges() == []
    assert not github.pull(REPO_NAME, 7).merged
    ready = harness.ready(CTL, "pr7")
    assert ready is not None
    assert (ready["status"], ready["reason"]) == ("False", reason)
    # the finished repair request is reused, never re-run
    assert [(r.state, r.attempt) for r in harness.store.workflow_requests.list()] == [
        ("succeeded", 1)]


def test_merge_happens_once_all_deterministic_checks_pass(harness: Harness,
                                                         github: FakeGitHub) -> None:
    """The positive control for the test above: approval + green + expected head."""
    github.add_pull(REPO_NAME, 7, HEAD, checks="failure")
    _repair_then(harness, github, merge_approved=True)
    github.set_checks(HEAD, "success")
    m = harness.manager()
    harness.drain(m, lambda: (harness.ready(CTL, "pr7") or {}).get("reason") == "Merged",
                  step=31)
    assert len(github.merges()) == 1


def test_failed_repair_child_reports_repair_failed_once(harness: Harness,
                                                        github: FakeGitHub) -> None:
    github.add_pull(REPO_NAME, 7, HEAD, checks="failure")
    m = harness.manager()
    m.apply(CTL, "pr7", pr_spec(github.url, repair_workflow="pr-repair-fails",
                                merge_approved=True))
    harness.drain(m, lambda: (harness.ready(CTL, "pr7") or {}).get("reason") == "RepairFailed")
    for _ in range(5):
        m.enqueue(CTL, "pr7")
        m.run_until_idle()
    requests = harness.store.workflow_requests.list()
    assert [(r.request_key, r.state, r.attempt) for r in requests] == [
        (f"repair:1:{HEAD}", "failed", 1)]
    assert len(harness.run_ids()) == 1
    status = harness.resource(CTL, "pr7").status
    assert status["workflow_run"]["state"] == "failed"
    assert status["controller_status"]["phase"] == "blocked"
    assert github.merges() == []


def test_pending_checks_requeue_after_thirty_seconds(harness: Harness,
                                                     github: FakeGitHub) -> None:
    github.add_pull(REPO_NAME, 7, HEAD, checks="pending")
    m = harness.manager()
    m.apply(CTL, "pr7", pr_spec(github.url, merge_approved=True))
    assert m.run_until_idle() == 1
    ready = harness.ready(CTL, "pr7")
    assert ready is not None
    assert (ready["status"], ready["reason"]) == ("False", "ChecksPending")
    row = harness.store.reconcile_queue.get(CTL, "pr7")
    assert row is not None
    assert row.claim_token is None
    assert row.available_at == harness.store.now_ms() + 30_000
    harness.clock.advance(29)
    assert m.run_until_idle() == 0
    github.set_checks(HEAD, "success")
    harness.clock.advance(1)
    assert m.run_until_idle() == 1
    assert (harness.ready(CTL, "pr7") or {}).get("reason") == "Merged"
    assert len(github.merges()) == 1


def test_unmergeable_pull_request_is_blocked_without_a_merge_call(harness: Harness,
                                                                  github: FakeGitHub) -> None:
    github.add_pull(REPO_NAME, 7, HEAD, checks="success", mergeable=False)
    m = harness.manager()
    m.apply(CTL, "pr7", pr_spec(github.url, merge_approved=True))
    m.run_until_idle()
    assert (harness.ready(CTL, "pr7") or {}).get("reason") == "NotMergeable"
    assert github.merges() == []


def test_lost_merge_answer_is_observed_before_any_retry(harness: Harness,
                                                        github: FakeGitHub) -> None:
    """The provider merges but the answer is a 500: the effect is indeterminate, and
    the next pass reads the pull request (merged) instead of merging again."""
    github.add_pull(REPO_NAME, 7, HEAD, checks="success")
    github.merge_fault = "apply_then_500"
    m = harness.manager()
    m.apply(CTL, "pr7", pr_spec(github.url, merge_approved=True))
    m.run_until_idle()
    ready = harness.ready(CTL, "pr7")
    assert ready is not None
    assert (ready["status"], ready["reason"]) == ("Unknown", "MergeIndeterminate")
    uid = harness.resource(CTL, "pr7").uid
    assert harness.store.effects.get(uid, f"merge:1:{HEAD}").state == "indeterminate"
    github.clear()
    harness.clock.advance(10)
    assert m.run_until_idle() == 1
    assert github.merges() == []
    assert [r.method for r in github.requests][:1] == ["GET"]
    assert (harness.ready(CTL, "pr7") or {}).get("reason") == "Merged"


def test_failed_merge_answer_is_observed_then_retried_once(harness: Harness,
                                                           github: FakeGitHub) -> None:
    """A 500 that did not merge: the next pass observes (GET, not merged) and only then
    sends the merge again, under the same effect key."""
    github.add_pull(REPO_NAME, 7, HEAD, checks="success")
    github.merge_fault = "500"
    m = harness.manager()
    m.apply(CTL, "pr7", pr_spec(github.url, merge_approved=True))
    m.run_until_idle()
    assert len(github.merges()) == 1
    github.merge_fault = None
    github.clear()
    harness.clock.advance(10)
    m.run_until_idle()
    seq = [(r.method, r.path) for r in github.requests]
    put = seq.index(("PUT", pull_path() + "/merge"))
    assert ("GET", pull_path()) in seq[:put]
    # the effect driver's own observation sits right before the PUT
    assert seq[put - 1] == ("GET", pull_path())
    assert len(github.merges()) == 1
    assert (harness.ready(CTL, "pr7") or {}).get("reason") == "Merged"
    types = harness.events(CTL, "pr7")
    assert types.count("effect_pending") == 1
    assert "effect_indeterminate" in types
    assert types.count("effect_applied") == 1


def test_spec_bump_invalidates_merged_readiness_until_reobserved(harness: Harness,
                                                                 github: FakeGitHub) -> None:
    github.add_pull(REPO_NAME, 7, HEAD, checks="success")
    m = harness.manager()
    m.apply(CTL, "pr7", pr_spec(github.url, merge_approved=True))
    m.run_until_idle()
    from runner.controllers import is_true

    r = harness.resource(CTL, "pr7")
    assert is_true(r.status, "Ready", r.generation)
    r2 = m.apply(CTL, "pr7", pr_spec(github.url, merge_approved=True, repair_workflow="x"))
    assert r2.generation == r.generation + 1
    assert not is_true(r2.status, "Ready", r2.generation)
    m.run_until_idle()
    r3 = harness.resource(CTL, "pr7")
    assert is_true(r3.status, "Ready", r3.generation)
    assert len(github.merges()) == 1
