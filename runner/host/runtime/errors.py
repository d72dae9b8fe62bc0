"""The one place store errors become `runner.errors` classes (DESIGN §9).

The store keeps its own exception tree so it can import nothing from `runner`;
whatever reaches a user (the CLI boundary, a host's log line) passes through
`translate` and is classified by what the caller should do:

    busy (locked by another process)   TemporaryError   wait, then run it again
    StoreDiskFull                      TemporaryError   free space, then run it again
    other StoreUnavailable             TemporaryError   the file could not be reached
    StoreReadOnly, StoreNoPermission   OperationFailed  make it writable / run as its owner
    StoreCorrupt                       OperationFailed  keep a copy, restore or salvage it
    SqliteTooOld                       OperationFailed  waiting will not help
    IncompatibleLayout                 OperationFailed  keep the bundles, reset the store
    any other StoreError               OperationFailed

Only IncompatibleLayout's message advises `wfrun store reset`; every machine fault's
says what to do without losing a queued launch.

Every class exits 1 ("the operation failed"); bad input (2) and not found (3)
never come from the store, which treats those as programming errors.
"""

from __future__ import annotations

from runner.errors import OperationFailed, TemporaryError, WfrunError
from runner.store.errors import (
    SqliteTooOld,
    StoreError,
    StoreNoPermission,
    StoreReadOnly,
    StoreUnavailable,
    is_busy,
)

BUSY_MESSAGE = "the store is busy (locked by another process); try again"


def translate(exc: BaseException) -> WfrunError | None:
    """`exc` as a WfrunError, or None when it is neither one nor a store error (a bug,
    which the boundary lets through so its traceback is seen)."""
    if isinstance(exc, WfrunError):
        return exc
    if not isinstance(exc, StoreError):
        return None
    translated: WfrunError
    if is_busy(exc):
        translated = TemporaryError(BUSY_MESSAGE)
    elif isinstance(exc, (SqliteTooOld, StoreReadOnly, StoreNoPermission)):
        translated = OperationFailed(exc.message)
    elif isinstance(exc, StoreUnavailable):
        translated = TemporaryError(exc.message)
    else:  # IncompatibleLayout (its message says how to reset), IdentityConflict, ...
        translated = OperationFailed(exc.message)
    translated.__cause__ = exc  # re-raised, it still shows where the store failed
    return translated
