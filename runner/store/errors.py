"""The store's own exception tree (it imports nothing from `runner`).

    StoreError                  base of everything the store raises on purpose
    ├── StoreUnavailable        the store cannot be reached or is busy: try again later
    │   └── SqliteTooOld        the SQLite library is older than the store needs
    ├── IncompatibleLayout      the store file has another layout: keep bundles, reset it
    ├── IdentityConflict        an id was reused with different content: a caller bug
    └── InputCleared            the private launch input was already cleared

A *lost race* is not an exception: every conditional update returns a
`LostRace` value instead of changing anything (see `records.LostRace`).
Invalid arguments (unknown status, oversized JSON, non-JSON values) raise
`ValueError`; they are programming errors, not store conditions.

The upper layers map these onto `runner.errors` (for example StoreUnavailable
to TemporaryError, IncompatibleLayout to OperationFailed).
"""

from __future__ import annotations

RESET_INSTRUCTION = (
    "Keep the run bundles you need (.wfrun/runs/), then run `wfrun store reset --yes`."
)


class StoreError(Exception):
    """The durable store failed."""

    def __init__(self, message: str | None = None) -> None:
        super().__init__(message or (self.__doc__ or "").strip())

    @property
    def message(self) -> str:
        return str(self.args[0]) if self.args else ""


class StoreUnavailable(StoreError):
    """The store is unavailable; try again later."""


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


class IdentityConflict(StoreError):
    """The same id was used again with different content."""


class InputCleared(StoreError):
    """The private launch input was cleared when the launch left `queued`/`starting`."""
