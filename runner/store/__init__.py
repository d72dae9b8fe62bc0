"""The durable store (DESIGN §5): launch queue, turn intents, notifications, run events.

One interface (`Store`), the embedded SQLite implementation (`SqliteStore`),
and a conformance suite in tests/integration/store/ for every implementation.
This package imports nothing from runner's other layers (only the root policy
modules and `runner.errors`, whose tree the store's errors belong to).
"""

from __future__ import annotations

from runner.store._book import LaunchBook
from runner.store._errors import (
    IdentityConflict,
    StoreDiskFull,
    StoreError,
    StoreNoPermission,
    StoreReadOnly,
    StoreUnavailable,
    StoreUnreachable,
)
from runner.store._interface import BundleRefused, BundleWrite, InputScrub, ProjectStore, Store
from runner.store._records import (
    LaunchGate,
    LaunchRecord,
    LostRace,
    NewLaunch,
    NewNotification,
    NewTurnIntent,
    NextClaim,
    QueuedSources,
    TurnIntent,
)
from runner.store._states import (
    LAUNCH_STATUSES,
    MAX_ACTIVATION_CRASHES,
    TERMINAL_STATUSES,
    LaunchErrorCode,
    LaunchStatus,
    ParkMode,
    TurnCause,
    TurnResolution,
)
from runner.store.sqlite._store import SqliteStore

__all__ = [
    "LAUNCH_STATUSES",
    "MAX_ACTIVATION_CRASHES",
    "TERMINAL_STATUSES",
    "BundleRefused",
    "BundleWrite",
    "IdentityConflict",
    "InputScrub",
    "LaunchBook",
    "LaunchErrorCode",
    "LaunchGate",
    "LaunchRecord",
    "LaunchStatus",
    "LostRace",
    "NewLaunch",
    "NewNotification",
    "NewTurnIntent",
    "NextClaim",
    "ParkMode",
    "ProjectStore",
    "QueuedSources",
    "SqliteStore",
    "Store",
    "StoreDiskFull",
    "StoreError",
    "StoreNoPermission",
    "StoreReadOnly",
    "StoreUnavailable",
    "StoreUnreachable",
    "TurnCause",
    "TurnIntent",
    "TurnResolution",
    ]
