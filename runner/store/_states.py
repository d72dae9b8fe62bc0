"""The state contract of the store: launch statuses, transitions, codes and causes.

Everything here is data. The SQL of every backend is built from these tables
(the CHECK constraints and the `WHERE status IN (...)` guards), so the contract
lives in one place and a test compares it with the seed (seeds/000, "State
transitions").

Launch statuses (`workflow_run_queue.status`):

    queued -> starting -> running -> parked | done | failed | cancelled
                 \\-> failed | cancelled | queued (expired lease, no bundle)
    parked -> starting (explicit resume) | cancelled

A claim holder may also *reclaim* an expired `starting` or `running` row: the
status stays, a new token is installed and the claim epoch is bumped. That is not
a transition (the status does not change), so it is not in the table.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal, get_args

LaunchStatus = Literal["queued", "starting", "running", "parked", "done", "failed", "cancelled"]
LAUNCH_STATUSES: tuple[LaunchStatus, ...] = get_args(LaunchStatus)

#: Statuses that hold the one-launch-per-origin-session reservation.
RESERVING_STATUSES: tuple[LaunchStatus, ...] = ("queued", "starting", "running")
#: Statuses in which a claim (token + lease) exists.
CLAIMED_STATUSES: tuple[LaunchStatus, ...] = ("starting", "running")
#: Statuses in which the private launch input and options may still be stored.
INPUT_STATUSES: tuple[LaunchStatus, ...] = ("queued", "starting")
TERMINAL_STATUSES: tuple[LaunchStatus, ...] = ("done", "failed", "cancelled")
#: Statuses a claim may take a launch from (queued, parked, or a claim whose lease ran
#: out): every status but the terminal ones, in the claim order's index.
READY_STATUSES: tuple[LaunchStatus, ...] = ("queued", "parked", "starting", "running")

#: The only valid launch transitions, exactly as seeds/000 lists them.
LAUNCH_TRANSITIONS: frozenset[tuple[LaunchStatus, LaunchStatus]] = frozenset(
    {
        ("queued", "starting"),
        ("queued", "cancelled"),
        ("starting", "running"),
        ("starting", "failed"),
        ("starting", "cancelled"),
        ("starting", "queued"),  # expired lease with no run bundle
        ("running", "parked"),
        ("running", "done"),
        ("running", "failed"),
        ("running", "cancelled"),
        ("parked", "starting"),  # explicit resume
        ("parked", "cancelled"),
    }
)


def is_valid_transition(current: LaunchStatus, target: LaunchStatus) -> bool:
    """True when `current -> target` is one of the seed's launch transitions."""
    return (current, target) in LAUNCH_TRANSITIONS


@dataclass(frozen=True, slots=True)
class Operation:
    """One conditional update: the statuses it may start from and where it goes.

    `needs_claim` operations also require the matching claim token and an
    unexpired lease; the others are guarded by the expected status alone.
    """

    name: str
    sources: tuple[LaunchStatus, ...]
    target: LaunchStatus
    needs_claim: bool


#: Every launch operation of the store, by name. Backends build their guards from
#: this table; `tests/unit/store` checks that each pair is a valid transition.
LAUNCH_OPERATIONS: Mapping[str, Operation] = {
    op.name: op
    for op in (
        Operation("claim", ("queued", "parked"), "starting", needs_claim=False),
        Operation("mark_running", ("starting",), "running", needs_claim=True),
        Operation("park", ("running",), "parked", needs_claim=True),
        Operation("finish", ("running",), "done", needs_claim=True),
        Operation("fail", ("starting", "running"), "failed", needs_claim=True),
        # Cancellation by a user or model: no claim needed, beats activation.
        Operation("cancel", ("queued", "starting", "parked"), "cancelled", needs_claim=False),
        # Cancellation recorded by the claim holder (the engine honoured a cancel).
        Operation("cancel_claimed", ("starting", "running"), "cancelled", needs_claim=True),
        # The claim holder could not write the run bundle (a full or read-only disk):
        # nothing began, so the launch goes back to the queue, input kept.
        Operation("release", ("starting",), "queued", needs_claim=True),
    )
}

#: Recovery of a `starting` row whose lease expired, by what the run bundle shows
#: (seeds/000, "When recovery finds starting after a lease expires"). Each outcome
#: is reached through valid transitions only, applied in one transaction: a
#: waiting bundle reconciles `starting -> running -> parked`, a completed bundle
#: `starting -> running -> done`.
RecoveryOutcome = Literal["queued", "running", "parked", "done", "failed", "cancelled"]
RECOVERY_PATHS: Mapping[RecoveryOutcome, tuple[LaunchStatus, ...]] = {
    "queued": ("starting", "queued"),  # no run bundle
    "running": ("starting", "running"),  # valid running bundle; claim stays expired
    "parked": ("starting", "running", "parked"),  # waiting bundle
    "done": ("starting", "running", "done"),  # terminal bundle that completed
    "failed": ("starting", "failed"),  # failed bundle, changed source, unreadable bundle
    "cancelled": ("starting", "cancelled"),  # cancelled bundle
}

#: Stable startup failure codes (DESIGN §6).
LaunchErrorCode = Literal[
    "workflow_not_found",
    "workflow_invalid",
    "input_invalid",
    "source_changed",
    "store_unavailable",
    "activation_failed",
    "cancelled",
    # A run that started and then ended badly (the launch row ends `failed` too, so
    # queue counts tell the truth; the bundle has the details).
    "run_failed",
    "run_timed_out",
    "interrupted",  # killed mid-node more often than the attempt budget allows
]
LAUNCH_ERROR_CODES: tuple[LaunchErrorCode, ...] = get_args(LaunchErrorCode)
#: Byte bound of a persisted launch error message (UTF-8).
ERROR_MESSAGE_MAX_BYTES = 500

