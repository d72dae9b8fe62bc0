"""The durable store (DESIGN §5): launch queue, turn intents, notifications, run events.

One interface (`Store`), the embedded SQLite implementation (`SqliteStore`),
and a conformance suite in tests/integration/store/ for every implementation.
This package imports nothing from runner's other layers (only the root policy
modules and `runner.errors`, whose tree the store's errors belong to).
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
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
    from runner.store._interface import BundleRefused, BundleWrite, InputScrub, Store
    from runner.store._project import ProjectStore
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
    from runner.store.domain._launch_queries import LeaseFence
    from runner.store.sqlite._store import SqliteStore

#: public name -> the submodule that defines it. The names load on first use (PEP 562):
#: `wfrun status` needs the SQLite store and the launch records, not the controller
#: side's records or the Postgres URL rules (issue 34 item 11, cold start).
_LAZY: dict[str, str] = {
    "LaunchBook": "_book",
    "LeaseFence": "domain._launch_queries",
    **dict.fromkeys(("IdentityConflict", "StoreDiskFull", "StoreError", "StoreNoPermission",
                     "StoreReadOnly", "StoreUnavailable", "StoreUnreachable"), "_errors"),
    **dict.fromkeys(("BundleRefused", "BundleWrite", "InputScrub", "Store"), "_interface"),
    "ProjectStore": "_project",
    **dict.fromkeys(("LaunchGate", "LaunchRecord", "LostRace", "NewLaunch", "NewNotification",
                     "NewTurnIntent", "NextClaim", "QueuedSources", "TurnIntent"), "_records"),
    **dict.fromkeys(("LAUNCH_STATUSES", "MAX_ACTIVATION_CRASHES", "TERMINAL_STATUSES",
                     "LaunchErrorCode", "LaunchStatus", "ParkMode", "TurnCause",
                     "TurnResolution"), "_states"),
    "SqliteStore": "sqlite._store",
}



def __getattr__(name: str) -> Any:
    # As runner._lazy.lazy_names does, written out: the store imports no runner module
    # beyond the shared policies that tests/unit/store/test_store_boundaries.py lists.
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    __import__(f"{__name__}.{module}")  # not importlib: `python -X importtime` lists this
    value = getattr(sys.modules[f"{__name__}.{module}"], name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))

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
    "LeaseFence",
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
