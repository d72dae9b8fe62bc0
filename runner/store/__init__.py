"""The durable store (DESIGN §5): launch queue, turn intents, notifications, run events.

One interface (`Store`), the embedded SQLite implementation (`SqliteStore`),
and a conformance suite in tests/integration/store/ for every implementation.
This package imports nothing from the rest of `runner`.
"""

from __future__ import annotations

from runner.store.errors import (
    RESET_INSTRUCTION,
    IdentityConflict,
    IncompatibleLayout,
    InputCleared,
    SqliteTooOld,
    StoreError,
    StoreUnavailable,
)
from runner.store.interface import (
    DEFAULT_LEASE_SECONDS,
    LaunchQueue,
    Notifications,
    RunEvents,
    Store,
    TurnIntents,
)
from runner.store.layout import SCHEMA_ID, TABLE_COLUMNS, TABLES
from runner.store.records import (
    LaunchRecord,
    LostRace,
    LostReason,
    NewLaunch,
    NewNotification,
    NewTurnIntent,
    Notification,
    RunEvent,
    TurnIntent,
)
from runner.store.sqlite_store import SqliteStore
from runner.store.states import (
    LAUNCH_ERROR_CODES,
    LAUNCH_OPERATIONS,
    LAUNCH_STATUSES,
    LAUNCH_TRANSITIONS,
    MAX_ACTIVATION_CRASHES,
    PARK_MODES,
    RECOVERY_PATHS,
    TERMINAL_STATUSES,
    LaunchErrorCode,
    LaunchStatus,
    NotificationKind,
    ParkMode,
    RecoveryOutcome,
    TurnCause,
    TurnResolution,
    is_valid_transition,
)

__all__ = [
    "DEFAULT_LEASE_SECONDS",
    "LAUNCH_ERROR_CODES",
    "LAUNCH_OPERATIONS",
    "LAUNCH_STATUSES",
    "LAUNCH_TRANSITIONS",
    "MAX_ACTIVATION_CRASHES",
    "PARK_MODES",
    "RECOVERY_PATHS",
    "RESET_INSTRUCTION",
    "SCHEMA_ID",
    "TABLES",
    "TABLE_COLUMNS",
    "TERMINAL_STATUSES",
    "IdentityConflict",
    "IncompatibleLayout",
    "InputCleared",
    "LaunchErrorCode",
    "LaunchQueue",
    "LaunchRecord",
    "LaunchStatus",
    "LostRace",
    "LostReason",
    "NewLaunch",
    "NewNotification",
    "NewTurnIntent",
    "Notification",
    "NotificationKind",
    "Notifications",
    "ParkMode",
    "RecoveryOutcome",
    "RunEvent",
    "RunEvents",
    "SqliteStore",
    "SqliteTooOld",
    "Store",
    "StoreError",
    "StoreUnavailable",
    "TurnCause",
    "TurnIntent",
    "TurnIntents",
    "TurnResolution",
    "is_valid_transition",
]
