"""The store's records (frozen dataclasses) and the canonical JSON codec.

All times are integer milliseconds since the Unix epoch, taken from the clock
the store was given. JSON columns hold canonical JSON (sorted keys, no
whitespace, finite numbers) so identity comparisons are byte comparisons.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Literal

from runner._canonical import canonical_json as _canonical_json
from runner._safety import bound, one_line
from runner.store._errors import InputCleared
from runner.store._states import (
    ERROR_MESSAGE_MAX_BYTES,
    LAUNCH_ERROR_CODES,
    LaunchEnding,
    LaunchErrorCode,
    LaunchStatus,
    NotificationKind,
    ParkMode,
    TurnCause,
    TurnResolution,
)

#: A decoded JSON value.
Json = Any

INPUT_MAX_BYTES = 1024 * 1024
PAYLOAD_MAX_BYTES = 64 * 1024
#: Byte bound of one cached node output (`step_cache`); a larger one is not cached.
CACHE_MAX_BYTES = 1024 * 1024


def canonical_json(value: object, *, what: str = "value", max_bytes: int = INPUT_MAX_BYTES) -> str:
    """Encode `value` as canonical JSON (`runner._canonical`), refusing non-JSON values
    and oversized text."""
    try:
        text = _canonical_json(value)
    except ValueError as exc:
        raise ValueError(f"{what} is {exc}") from None
    size = len(text.encode("utf-8"))
    if size > max_bytes:
        raise ValueError(f"{what} is {size} bytes of JSON; the limit is {max_bytes}")
    return text


def json_object(value: object, *, what: str, max_bytes: int = INPUT_MAX_BYTES) -> str:
    """Canonical JSON of a mapping with string keys."""
    if not isinstance(value, Mapping):
        raise ValueError(f"{what} must be a JSON object")
    return canonical_json(value, what=what, max_bytes=max_bytes)


def bounded_message(message: str, max_bytes: int = ERROR_MESSAGE_MAX_BYTES) -> str:
    """One line of at most `max_bytes` UTF-8 bytes, cut at a character boundary.

    Only bounds: callers redact (`runner._safety.safe_message`) before the store."""
    return bound(one_line(message), max_bytes)


#: A fresh, unguessable claim token (`secrets` itself: no frame of ours per claim).
new_claim_token: Callable[[], str] = partial(secrets.token_hex, 16)


def lease_ms(lease_seconds: float) -> int:
    """A lease duration in whole milliseconds (at least 1)."""
    if not lease_seconds > 0:
        raise ValueError(f"a lease must be positive, got {lease_seconds!r}")
    return max(1, round(lease_seconds * 1000))


def check_id(value: object, what: str) -> str:
    """A non-empty, single-line id string."""
    if not isinstance(value, str) or not value or len(value) > 512 or not value.isprintable():
        raise ValueError(f"{what} must be 1-512 printable characters, got {value!r}")
    return value


def check_error_code(code: str) -> LaunchErrorCode:
    for known in LAUNCH_ERROR_CODES:
        if code == known:
            return known
    raise ValueError(f"unknown launch error code {code!r}; use one of {LAUNCH_ERROR_CODES}")


# --- results -------------------------------------------------------------------

LostReason = Literal[
    "not_found",  # no row with that id
    "wrong_status",  # the row is not in a status the operation starts from
    "token_mismatch",  # another claim token holds the row (or none does)
    "lease_expired",  # the caller's lease ran out
    "lease_active",  # another claim's lease has not expired
    "epoch_mismatch",  # the row was reclaimed since the caller looked
    "already_exists",  # the id is taken
    "session_reserved",  # the origin session already has a queued/starting/running launch
    "continuation_exists",  # the parent run already has a continuation
    "intent_pending",  # another pending turn intent exists for (run, session)
    "not_eligible",  # the turn intent is not eligible for delivery yet
    "delivery_claimed",  # someone else holds an unexpired delivery claim
    "version_mismatch",  # the resource_version moved since the caller read it
    "not_deleting",  # delete() before request_deletion()
    "finalizers_pending",  # delete() while finalizers remain
    "stale_attempt",  # a workflow request attempt that is no longer current
    "gate_shut",  # a launch's flow-control gate (concurrency, rate limit) is shut
]


@dataclass(frozen=True, slots=True)
class QueuedSources:
    """The detached queued launches that share one source identity (what a host's
    source watch reads: flat in the number of launches, `LaunchQueue.queued_sources`)."""

    source_json: str  # `workflow_source_json`, as stored
    launches: int
    first_run_id: str  # the least run id of them (one to name in a message)


@dataclass(frozen=True, slots=True)
class LostRace:
    """A conditional update that did not apply; nothing was changed.

    `key` names the row (run id, intent id, notification id), `status` is the
    state found (None when the row is missing) and `holder` the id of the row
    that won, when another row did (a session reservation, a continuation).
    """

    key: str
    reason: LostReason
    status: str | None = None
    holder: str | None = None


# --- launches ------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class LaunchGate:
    """When a launch may start (DESIGN §10 flow control, `launch_gates`): at most
    `concurrency_limit` claimed runs per `concurrency_key`, at most `rate_limit`
    starts per `rate_key` in any `rate_per_ms`. A gated launch is not claimable
    (it holds no host slot) until its gate opens."""

    concurrency_key: str | None = None
    concurrency_limit: int | None = None
    strategy: str | None = None
    rate_key: str | None = None
    rate_limit: int | None = None
    rate_per_ms: int | None = None


@dataclass(frozen=True, slots=True)
class NewLaunch:
    """A launch to enqueue as `queued` (seed 000, "Storage contract")."""

    run_id: str
    workflow_ref: str
    source: Mapping[str, object]
    definition_digest: str
    input: object
    options: Mapping[str, object] | None = None
    workflow_path: str | None = None
    origin_session_id: str | None = None
    parent_run_id: str | None = None
    affinity_runner_id: str | None = None
    gate: LaunchGate | None = None


@dataclass(frozen=True, slots=True)
class LaunchRecord:
    """One row of `workflow_run_queue`."""

    run_id: str
    workflow_ref: str
    workflow_path: str | None
    source: dict[str, Json]
    definition_digest: str
    input_json: str | None
    options_json: str | None
    status: LaunchStatus
    runner_id: str | None
    claim_token: str | None
    claim_expires_at: int | None
    epoch: int
    affinity_runner_id: str | None
    origin_session_id: str | None
    parent_run_id: str | None
    error_code: LaunchErrorCode | None
    error_message: str | None
    created_at: int
    updated_at: int
    started_at: int | None
    finished_at: int | None
    park_mode: ParkMode | None = None
    crash_count: int = 0
    ending: LaunchEnding | None = None

    @property
    def input_cleared(self) -> bool:
        return self.input_json is None

    def input(self) -> Json:
        """The private launch input; raises InputCleared once it was cleared."""
        if self.input_json is None:
            raise InputCleared(f"the input of launch {self.run_id} was cleared")
        return json.loads(self.input_json)

    def options(self) -> dict[str, Json] | None:
        """The private launch options (None when absent or cleared)."""
        if self.options_json is None:
            return None
        value: dict[str, Json] = json.loads(self.options_json)
        return value

    def lease_live(self, now_ms: int) -> bool:
        return self.claim_expires_at is not None and self.claim_expires_at > now_ms


@dataclass(slots=True)
class NextClaim:
    """A claim of the next launch, asked of the transition that records a run's
    ending (`finish`, `fail`, the holder's `cancel`): a host slot that frees up takes
    its next launch in the same commit instead of one of its own. After a commit,
    `record` is the launch claimed (as `claim_next` would have claimed it), or None
    when nothing was claimable or the transition did not commit."""

    runner_id: str
    lease_seconds: float
    session_id: str | None = None
    record: LaunchRecord | None = None


# --- turn intents --------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class NewTurnIntent:
    """A deferred model turn for a session, with a deterministic id from the caller."""

    intent_id: str
    source_event_id: str
    run_id: str
    workflow_ref: str
    target_session_id: str
    cause: TurnCause
    fallback_facts: Mapping[str, object] = field(default_factory=dict)
    node_id: str | None = None
    attempt_id: str | None = None
    eligible: bool = False


@dataclass(frozen=True, slots=True)
class TurnIntent:
    """One row of `workflow_turn_intents`."""

    intent_id: str
    source_event_id: str
    run_id: str
    workflow_ref: str
    target_session_id: str
    cause: TurnCause
    node_id: str | None
    attempt_id: str | None
    fallback_facts: dict[str, Json]
    requested_at: int
    eligible_at: int | None
    resolved_at: int | None
    resolution: TurnResolution | None
    resolution_message_id: str | None
    delivery_claim_token: str | None
    delivery_claim_expires_at: int | None

    @property
    def pending(self) -> bool:
        return self.resolved_at is None

    @property
    def eligible(self) -> bool:
        return self.eligible_at is not None and self.resolved_at is None


# --- notifications -------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class NewNotification:
    """A passive progress/final report for a run's origin session."""

    notification_id: str
    run_id: str
    node_id: str
    attempt_id: str
    notification_index: int
    target_session_id: str
    kind: NotificationKind
    content: str


@dataclass(frozen=True, slots=True)
class Notification:
    """One row of `workflow_notifications`."""

    notification_id: str
    run_id: str
    node_id: str
    attempt_id: str
    notification_index: int
    target_session_id: str
    kind: NotificationKind
    content: str
    created_at: int
    delivery_claim_token: str | None
    delivery_claim_expires_at: int | None
    delivered_at: int | None

    @property
    def delivered(self) -> bool:
        return self.delivered_at is not None


# --- run events ----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RunEvent:
    """One row of `run_events`, the append-only audit feed."""

    seq: int
    recorded_at: int
    run_id: str
    workflow_ref: str | None
    type: str
    runner_id: str | None
    payload: dict[str, Json]


@dataclass(frozen=True, slots=True)
class AuditEntry:
    """One row of `audit_log`."""

    seq: int
    recorded_at: int
    actor: str
    action: str
    run_id: str | None
    workflow_ref: str | None
    origin: str | None
    outcome: str
    detail: dict[str, Any]

    def to_json(self) -> dict[str, Any]:
        return {"seq": self.seq, "recorded_at": self.recorded_at, "actor": self.actor,
                "action": self.action, "run_id": self.run_id,
                "workflow": self.workflow_ref, "origin": self.origin,
                "outcome": self.outcome, "detail": self.detail}


@dataclass(frozen=True, slots=True)
class Delivery:
    """One row of `notification_deliveries`: a notification on its way to a channel."""

    notification_id: str
    channel: str
    run_id: str
    node_id: str
    kind: str
    message: str
    status: str
    attempts: int
    next_attempt_at: int
    last_error: str | None
    claim_token: str | None
    claim_expires_at: int | None
    created_at: int
    delivered_at: int | None