#: How a parked launch may be resumed: `auto` (parked by a host shutdown; the next
#: host resumes it) or `explicit` (parked by a person, a session shutdown or a lost
#: claim; it resumes only when asked: `wfrun resume`, the `resume` tool action) or
#: `paused` (`wfrun pause`, from any process or host: no host claims it until `wfrun
#: unpause` makes it `auto`; the run views call it paused).
ParkMode = Literal["auto", "explicit", "paused"]
PARK_MODES: tuple[ParkMode, ...] = get_args(ParkMode)

#: How a `done` launch's run ended: its bundle `completed`, or it is `waiting` for an
#: answer (a `wfrun answer` continues it as a new run). Kept on the row so run lists
#: page by it in SQL; NULL for every other status.
LaunchEnding = Literal["completed", "waiting"]
LAUNCH_ENDINGS: tuple[LaunchEnding, ...] = get_args(LaunchEnding)

#: The affinity of a session's launch that its session handed over when it ended
#: (`Launches.hand_over`): any host may take it, and so may the session itself when
#: it starts again. Not a runner id (no host is named `wfrun:handed-over`).
HANDED_OVER = "wfrun:handed-over"

#: A claim taken over from a dead runner counts as a crash; this many in a row
#: without reaching `running` (or a clean park) make the launch a poison launch,
#: failed instead of activated again.
MAX_ACTIVATION_CRASHES = 3

#: Why a turn intent exists (pi-workflows §7, in snake_case).
TurnCause = Literal[
    "agent_cancelled",
    "timed_out",
    "failed",
    "launch_failed",
    "controller_interrupted",
    "claim_lost",
    "presentation",  # a session run ended with a closing presentation to deliver
]
TURN_CAUSES: tuple[TurnCause, ...] = get_args(TurnCause)

#: How a turn intent was resolved.
TurnResolution = Literal["workflow_prompt", "presentation", "fallback"]
TURN_RESOLUTIONS: tuple[TurnResolution, ...] = get_args(TurnResolution)

#: Passive reports to a run's origin session. Launch failures are turn intents.
NotificationKind = Literal["progress", "final"]
NOTIFICATION_KINDS: tuple[NotificationKind, ...] = get_args(NotificationKind)

#: What an operator did through the HTTP API (`audit_log`), and how it ended.
AuditAction = Literal["start", "cancel", "pause", "unpause", "rerun", "answer"]
AUDIT_ACTIONS: tuple[AuditAction, ...] = get_args(AuditAction)
AuditOutcome = Literal["ok", "failed"]
AUDIT_OUTCOMES: tuple[AuditOutcome, ...] = get_args(AuditOutcome)
#: Byte bound of an audit row's detail (the request's parameters, never input values).
AUDIT_DETAIL_MAX_BYTES = 4096

#: A notification's delivery to one configured channel (`notification_deliveries`).
DeliveryStatus = Literal["pending", "delivered", "failed"]
DELIVERY_STATUSES: tuple[DeliveryStatus, ...] = get_args(DeliveryStatus)
#: Byte bound of a delivery's message (a `notify` message, masked) and its last error.
DELIVERY_MESSAGE_MAX_BYTES = 64 * 1024

#: Controller-side state sets (DESIGN §7; the records live in controller_interface.py).
EffectState = Literal["pending", "applied", "rejected", "indeterminate"]
EFFECT_STATES: tuple[EffectState, ...] = get_args(EffectState)
WorkflowRequestState = Literal[
    "pending", "running", "waiting", "succeeded", "failed", "interrupted"
]
WORKFLOW_REQUEST_STATES: tuple[WorkflowRequestState, ...] = get_args(WorkflowRequestState)
#: Child workflow request states that end an attempt (a new attempt may follow
#: `interrupted` only).
REQUEST_FINISHED_STATES: tuple[WorkflowRequestState, ...] = ("succeeded", "failed", "interrupted")
#: Byte bound of a persisted controller error (queue, effect, request, event payload).
CONTROLLER_ERROR_MAX_BYTES = 8192
#: Byte bounds of a controller resource's spec and status (canonical JSON).
SPEC_MAX_BYTES = 256 * 1024
STATUS_MAX_BYTES = 64 * 1024


def recovery_transitions(outcome: RecoveryOutcome) -> list[tuple[LaunchStatus, LaunchStatus]]:
    """The consecutive transitions a recovery outcome walks through."""
    path = RECOVERY_PATHS[outcome]
    return list(itertools.pairwise(path))

#: What became of a trigger's firing (DESIGN §10, store/domain/_triggers.py): `pending`
#: is claimed and not yet queued (or waiting for the run before it: `overlap: queue`).
FIRING_OUTCOMES: tuple[str, ...] = ("pending", "launched", "skipped", "missed", "failed")
#: A debounced delivery's event kept on its firing until the batch fires (a webhook
#: body is at most 1 MiB; headers and the id fit in the rest).
EVENT_MAX_BYTES = 2 * 1024 * 1024

#: A fan-out branch or item (`fanout_items.state`, ADR 0008): `pending` until a holder
#: of its parent claims it, `running` under that claim, then one ending.
ItemState = Literal["pending", "running", "ok", "failed", "timed_out", "cancelled"]
ITEM_STATES: tuple[ItemState, ...] = get_args(ItemState)
ITEM_OPEN_STATES: tuple[ItemState, ...] = ("pending", "running")
ITEM_ENDINGS: tuple[ItemState, ...] = ("ok", "failed", "timed_out", "cancelled")
