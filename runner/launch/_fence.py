"""The lease fence: whether a claimed launch is still ours, before each bundle write.

The engine asks the fence before it writes a run's bundle. While our lease surely
has a third of its length left, nothing else can change the row: a reclaim needs an
expired lease, and a cancel of a claimed row (`starting` or `running`) with a live
lease is asked of its holder (the store refuses it otherwise, ADR 0009 lever 3).
Then the fence is answered from what it last learned (no round trip); otherwise it
asks the store, and learns the lease from the answer. The fence owns that
knowledge: `running` and `held` record committed answers (mark_running, a renewal by
the lease keeper), a read records what it found, `lost` forgets them.
"""

from __future__ import annotations

import threading

from runner._leases import renew_every
from runner.clock import Clock
from runner.store import LaunchBook, LaunchRecord, LostRace, StoreError, StoreUnreachable

#: How often a fence asks an unreachable store again, while its patience lasts.
RETRY_EVERY = 0.2


class LeaseFence:
    """The fence of one claim (`run_id` under `token`), on the engine's clock."""

    def __init__(self, launches: LaunchBook, run_id: str, token: str, clock: Clock,
                 lease_seconds: float) -> None:
        self._launches = launches
        self._run_id = run_id
        self._token = token
        self._clock = clock
        # A third of the lease: kept in hand before answering locally, and how long an
        # unreachable store is waited for.
        self.margin = renew_every(lease_seconds)
        self._lock = threading.Lock()  # the keeper's thread updates what the run reads
        self._running = False
        self._until = 0.0

    @property
    def token(self) -> str:
        """The claim token this fence guards."""
        return self._token

    @property
    def running_here(self) -> bool:
        """Whether the row was last known `running` under this claim."""
        return self._running

    def running(self, record: LaunchRecord, sent: float) -> None:
        """The row is `running` under this claim (mark_running's committed answer, to
        a statement sent at `sent`)."""
        with self._lock:
            self._running = True
        self.held(record, sent)

    def held(self, record: LaunchRecord, sent: float) -> None:
        """A committed answer (mark_running, a renewal) to a statement sent at `sent` on
        the engine's clock: the database wrote it no earlier, when the lease had
        `claim_expires_at - updated_at` left (both on the database's clock), so the
        lease holds until `sent` plus that, less `margin` for clock drift and a write
        still on its way."""
        left = ((record.claim_expires_at or 0) - record.updated_at) / 1000
        with self._lock:
            self._until = max(self._until, sent + left - self.margin)

    def lost(self) -> None:
        """The claim is lost (a renewal refused): ask the store from now on."""
        with self._lock:
            self._running = False
            self._until = 0.0

    def __call__(self) -> bool:
        """True while the claim is ours. A database that went away (a restart, a
        network blip: StoreUnreachable) is waited for, up to a
        third of the lease, and asked again: only its answer says the claim is still
        ours, so nothing runs unfenced."""
        give_up = self._clock.monotonic() + self.margin
        while True:
            try:
                sent = self._clock.monotonic()
                if sent < self._until:
                    return True
                held = self._launches.claim_left(self._run_id, self._token)
                break
            except StoreError as exc:
                if not isinstance(exc, StoreUnreachable) or self._clock.monotonic() >= give_up:
                    return False
                self._clock.sleep(RETRY_EVERY)
        if isinstance(held, LostRace):
            self.lost()
            return False
        status, left_ms = held
        with self._lock:
            self._running = status == "running"
            # As `held`: the database read the lease no earlier than `sent`.
            self._until = max(self._until, sent + left_ms / 1000 - self.margin)
        return True
