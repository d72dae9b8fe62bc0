"""The controller side of the store (DESIGN §7, seed 004): resources, the keyed
queue, effects, child workflow requests and the controller event feed.

Same rules as the launch side: every state change is one conditional update
(compare-and-swap on `resource_version`, or the claim token + epoch on queue
rows); a lost race returns `LostRace` and changes nothing; identity reuse with
different content raises `IdentityConflict`. Times are integer milliseconds
from the store's clock; durations passed in are seconds.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

from runner.store._records import Json, LostRace
from runner.store._states import SPEC_MAX_BYTES as SPEC_MAX_BYTES
from runner.store._states import STATUS_MAX_BYTES as STATUS_MAX_BYTES

EffectState = Literal["pending", "applied", "rejected", "indeterminate"]
RequestState = Literal["pending", "running", "waiting", "succeeded", "failed", "interrupted"]
QueueOutcome = Literal["settled", "requeue", "requeue_after", "error"]

#: (event type, payload, reconcile id) of a controller event written with a queue change.
EventSpec = tuple[str, Mapping[str, object], str | None]



@dataclass(frozen=True, slots=True)
class Resource:
    """One row of `resources`: desired state (`spec`) and observed state (`status`)."""

    controller: str
    key: str
    uid: str
    resource_version: int  # bumped by every write (CAS token)
    generation: int  # bumped only when the spec changes
    spec: dict[str, Json]
    status: dict[str, Json]
    deletion_timestamp: int | None
    finalizers: tuple[str, ...]
    created_at: int
    updated_at: int


@dataclass(frozen=True, slots=True)
class QueueItem:
    """One row of `reconcile_queue`: at most one per (controller, key)."""

    controller: str
    key: str
    available_at: int
    dirty: bool  # a wake-up arrived during a claimed pass: run exactly one more
    claim_token: str | None
    claim_expires_at: int | None
    epoch: int  # bumped on every claim, so a zombie's late writes lose
    runner_id: str | None
    consecutive_errors: int
    last_error: str | None


@dataclass(frozen=True, slots=True)
class Effect:
    """One row of `effects`: an external mutation, recorded before the provider call."""

    resource_uid: str
    effect_key: str
    generation: int
    kind: str
    state: EffectState
    request_fingerprint: str
    started_at: int
    completed_at: int | None
    external_ref: str | None
    error: str | None


@dataclass(frozen=True, slots=True)
class WorkflowRequest:
    """One row of `workflow_requests`: a child workflow a resource asked for."""

    request_id: str
    resource_uid: str
    request_key: str
    input_fingerprint: str
    workflow: str
    run_id: str | None
    state: RequestState
    attempt: int
    error: str | None
    created_at: int
    updated_at: int


@dataclass(frozen=True, slots=True)
class ControllerEvent:
    """One row of `controller_events`: the structured lifecycle record."""

    seq: int
    recorded_at: int
    controller: str
    key: str
    type: str
    reconcile_id: str | None
    payload: dict[str, Json]


@dataclass(frozen=True, slots=True)
class ClaimedPass:
    """One key of a batch claim, and its resource as the claim's transaction read it
    (None: no such resource)."""

    item: QueueItem
    resource: Resource | None


@dataclass(frozen=True, slots=True)
class PassEnd:
    """How one claimed pass ends, for `ReconcileQueue.finish_passes`.

    With `status`, the status compare-and-swap against `expected_version` is made
    first; if it loses, `conflict_events` are recorded instead of `events` and the key
    is requeued at once (the pass's status was stale)."""

    controller: str
    key: str
    claim_token: str
    outcome: QueueOutcome
    delay: float = 0.0
    error: str | None = None
    events: Sequence[EventSpec] = ()
    status: Mapping[str, object] | None = None
    expected_version: int | None = None
    conflict_events: Sequence[EventSpec] = ()


#: What became of one PassEnd: "finished"; "conflict" (status CAS lost, requeued);
#: LostRace (the claim was taken over: nothing written); ValueError (a status or an
#: event that cannot be stored: nothing written, the pass still holds its claim).
PassResult = Literal["finished", "conflict"] | LostRace | ValueError


class Resources(Protocol):
    def apply(self, controller: str, key: str, spec: Mapping[str, object],
              initial_status: Mapping[str, object] | None = None) -> Resource:
        """Create, or replace the spec (generation +1 only if it changed); enqueues the key
        in the same transaction. Raises ValueError over SPEC_MAX_BYTES."""
        ...

    def get(self, controller: str, key: str) -> Resource | None: ...

    def get_by_uid(self, uid: str) -> Resource | None: ...

    def list(self, controller: str | None = None) -> list[Resource]: ...

    def update_status(self, controller: str, key: str, expected_version: int,
                      status: Mapping[str, object]) -> Resource | LostRace:
        """CAS on resource_version; never changes generation. ValueError over 64 KiB."""
        ...

    def set_finalizers(self, controller: str, key: str, expected_version: int,
                       finalizers: Iterable[str]) -> Resource | LostRace: ...

    def request_deletion(self, controller: str, key: str) -> Resource | None:
        """Set deletion_timestamp (kept if already set) and enqueue; None if absent."""
        ...

    def delete(self, controller: str, key: str, expected_version: int) -> bool | LostRace:
        """Remove a resource whose deletion was requested and whose finalizers are empty."""
        ...


class ReconcileQueue(Protocol):
    def enqueue(self, controller: str, key: str, *, delay: float = 0.0) -> QueueItem:
        """Deduplicating: one row per key; a claimed key becomes dirty (one more pass);
        a delayed wake-up keeps the sooner time."""
        ...

    def enqueue_many(self, items: Iterable[tuple[str, str]], *, delay: float = 0.0) -> int: ...

    def claim_next(self, *, runner_id: str, lease_seconds: float,
                   controllers: Iterable[str] | None = None,
                   exclude: Iterable[tuple[str, str]] = (),
                   claim_event: EventSpec | None = None) -> QueueItem | None:
        """The oldest available item (unclaimed or with an expired claim); bumps epoch.
        `claim_event` (type, payload, reconcile id) is recorded for the claimed key in
        the same transaction."""
        ...

    def renew(self, controller: str, key: str, claim_token: str, *,
              lease_seconds: float) -> QueueItem | LostRace: ...

    def complete(self, controller: str, key: str, claim_token: str, *,
                 outcome: QueueOutcome, delay: float = 0.0,
                 error: str | None = None,
                 events: Sequence[EventSpec] = ()) -> QueueItem | LostRace | None:
        """End a claimed pass. settled: delete the row (or requeue now if dirty);
        requeue: available now; requeue_after/error: available after `delay` (a dirty
        row is available now). `error` increments consecutive_errors; others reset it.
        Returns the remaining row, None when deleted, LostRace when not the holder.
        `events` are recorded in the same transaction, only while the claim holds."""
        ...

    def claim_batch(self, *, runner_id: str, lease_seconds: float, limit: int,
                    controllers: Iterable[str] | None = None,
                    claim_event: Callable[[QueueItem], EventSpec] | None = None
                    ) -> list[ClaimedPass]:
        """Up to `limit` of the oldest available keys claimed in one transaction, as
        `claim_next` claims one, each with its resource read in that transaction and
        `claim_event(item)` recorded for it."""
        ...

    def finish_passes(self, ends: Sequence[PassEnd]) -> list[PassResult]:
        """End several claimed passes in one transaction (a group commit): for each,
        only while its claim holds, the status CAS, its events and its `complete`."""
        ...

    def get(self, controller: str, key: str) -> QueueItem | None: ...

    def list(self, controller: str | None = None) -> list[QueueItem]: ...


class Effects(Protocol):
    def reserve(self, resource_uid: str, effect_key: str, *, generation: int, kind: str,
                request_fingerprint: str) -> Effect:
        """Insert `pending`, or return the existing record; a different fingerprint or
        kind raises IdentityConflict."""
        ...

    def complete(self, resource_uid: str, effect_key: str, *, state: EffectState,
                 external_ref: str | None = None, error: str | None = None) -> Effect | LostRace:
        """pending|indeterminate -> state; applied/rejected are final (LostRace)."""
        ...

    def get(self, resource_uid: str, effect_key: str) -> Effect | None: ...

    def list(self, resource_uid: str) -> list[Effect]: ...


class WorkflowRequests(Protocol):
    def ensure(self, resource_uid: str, request_key: str, *, workflow: str,
               input_fingerprint: str) -> WorkflowRequest:
        """Insert `pending` (attempt 0) or return the existing one; a different
        fingerprint or workflow raises IdentityConflict."""
        ...

    def start_attempt(self, request_id: str, *, expected_attempt: int,
                      run_id: str) -> WorkflowRequest | LostRace:
        """attempt+1 with the new run id, state running; saved before scheduling."""
        ...

    def finish(self, request_id: str, *, attempt: int, state: RequestState,
               error: str | None = None) -> WorkflowRequest | LostRace:
        """Record the outcome of attempt `attempt` (a stale attempt loses)."""
        ...

    def get(self, request_id: str) -> WorkflowRequest | None: ...

    def find_by_run(self, run_id: str) -> WorkflowRequest | None: ...

    def list(self, resource_uid: str | None = None,
             states: Iterable[RequestState] | None = None) -> list[WorkflowRequest]: ...


class ControllerEvents(Protocol):
    def append(self, controller: str, key: str, event_type: str, payload: object = None, *,
               reconcile_id: str | None = None) -> ControllerEvent: ...

    def read(self, *, controller: str | None = None, key: str | None = None,
             after_seq: int = 0, limit: int = 1000) -> list[ControllerEvent]: ...


class ControllerStore(Protocol):
    """What `runner.controllers` needs from the store."""

    @property
    def resources(self) -> Resources: ...

    @property
    def reconcile_queue(self) -> ReconcileQueue: ...

    @property
    def effects(self) -> Effects: ...

    @property
    def workflow_requests(self) -> WorkflowRequests: ...

    @property
    def controller_events(self) -> ControllerEvents: ...

    def now_ms(self) -> int: ...
