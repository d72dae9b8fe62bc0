"""Conformance: effects, child workflow requests and the controller event feed."""

from __future__ import annotations

import pytest
from storekit import FakeClock

from runner.store import IdentityConflict, LostRace
from runner.store._controller_interface import ControllerStore, Effect, WorkflowRequest

UID = "0123456789abcdef0123456789abcdef"
FP = "sha256:" + "ab" * 32


def _effect(result: Effect | LostRace) -> Effect:
    assert isinstance(result, Effect), result
    return result


def _request(result: WorkflowRequest | LostRace) -> WorkflowRequest:
    assert isinstance(result, WorkflowRequest), result
    return result


# --- effects -----------------------------------------------------------------------------


def test_reserve_records_pending_once(cstore: ControllerStore, clock: FakeClock) -> None:
    e = cstore.effects
    first = e.reserve(UID, "merge:1:abc", generation=1, kind="github-merge", request_fingerprint=FP)
    assert first.state == "pending"
    assert (first.started_at, first.completed_at) == (cstore.now_ms(), None)
    clock.advance(10)
    again = e.reserve(UID, "merge:1:abc", generation=2, kind="github-merge", request_fingerprint=FP)
    assert again == first  # the existing record, unchanged
    assert e.get(UID, "merge:1:abc") == first
    assert e.list(UID) == [first]
    assert e.list("other-uid") == []


@pytest.mark.parametrize(("kind", "fingerprint"), [("github-merge", "sha256:other"), ("x", FP)])
def test_reusing_a_key_for_another_request_is_an_identity_conflict(
    cstore: ControllerStore, kind: str, fingerprint: str
) -> None:
    e = cstore.effects
    first = e.reserve(UID, "k", generation=1, kind="github-merge", request_fingerprint=FP)
    with pytest.raises(IdentityConflict, match="use a new effect key"):
        e.reserve(UID, "k", generation=1, kind=kind, request_fingerprint=fingerprint)
    assert e.get(UID, "k") == first


def test_effect_state_machine(cstore: ControllerStore, clock: FakeClock) -> None:
    e = cstore.effects
    e.reserve(UID, "a", generation=1, kind="k", request_fingerprint=FP)
    clock.advance(1)
    unsure = _effect(e.complete(UID, "a", state="indeterminate", error="timeout"))
    assert (unsure.state, unsure.error, unsure.completed_at) == (
        "indeterminate",
        "timeout",
        cstore.now_ms(),
    )
    still = _effect(e.complete(UID, "a", state="indeterminate", error="still unknown"))
    assert still.error == "still unknown"
    applied = _effect(e.complete(UID, "a", state="applied", external_ref="sha-1"))
    assert (applied.state, applied.external_ref, applied.error) == ("applied", "sha-1", None)
    for state in ("applied", "rejected", "indeterminate"):
        lost = e.complete(UID, "a", state=state)  # type: ignore[arg-type]
        assert lost == LostRace(f"{UID}/a", "wrong_status", "applied")
    assert e.get(UID, "a") == applied

    e.reserve(UID, "b", generation=1, kind="k", request_fingerprint=FP)
    rejected = _effect(e.complete(UID, "b", state="rejected", error="409 " + "x" * 9000))
    assert rejected.error is not None
    assert len(rejected.error.encode()) <= 8192
    assert e.complete(UID, "b", state="applied") == LostRace(f"{UID}/b", "wrong_status", "rejected")
    assert e.complete(UID, "zz", state="applied") == LostRace(f"{UID}/zz", "not_found")
    with pytest.raises(ValueError, match="completes as one of"):
        e.complete(UID, "b", state="pending")


# --- workflow requests ---------------------------------------------------------------------


def test_ensure_is_deterministic_and_idempotent(cstore: ControllerStore) -> None:
    w = cstore.workflow_requests
    first = w.ensure(UID, "repair:1:abc", workflow="repair", input_fingerprint=FP)
    assert (first.state, first.attempt, first.run_id, first.error) == ("pending", 0, None, None)
    assert len(first.request_id) == 32
    assert w.ensure(UID, "repair:1:abc", workflow="repair", input_fingerprint=FP) == first
    other = w.ensure(UID, "repair:2:abc", workflow="repair", input_fingerprint=FP)
    assert other.request_id != first.request_id
    elsewhere = w.ensure("another-uid", "repair:1:abc", workflow="repair", input_fingerprint=FP)
    assert elsewhere.request_id != first.request_id
    with pytest.raises(IdentityConflict, match="new request key"):
        w.ensure(UID, "repair:1:abc", workflow="repair", input_fingerprint="sha256:changed")
    with pytest.raises(IdentityConflict, match="new request key"):
        w.ensure(UID, "repair:1:abc", workflow="other", input_fingerprint=FP)
    assert w.get(first.request_id) == first


