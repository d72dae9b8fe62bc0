"""Flow control in the store's claim (DESIGN §10): a launch whose concurrency key is
full or whose rate is spent is not claimable, so it holds no host slot; the check
holds under concurrent claimers (Postgres: a lock per key)."""

from __future__ import annotations

import threading
from collections import Counter

from storekit import Backend, FakeClock, launch

from runner.store import LaunchGate, LaunchRecord, Store


def _gate(key: str, limit: int = 1) -> LaunchGate:
    return LaunchGate(concurrency_key=key, concurrency_limit=limit, strategy="queue")


def _claim_all(store: Store, slots: int) -> list[LaunchRecord]:
    taken = []
    for _ in range(slots):
        record = store.launches.claim_next(runner_id="host-1")
        if record is None:
            break
        taken.append(record)
    return taken


def _end(store: Store, record: LaunchRecord) -> None:
    assert record.claim_token is not None
    store.launches.mark_running(record.run_id, record.claim_token)
    store.launches.finish(record.run_id, record.claim_token)


def test_runs_of_one_key_never_overlap_and_another_key_runs_at_once(
        backend: Backend, clock: FakeClock) -> None:
    """3 runs of key A and 1 of key B on a 4-slot host: A's run one at a time (the
    others are not even claimed), B at once."""
    store = backend.open(clock)
    try:
        for name in ("a1", "a2", "a3"):
            store.launches.enqueue(launch(name, gate=_gate("wf:A")))
            clock.advance(1)
        store.launches.enqueue(launch("b1", gate=_gate("wf:B")))
        order = []
        running = _claim_all(store, 4)
        assert [r.run_id for r in running] == ["a1", "b1"]  # 2 of 4 slots: a2, a3 wait
        while running:
            done = running.pop(0)
            order.append(done.run_id)
            _end(store, done)
            running += _claim_all(store, 4 - len(running))
            keys = Counter(r.run_id[0] for r in running)
            assert keys["a"] <= 1
        assert order == ["a1", "b1", "a2", "a3"]
        assert store.launches.gate_holders("wf:A") == []
    finally:
        store.close()


def test_concurrent_claimers_respect_the_limit(backend: Backend, clock: FakeClock) -> None:
    store = backend.open(clock)
    try:
        for i in range(10):
            store.launches.enqueue(launch(f"a{i}", gate=_gate("wf:A", limit=2)))
        barrier = threading.Barrier(8)
        taken: list[str] = []

        def claim(n: int) -> None:
            barrier.wait()
            record = store.launches.claim_next(runner_id=f"host-{n}")
            if record is not None:
                taken.append(record.run_id)
        threads = [threading.Thread(target=claim, args=(n,)) for n in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert len(taken) <= 2
        assert len(store.launches.gate_holders("wf:A")) == len(taken)
        assert len(_claim_all(store, 8)) == 2 - len(taken)  # never more than the limit
    finally:
        store.close()


def test_a_rate_limit_of_5_per_second_holds_under_100_starts(backend: Backend,
                                                            clock: FakeClock) -> None:
    store = backend.open(clock)
    try:
        gate = LaunchGate(rate_key="wf:openai", rate_limit=5, rate_per_ms=1000)
        for i in range(100):
            store.launches.enqueue(launch(f"r{i:03d}", gate=gate))
        starts: list[float] = []
        while len(starts) < 100:
            for record in _claim_all(store, 100):
                starts.append(clock.now())
                _end(store, record)
            clock.advance(0.125)  # exact in binary: no float drift at the window edge
        for i, at in enumerate(starts):
            assert sum(1 for s in starts[i:] if s < at + 1.0) <= 5
        assert store.launches.gate_starts("wf:openai", 0)[:5] == [
            round(s * 1000) for s in starts[:5]]
        assert starts[-1] - starts[0] >= 19  # 100 starts at 5 per second
    finally:
        store.close()
