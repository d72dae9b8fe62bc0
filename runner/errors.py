"""The exception tree, classified by what the caller should do.

    WfrunError                 base of everything wfrun raises on purpose
    ├── InputError             the caller passed something wrong: fix the input (exit 2)
    │   └── NotFoundError      a named run, workflow or resource does not exist (exit 3)
    ├── OperationFailed        the operation ran and failed: inspect, then retry (exit 1)
    │   ├── DefinitionInvalid  a definition has diagnostics: fix the file (exit 1)
    │   └── PermanentError     retrying cannot help: stop until the input changes
    ├── TemporaryError         try again later, after `delay` seconds (exit 1)
    │   └── ClaimLost          another worker owns this claim now: stop writing
    └── ConflictError          the state changed underneath: re-read and decide again

Messages are one line, safe to show, and say what to fix. This module imports
nothing so every layer may use it.

A reconciler steers its own retries with these (as in kopf): `TemporaryError(msg,
delay=N)` is retried after exactly N seconds, `PermanentError` is not retried until
the resource changes or is woken again, anything else backs off exponentially.
The store keeps its own tree (`runner.store.errors`); `runner.host.runtime.errors` maps it
onto this one wherever an error reaches a user.
"""

from __future__ import annotations


class WfrunError(Exception):
    """Something went wrong in wfrun."""

    exit_code = 1

    def __init__(self, message: str | None = None) -> None:
        super().__init__(message or (self.__doc__ or "").strip())

    @property
    def message(self) -> str:
        return str(self.args[0]) if self.args else ""


class InputError(WfrunError):
    """The input is not valid; fix it and try again."""

    exit_code = 2


class NotFoundError(InputError):
    """Nothing with that name exists."""

    exit_code = 3


class OperationFailed(WfrunError):
    """The operation failed."""

    exit_code = 1


class DefinitionInvalid(OperationFailed):
    """The definition has errors; run `wfrun validate` to see them."""


class PermanentError(OperationFailed):
    """A failure that retrying cannot fix; nothing is retried until the input changes."""


class TemporaryError(WfrunError):
    """A temporary problem; try again later."""

    exit_code = 1

    def __init__(self, message: str | None = None, delay: float = 1.0) -> None:
        super().__init__(message)
        self.delay = delay


class ClaimLost(TemporaryError):
    """The claim on this work expired or was taken over; stop writing."""


class ConflictError(WfrunError):
    """The state changed underneath the operation; re-read and try again."""
