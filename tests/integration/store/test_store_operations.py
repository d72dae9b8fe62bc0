"""Issue 39's store parts on every backend: rerun links, pause/unpause of parked
launches (park mode `paused`, claimed by no host), and the step cache (TTL on the
store's clock, one entry per key, list and clear)."""

from __future__ import annotations

from storekit import FakeClock, launch

from runner.store import LaunchRecord, LostRace, Store


def _parked(store: Store, run_id: str, mode: str = "explicit") -> LaunchRecord:
    store.launches.enqueue(launch(run_id))
    claimed = store.launches.claim(run_id, runner_id="host-1")
    assert isinstance(claimed, LaunchRecord)
    token = claimed.claim_token or ""
    assert isinstance(store.launches.mark_running(run_id, token), LaunchRecord)
    parked = store.launches.park(run_id, token, mode=mode)  # type: ignore[arg-type]
    assert isinstance(parked, LaunchRecord)
    return parked


def test_rerun_links_show_only_reruns_whose_launch_was_queued(store: Store) -> None:
    store.reruns.link("run-2", "run-1", "two", forced=True, changed_nodes=["three"])
    store.reruns.link("run-3", "run-1", "one", forced=False, changed_nodes=[])
    assert store.reruns.reruns_of("run-1") == []  # no launch rows yet
    store.launches.enqueue(launch("run-2"))
    (link,) = store.reruns.reruns_of("run-1")
    assert (link.run_id, link.from_node, link.forced, link.changed_nodes) == (
        "run-2", "two", True, ("three",))
    assert store.reruns.rerun("run-2") == link
    assert store.reruns.rerun("run-3") is None
    store.reruns.unlink("run-3")  # its launch never came: forgotten
    store.reruns.unlink("run-2")  # queued: kept
    assert [r.run_id for r in store.reruns.reruns_of("run-1")] == ["run-2"]


def test_a_paused_launch_is_claimed_by_no_host_until_unpaused(store: Store) -> None:
    _parked(store, "run-1", "auto")
    paused = store.pauses.pause_parked("run-1")
    assert isinstance(paused, LaunchRecord)
    assert (paused.status, paused.park_mode) == ("parked", "paused")
    assert store.launches.claim_next(runner_id="host-2") is None
    assert isinstance(store.pauses.pause_parked("run-1"), LostRace)  # paused already
    unpaused = store.pauses.unpause("run-1")
    assert isinstance(unpaused, LaunchRecord)
    assert unpaused.park_mode == "auto"
    claimed = store.launches.claim_next(runner_id="host-2")
    assert claimed is not None
    assert claimed.run_id == "run-1"
    assert isinstance(store.pauses.unpause("run-1"), LostRace)  # starting: not paused
    kinds = [e.type for e in store.run_events.read(run_id="run-1")]
    assert kinds.index("launch.paused") < kinds.index("launch.unpaused")
    assert store.pauses.unpause("nope") == LostRace("nope", "not_found")


def test_the_step_cache_keeps_ok_outputs_until_their_ttl(store: Store,
                                                         clock: FakeClock) -> None:
    cache = store.step_cache
    assert cache.get("k1") is None
    assert cache.put("k1", workflow="w", node_id="a", run_id="r1", output={"x": [1]},
                     ttl_ms=60_000)
    hit = cache.get("k1")
    assert hit is not None
    assert (hit.output, hit.run_id) == ({"x": [1]}, "r1")
    assert cache.put("k1", workflow="w", node_id="a", run_id="r2", output=2, ttl_ms=60_000)
    again = cache.get("k1")
    assert again is not None
    assert again.run_id == "r2"
    cache.put("k2", workflow="w", node_id="b", run_id="r2", output=None, ttl_ms=120_000)
    cache.put("k3", workflow="v", node_id="a", run_id="r3", output="y", ttl_ms=120_000)
    assert not cache.put("k4", workflow="v", node_id="a", run_id="r3", output="z" * 2_000_000,
                         ttl_ms=1)  # too large: not kept
    clock.advance(61)
    assert cache.get("k1") is None  # expired on the store's clock
    assert cache.get("k2") is not None
    assert [(e.workflow, e.node_id) for e in cache.entries(workflow="w")] == [
        ("w", "a"), ("w", "b")]
    assert cache.clear(workflow="w", node_id="b") == 1
    assert cache.clear(keys=["k3"]) == 1
    assert cache.clear() == 1
    assert cache.entries() == []


def test_forgetting_a_pruned_run_removes_its_rerun_links(store: Store) -> None:
    store.launches.enqueue(launch("run-2"))
    store.reruns.link("run-3", "run-2", "a", forced=False, changed_nodes=[])
    store.launches.enqueue(launch("run-3"))
    for run_id in ("run-2", "run-3"):
        assert isinstance(store.launches.cancel(run_id), LaunchRecord)
    assert [r.run_id for r in store.reruns.reruns_of("run-2")] == ["run-3"]
    store.retention.forget_runs(["run-2"])
    assert store.reruns.rerun("run-3") is None
