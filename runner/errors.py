"""The exception tree, classified by what the caller should do.

    WfrunError                 base of everything wfrun raises on purpose
    ├── InputError             the caller passed something wrong: fix the input (exit 2)
    │   └── NotFoundError      a named run, workflow or resource does not exist (exit 3)
    ├── OperationFailed        the operation ran and failed: inspect, then retry (exit 1)
    │   ├── DefinitionInvalid  a definition has diagnostics: fix the file (exit 1)
    │   └── PermanentError     retrying cannot help: stop until the input changes
    ├── TemporaryError         try again later, after `delay` seconds (exit 1)
    │   ├── ClaimLost          another worker owns this claim now: stop writing
    │   └── MachineFault       the disk is full, read-only or forbidden: fix it, run again
    ├── ConflictError          the state changed underneath: re-read and decide again
    └── StoreError             the durable store failed (its branch: runner.store._errors)

Messages are one line, safe to show, and say what to fix. This module imports
nothing so every layer may use it.

A reconciler steers its own retries with these (as in kopf): `TemporaryError(msg,
delay=N)` is retried after exactly N seconds, `PermanentError` is not retried until
the resource changes or is woken again, anything else backs off exponentially.
The store's branch lives beside the store (`runner.store._errors`, which imports this
module); `runner.host.runtime._errors.STORE_ERRORS` says which of the classes above
each store error asks its caller to treat it as (busy -> TemporaryError, ...).
"""

from __future__ import annotations

import errno


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


class MachineFault(TemporaryError):
    """The machine refused a write (disk full, read-only, no permission); nothing was lost."""

    def __init__(self, problem: str, todo: str) -> None:
        super().__init__(f"{problem}; {todo}, then run it again")
        self.problem = problem  # "cannot write X: no space left on the device"
        self.todo = todo  # "free some space"


# What each refusal asks of the user; every other errno is not a machine fault.
_FAULT_ADVICE = {
    errno.ENOSPC: ("no space left on the device", "free some space"),
    errno.EDQUOT: ("the disk quota is used up", "free some space or raise the quota"),
    errno.EROFS: ("the file system is read-only", "make it writable"),
    errno.EACCES: ("permission denied", "run wfrun as the project's owner or fix its modes"),
    errno.EPERM: ("operation not permitted", "run wfrun as the project's owner"),
}


def machine_fault(exc: BaseException, writing: str) -> MachineFault | None:
    """An OSError of a full, read-only or forbidden file system as a MachineFault
    naming what was being written (`writing`) and what to do; None for anything else."""
    if not isinstance(exc, OSError) or exc.errno not in _FAULT_ADVICE:
        return None
    what, todo = _FAULT_ADVICE[exc.errno]
    return MachineFault(f"cannot write {exc.filename or writing}: {what}", todo)


def os_fault(exc: OSError) -> MachineFault | None:
    """Any file access the machine refused, met where nothing more specific caught it
    (the CLI's error boundary): one line naming the file; None for other errors."""
    if exc.errno not in _FAULT_ADVICE:
        return None
    what, todo = _FAULT_ADVICE[exc.errno]
    return MachineFault(f"cannot use {exc.filename or 'a file of the project'}: {what}", todo)


def read_fault(exc: OSError, reading: str) -> MachineFault | None:
    """A read the machine refused (a folder this user may not read) as a MachineFault
    naming what was being read; None for any other error."""
    if exc.errno not in _FAULT_ADVICE:
        return None
    what, todo = _FAULT_ADVICE[exc.errno]
    return MachineFault(f"cannot read {reading}: {what}", todo)


class ConflictError(WfrunError):
    """The state changed underneath the operation; re-read and try again."""
