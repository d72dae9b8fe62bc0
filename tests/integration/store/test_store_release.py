"""`launches.release`: a claimed `starting` launch goes back to the queue when its
runner could not write the run bundle (a full or read-only disk). Conformance: runs
against every Store implementation."""

from __future__ import annotations

from storekit import SECRET, launch

from runner.store import MAX_ACTIVATION_CRASHES, LaunchRecord, LostRace, Store


def test_release_returns_a_claimed_launch_with_its_input_and_no_crash(store: Store) -> None:
    store.launches.enqueue(launch("run-1"))
    for _ in range(MAX_ACTIVATION_CRASHES + 1):  # a disk full for a while poisons nothing
        claim = store.launches.claim_next(runner_id="host-1")
        assert claim is not None
        assert claim.claim_token is not None
        released = store.launches.release("run-1", claim.claim_token)
        assert isinstance(released, LaunchRecord)
        assert released.status == "queued"
        assert released.crash_count == 0
        assert released.claim_token is None
        assert released.runner_id is None
        assert released.input()["token"] == SECRET
    events = [e.type for e in store.run_events.read(run_id="run-1")]
    assert events.count("launch.starting") == MAX_ACTIVATION_CRASHES + 1
    assert events.count("launch.queued") >= MAX_ACTIVATION_CRASHES + 1  # one per release


def test_release_needs_the_claim_and_a_starting_launch(store: Store) -> None:
    store.launches.enqueue(launch("run-1"))
    assert isinstance(store.launches.release("run-1", "no-such-token"), LostRace)  # queued
    claim = store.launches.claim_next(runner_id="host-1")
    assert claim is not None
    assert claim.claim_token is not None
    lost = store.launches.release("run-1", "another-token")
    assert isinstance(lost, LostRace)
    running = store.launches.mark_running("run-1", claim.claim_token)
    assert isinstance(running, LaunchRecord)
    assert isinstance(store.launches.release("run-1", claim.claim_token), LostRace)
    record = store.launches.get("run-1")
    assert record is not None
    assert record.status == "running"
