"""The lease keeper: one thread per runner for every run it is executing.

While a run executes, its claim is renewed by the shared renewer
(`runner._leases.Renewer`, every `renew_every`, at most lease/3 by default) and, on
the same thread every `CANCEL_POLL` seconds, cross-process cancel requests
(`cancel_requested` run events) become a cancel of the run. A renewal that loses
marks the activation `claim_lost` and parks the run at the next boundary.

One shared thread instead of one per run: starting and joining a thread on every
activation cost milliseconds on a loaded two-core machine (bench/bench_launch.py).
The thread lingers `IDLE_LINGER` seconds with nothing registered, then exits. Due
times are on the coordinator's Clock; the thread never advances a fake one.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import TYPE_CHECKING

from runner._leases import Renewer
from runner.clock import Clock
from runner.store import LaunchBook, LostRace, Store, StoreError

if TYPE_CHECKING:
    from ._activation import Activation

CANCEL_POLL = 0.5
CANCEL_EVENT = "cancel_requested"
IDLE_LINGER = 10.0


#: Cross-process pause requests (`wfrun pause|unpause`, launch/_pausing.py): the latest
#: of these events decides whether a pause is pending. A park ends a request (it was
#: honoured, or the run stopped anyway), so a resumed run does not pause again on it.
PAUSE_EVENT = "pause_requested"
UNPAUSE_EVENT = "unpause_requested"
#: The runner's acknowledgement: it read the request and pauses at the next boundary.
PAUSE_SEEN = "pause_seen"
_PAUSE_ENDS = frozenset({UNPAUSE_EVENT, "launch.parked", "launch.paused", "launch.unpaused"})


def pause_pending(types: list[str], pending: bool = False) -> bool:
    """Whether a pause is pending after these run events (in order)."""
    for kind in types:
        if kind == PAUSE_EVENT:
            pending = True
        elif kind in _PAUSE_ENDS:
            pending = False
    return pending


class LeaseKeeper:
    def __init__(self, store: Store, book: LaunchBook, clock: Clock, lease_seconds: float,
                 renew_every: float, runner_id: str = "",
                 tick: Callable[[], None] = lambda: None) -> None:
        self.store = store
        self.book = book
        self.tick = tick  # the runner's due work (its batched input scrub)
        self.clock = clock
        self.lease_seconds = lease_seconds
        self.renew_every = renew_every
        renewer: Renewer[Activation] = Renewer(
            clock, self._renew, self._lost, renew_every=renew_every,
            tick=min(CANCEL_POLL, renew_every), poll=self._poll, linger=IDLE_LINGER,
            name=f"wfrun-lease-{runner_id}")
        # An activation's claim is kept alive, and its cancel requests read, from `add`
        # until `remove` (the renewer's own: it holds the activations themselves).
        self.add = renewer.add
        self.remove = renewer.remove

    def asked_to_cancel(self, act: Activation) -> bool:
        """Read `act`'s cancel requests now (not at the next poll) and honour one: a
        cancel asked while the launch was `starting` (its live holder is asked, not
        overruled: recovery.py) then stops the run at its first boundary, before any
        node. A busy store: the poll reads it later."""
        try:
            events = self.store.run_events.read(run_id=act.record.run_id)
        except StoreError:
            return False
        if any(event.type == CANCEL_EVENT for event in events):
            act.control.cancel("cancelled on request")
            return True
        return False

    # -- on the renewer's thread ---------------------------------------------------------
    def _poll(self, act: Activation) -> None:
        self.tick()
        try:
            events = self.store.run_events.read(run_id=act.record.run_id,
                                                after_seq=act.events_seen)
        except StoreError:
            return  # a busy store; the next tick reads again
        for event in events:
            act.events_seen = event.seq
            if event.type == CANCEL_EVENT:
                act.control.cancel("cancelled on request")
        pausing = pause_pending([e.type for e in events], act.pausing)
        if pausing != act.pausing:
            act.pausing = pausing
            if pausing:
                act.control.pause(park=True)  # parks at the next node boundary
                # An acknowledgement only: the pause happens all the same.
                with contextlib.suppress(StoreError):
                    self.store.run_events.append(act.record.run_id, PAUSE_SEEN, {},
                                                 workflow_ref=act.record.workflow_ref)
            else:
                act.control.resume()  # withdrawn before the boundary came

    def _renew(self, act: Activation) -> bool | None:
        sent = self.clock.monotonic()
        try:
            renewed = self.book.renew_lease(act.record.run_id, act.token,
                                            lease_seconds=self.lease_seconds)
        except StoreError:
            return None  # a busy store; the next tick retries before the lease runs out
        if isinstance(renewed, LostRace):
            return False
        act.fence.held(renewed, sent)  # the fence answers from it
        return True

    def _lost(self, act: Activation) -> None:
        """A renewal was refused: the renewer has dropped `act` (told once per `add`)."""
        act.fence.lost()  # the fence asks the store from now on
        act.claim_lost = True
        act.control.park("claim lost", clean=False)
