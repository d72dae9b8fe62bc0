"""What a store error asks of its caller, in one table (DESIGN §9).

Every store error is a `WfrunError` (`runner.store._errors`), so any boundary prints
it as its one line. Callers that steer by the caller-side class (a session's
`try_again` code, the web view's status, the CLI's busy message) read it from
`STORE_ERRORS`, first match wins:

    busy (locked by another process)   TemporaryError   wait, then run it again
    StoreReadOnly, StoreNoPermission   OperationFailed  make it writable / run as its owner
    SqliteTooOld                       OperationFailed  waiting will not help
    StoreUnavailable (full, unreachable, ...)  TemporaryError   try again later
    StoreError (corrupt, layout, ...)  OperationFailed  keep a copy; restore, salvage or reset

Only IncompatibleLayout's message advises `wfrun store reset`; every machine fault's
says what to do without losing a queued launch.

Every class exits 1 ("the operation failed"); bad input (2) and not found (3)
never come from the store, which treats those as programming errors.
"""

from __future__ import annotations

from runner.errors import OperationFailed, TemporaryError, WfrunError
from runner.store._errors import (
    SqliteTooOld,
    StoreError,
    StoreNoPermission,
    StoreReadOnly,
    StoreUnavailable,
    is_busy,
)

BUSY_MESSAGE = "the store is busy (locked by another process); try again"

#: Store class -> the class its caller should treat it as; first match wins, so a
#: subclass is listed before its base.
STORE_ERRORS: tuple[tuple[type[StoreError], type[WfrunError]], ...] = (
    (SqliteTooOld, OperationFailed),
    (StoreReadOnly, OperationFailed),
    (StoreNoPermission, OperationFailed),
    (StoreUnavailable, TemporaryError),
    (StoreError, OperationFailed),
)


def translate(exc: BaseException) -> WfrunError | None:
    """`exc` as the caller-side WfrunError: a store error as the class `STORE_ERRORS`
    names (one busy message for every lock), any other WfrunError as it is, None for
    anything else (a bug, which the boundary lets through so its traceback is seen)."""
    if not isinstance(exc, WfrunError):
        return None
    if not isinstance(exc, StoreError):
        return exc
    if is_busy(exc):
        translated: WfrunError = TemporaryError(BUSY_MESSAGE)
    else:
        kind = next(kind for store_kind, kind in STORE_ERRORS if isinstance(exc, store_kind))
        translated = kind(exc.message)
    translated.__cause__ = exc  # re-raised, it still shows where the store failed
    return translated