def test_attempts_are_immutable_and_a_stale_finish_is_refused(
    cstore: ControllerStore, clock: FakeClock
) -> None:
    w = cstore.workflow_requests
    req = w.ensure(UID, "repair", workflow="repair", input_fingerprint=FP)
    one = _request(w.start_attempt(req.request_id, expected_attempt=0, run_id="run-a"))
    assert (one.state, one.attempt, one.run_id) == ("running", 1, "run-a")
    # A second scheduler that read attempt 0 loses: one run per attempt.
    assert w.start_attempt(req.request_id, expected_attempt=0, run_id="run-x") == LostRace(
        req.request_id, "stale_attempt", "running"
    )
    assert w.start_attempt(req.request_id, expected_attempt=1, run_id="run-x") == LostRace(
        req.request_id, "wrong_status", "running"
    )
    clock.advance(1)
    cut = _request(w.finish(req.request_id, attempt=1, state="interrupted", error="host stopped"))
    assert (cut.state, cut.updated_at) == ("interrupted", cstore.now_ms())
    # the interrupted attempt is final; a retry is attempt 2 with a new run
    assert w.finish(req.request_id, attempt=1, state="succeeded") == LostRace(
        req.request_id, "wrong_status", "interrupted"
    )
    assert w.finish(req.request_id, attempt=1, state="interrupted", error="host stopped") == cut
    two = _request(w.start_attempt(req.request_id, expected_attempt=1, run_id="run-b"))
    assert (two.state, two.attempt, two.run_id, two.error) == ("running", 2, "run-b", None)
    # the old run reports late: refused, nothing changes
    stale = w.finish(req.request_id, attempt=1, state="failed", error="late")
    assert stale == LostRace(req.request_id, "stale_attempt", "running")
    assert w.get(req.request_id) == two
    assert w.find_by_run("run-a") is None
    assert w.find_by_run("run-b") == two
    waiting = _request(w.finish(req.request_id, attempt=2, state="waiting"))
    done = _request(w.finish(req.request_id, attempt=2, state="succeeded"))
    assert (waiting.state, done.state, done.attempt) == ("waiting", "succeeded", 2)
    assert w.start_attempt(req.request_id, expected_attempt=2, run_id="run-c") == LostRace(
        req.request_id, "wrong_status", "succeeded"
    )


def test_a_request_that_cannot_start_fails_at_attempt_0(cstore: ControllerStore) -> None:
    w = cstore.workflow_requests
    req = w.ensure(UID, "repair", workflow="missing", input_fingerprint=FP)
    assert w.finish(req.request_id, attempt=0, state="succeeded") == LostRace(
        req.request_id, "wrong_status", "pending"
    )
    failed = _request(w.finish(req.request_id, attempt=0, state="failed", error="no workflow"))
    assert (failed.state, failed.attempt, failed.run_id) == ("failed", 0, None)
    with pytest.raises(ValueError, match="cannot finish as 'pending'"):
        w.finish(req.request_id, attempt=0, state="pending")
    assert w.finish("nope", attempt=0, state="failed") == LostRace("nope", "not_found")


def test_a_run_id_belongs_to_one_request(cstore: ControllerStore) -> None:
    w = cstore.workflow_requests
    a = w.ensure(UID, "a", workflow="repair", input_fingerprint=FP)
    b = w.ensure(UID, "b", workflow="repair", input_fingerprint=FP)
    _request(w.start_attempt(a.request_id, expected_attempt=0, run_id="run-1"))
    with pytest.raises(IdentityConflict, match="run-1"):
        w.start_attempt(b.request_id, expected_attempt=0, run_id="run-1")
    assert w.get(b.request_id) == b


def test_list_filters_by_resource_and_state(cstore: ControllerStore, clock: FakeClock) -> None:
    w = cstore.workflow_requests
    a = w.ensure(UID, "a", workflow="repair", input_fingerprint=FP)
    clock.advance(1)
    b = _request(
        w.start_attempt(
            w.ensure(UID, "b", workflow="repair", input_fingerprint=FP).request_id,
            expected_attempt=0,
            run_id="run-b",
        )
    )
    c = w.ensure("other", "a", workflow="repair", input_fingerprint=FP)
    assert [r.request_id for r in w.list(UID)] == [a.request_id, b.request_id]
    assert w.list(UID, states=["running"]) == [b]
    assert {r.request_id for r in w.list(states=["pending"])} == {a.request_id, c.request_id}
    assert w.list(states=[]) == []
    with pytest.raises(ValueError, match="unknown workflow request state"):
        w.list(states=["done"])  # type: ignore[list-item]


# --- controller events -------------------------------------------------------------------------


def test_events_append_and_read_in_order(cstore: ControllerStore, clock: FakeClock) -> None:
    ev = cstore.controller_events
    first = ev.append("pr", "a", "reconcile_started", {"generation": 1}, reconcile_id="r1")
    clock.advance(1)
    ev.append("pr", "b", "resource_applied")
    third = ev.append("other", "a", "reconcile_failed", {"error": "boom\n" + "x" * 9000})
    assert (first.type, first.reconcile_id, first.payload) == (
        "reconcile_started",
        "r1",
        {"generation": 1},
    )
    assert first.recorded_at + 1000 == third.recorded_at
    assert len(third.payload["error"].encode()) <= 8192
    assert "\n" not in third.payload["error"]
    assert [e.seq for e in ev.read()] == [first.seq, first.seq + 1, third.seq]
    assert [e.key for e in ev.read(controller="pr")] == ["a", "b"]
    assert [e.type for e in ev.read(controller="pr", key="b")] == ["resource_applied"]
    assert ev.read(controller="pr", key="b")[0].payload == {}
    assert [e.seq for e in ev.read(after_seq=first.seq, limit=1)] == [first.seq + 1]


def test_event_payloads_are_bounded_json_objects(cstore: ControllerStore) -> None:
    ev = cstore.controller_events
    with pytest.raises(ValueError, match="JSON object"):
        ev.append("pr", "a", "x", ["list"])
    with pytest.raises(ValueError, match="limit is 65536"):
        ev.append("pr", "a", "x", {"blob": "y" * 70_000})
    with pytest.raises(ValueError, match="printable"):
        ev.append("pr", "a", "")
    assert ev.read() == []
