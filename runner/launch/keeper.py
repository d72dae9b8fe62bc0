"""The lease keeper: one thread per coordinator for every run it is executing.

While a run executes, its claim is renewed on the keeper's own timer (every
`renew_every`, at most lease/3 by default) and cross-process cancel requests
(`cancel_requested` run events) become a cancel of the run. A renewal that loses
marks the activation `claim_lost` and parks the run at the next boundary.

One shared thread instead of one per run: starting and joining a thread on every
activation cost milliseconds on a loaded two-core machine (bench/bench_launch.py).
The thread waits on a real event while nothing is registered and exits after
`IDLE_LINGER` seconds of that, so a fake clock is only advanced while runs execute
(as the per-run keeper did).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING

from runner.store import LostRace, StoreError

if TYPE_CHECKING:
    from .coordinator import Activation, LaunchCoordinator

CANCEL_POLL = 0.5
CANCEL_EVENT = "cancel_requested"
IDLE_LINGER = 10.0


@dataclass
class _Kept:
    act: Activation
    next_renew: float
    seen: int = 0


class LeaseKeeper:
    def __init__(self, owner: LaunchCoordinator) -> None:
        self.owner = owner
        self._lock = threading.Lock()
        self._kept: dict[int, _Kept] = {}
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None

    def add(self, act: Activation) -> None:
        """Keep `act`'s claim alive until `remove`."""
        kept = _Kept(act, self.owner.clock.monotonic() + self.owner.renew_every)
        with self._lock:
            self._kept[id(act)] = kept
            self._wake.set()
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, daemon=True,
                                                name=f"wfrun-lease-{self.owner.runner_id}")
                self._thread.start()

    def remove(self, act: Activation) -> None:
        with self._lock:
            self._kept.pop(id(act), None)

    def _loop(self) -> None:
        while True:
            with self._lock:
                kept = list(self._kept.values())
                if not kept:
                    self._wake.clear()
            if not kept:
                if not self._wake.wait(IDLE_LINGER):
                    with self._lock:
                        if not self._kept:
                            self._thread = None
                            return
                continue
            self.owner.clock.sleep(min(CANCEL_POLL, self.owner.renew_every))
            for item in kept:
                with self._lock:
                    if self._kept.get(id(item.act)) is not item:
                        continue  # the run ended meanwhile
                self._tick(item)

    def _tick(self, item: _Kept) -> None:
        owner, act = self.owner, item.act
        try:
            for event in owner.store.run_events.read(run_id=act.record.run_id,
                                                     after_seq=item.seen):
                item.seen = event.seq
                if event.type == CANCEL_EVENT:
                    act.control.cancel("cancelled on request")
            if owner.clock.monotonic() < item.next_renew:
                return
            item.next_renew = owner.clock.monotonic() + owner.renew_every
            renewed = owner.store.launches.renew_lease(act.record.run_id, act.token,
                                                       lease_seconds=owner.lease_seconds)
        except StoreError:
            return  # a busy store; the next tick retries before the lease runs out
        if isinstance(renewed, LostRace):
            with self._lock:
                current = self._kept.pop(id(act), None)
            if current is item:
                act.claim_lost = True
                act.control.park("claim lost")
