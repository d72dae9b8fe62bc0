"""The store's branch of wfrun's one exception tree (`runner.errors`).

    WfrunError
    └── StoreError              base of everything the store raises on purpose
        ├── StoreUnavailable    the store cannot be used now: try again later
        │   ├── StoreUnreachable  the database went away (a restart, a network blip,
        │   │                     a failing disk): a run lets go, a write is retried
        │   ├── StoreBusy       another connection holds the lock past the busy timeout
        │   ├── StoreDiskFull   no space left on its device: free space, run it again
        │   ├── StoreReadOnly   its file system or folder is read-only: make it writable
        │   ├── StoreNoPermission  this user may not read or write it: run as its owner
        │   └── SqliteTooOld    the SQLite library is older than the store needs
        ├── StoreCorrupt        the file is damaged: keep a copy, restore or salvage it
        ├── IncompatibleLayout  a readable store with another layout: keep bundles, reset it
        ├── IdentityConflict    an id was reused with different content: a caller bug
        └── InputCleared        the private launch input was already cleared

Every class is a `WfrunError` (exit code 1, a one-line message), so a boundary that
catches wfrun's errors catches the store's; the store imports nothing else from
`runner`. Code that waits out a database that went away catches `StoreUnreachable`,
never a check of the exact class: the machine faults beside it (full, read-only,
forbidden) are not blips and are held, not retried.

Only IncompatibleLayout advises `wfrun store reset`: it follows a layout the store
read completely and found different. A damaged, full, read-only, locked or
forbidden file is a machine fault whose advice loses nothing (reset would delete
every queued launch); `runner.store._faults` tells them apart by SQLite's result
code and errno, never by message text.

A *lost race* is not an exception: every conditional update returns a
`LostRace` value instead of changing anything (see `records.LostRace`).
Invalid arguments (unknown status, oversized JSON, non-JSON values) raise
`ValueError`; they are programming errors, not store conditions.

Where a caller needs the caller-side class (a session's `try_again` code, the web
view's status), `runner.host.runtime._errors.translate` looks it up in one table
(busy, full, unreachable -> TemporaryError; the rest -> OperationFailed).
"""

from __future__ import annotations

from runner.errors import WfrunError

RESET_INSTRUCTION = (
    "Keep the run bundles you need (.wfrun/runs/), then run `wfrun store reset --yes`."
)


class StoreError(WfrunError):
    """The durable store failed."""


class StoreUnavailable(StoreError):
    """The store is unavailable; try again later."""


class StoreUnreachable(StoreUnavailable):
    """The database cannot be reached (a restart, a network blip); try again."""


class StoreBusy(StoreUnavailable):
    """The store is busy (locked by another process); try again."""


class SqliteTooOld(StoreUnavailable):
    """The SQLite library is too old for the store (3.35 or newer is needed)."""


class IncompatibleLayout(StoreError):
    """The store has an incompatible layout."""

    def __init__(self, location: str, detail: str) -> None:
        self.location = location
        self.detail = " ".join(detail.split())
        super().__init__(
            f"incompatible store layout at {location}: {self.detail}. {RESET_INSTRUCTION}"
        )


class StoreDiskFull(StoreUnavailable):
    """No space is left on the device holding the store; free some, then try again."""


class StoreReadOnly(StoreUnavailable):
    """The store is on a read-only file system or folder; make it writable."""


class StoreNoPermission(StoreUnavailable):
    """This user may not read or write the store; run wfrun as the project's owner."""


class StoreCorrupt(StoreError):
    """The store file is damaged; keep a copy, then restore or salvage it."""


class IdentityConflict(StoreError):
    """The same id was used again with different content."""


class InputCleared(StoreError):
    """The private launch input was cleared when the launch left `queued`/`starting`."""


# SQLite's primary result codes for "someone else holds the lock" (sqlite3.h).
_SQLITE_BUSY = 5
_SQLITE_LOCKED = 6


def is_busy(exc: BaseException) -> bool:
    """True when `exc` means another connection held the lock longer than the busy
    timeout: a StoreBusy, or a StoreUnavailable raised while handling SQLITE_BUSY or
    SQLITE_LOCKED. The error code is read from the sqlite3 error the store translated
    (kept as `__context__` even under `raise ... from None`), never from message text."""
    if isinstance(exc, StoreBusy):
        return True
    if not isinstance(exc, StoreUnavailable):
        return False
    code = getattr(exc.__context__, "sqlite_errorcode", None)
    return isinstance(code, int) and (code & 0xFF) in (_SQLITE_BUSY, _SQLITE_LOCKED)
