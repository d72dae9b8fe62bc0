"""Actions on runs and triggers, recorded in `audit_log` whoever asks (ADR 0012).

The console's actions and the CLI's commands that change something (`cancel`,
`pause`, `unpause`, `rerun`, `answer`, `start`, `triggers pause|resume|backfill`)
go through `audited`: do the action, then write one row — who (the console's
token fingerprint, or the local user at the command line), what, which run or
trigger, when, from where (the client's address, or `cli`). The row is written
after the action in a transaction of its own: a refused action is recorded too,
and a process killed between the two loses the row, never the action.

A trigger action uses the vocabulary the table already has (`pause`, `unpause`,
`start` for a backfill) and names its trigger in the detail: the action column's
check is part of the v1 layout every store was made with.
"""

from __future__ import annotations

import getpass
import logging
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from runner._safety import safe_message
from runner.errors import WfrunError
from runner.store import Store, StoreError
from runner.store._states import AuditAction

from ._errors import translate

T = TypeVar("T")
log = logging.getLogger("wfrun.audit")

#: Where a command-line action comes from (the console records the client address).
CLI_ORIGIN = "cli"


@dataclass(frozen=True)
class Actor:
    """Who asks and from where."""

    who: str
    origin: str | None


def local_user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no name for this uid (a container)
        return f"uid {os.getuid()}"


def cli_actor() -> Actor:
    return Actor(f"user:{local_user()}", CLI_ORIGIN)


@dataclass(frozen=True)
class Done:
    """What an action tells its audit row besides its result: the run it made or
    touched (None: the one asked about), its workflow, and what to add to the detail
    (counts, never values)."""

    run_id: str | None = None
    workflow: str | None = None
    detail: Mapping[str, Any] = field(default_factory=dict)


def audited(store: Store, actor: Actor, action: AuditAction, *, run_id: str | None,
            workflow: str | None, detail: Mapping[str, Any],
            do: Callable[[], T], done: Callable[[T], Done] = lambda _: Done()) -> T:
    """Do one action and record it, whether it was done or refused (a user's mistake
    is recorded as `failed` with its one-line message; a bug is not an action)."""
    try:
        result = do()
    except Exception as exc:
        error = translate(exc)
        if error is None:
            raise
        # A store that refused the action (busy, damaged, gone) is not written to again
        # for its row: its one line is the answer, and a damaged file stays as it was.
        if not _store_refused(exc):
            record(store, actor, action, "failed", run_id, workflow,
                   {**detail, "error": safe_message(error.message, max_bytes=500)})
        raise error from None
    told = done(result)
    detail = {**detail, **told.detail}
    made = told.run_id
    if run_id is not None and made not in (None, run_id):
        detail = {**detail, "new_run_id": made}  # an answer's or a rerun's new run
    record(store, actor, action, "ok", run_id or made, told.workflow or workflow, detail)
    return result


def _store_refused(exc: BaseException) -> bool:
    """Whether the store's own error is in `exc`'s chain (an activation error wraps it)."""
    seen: BaseException | None = exc
    for _ in range(10):  # chains are short; a loop in one is not followed forever
        if seen is None:
            return False
        if isinstance(seen, StoreError):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def record(store: Store, actor: Actor, action: AuditAction, outcome: str,
           run_id: str | None, workflow: str | None, detail: Mapping[str, Any]) -> None:
    """Write the row; a store that refuses it (read-only, gone) costs the row, never
    the action's own answer or error (one warning line says so)."""
    try:
        store.audit.append(actor=actor.who, action=action,
                           outcome="ok" if outcome == "ok" else "failed", run_id=run_id,
                           workflow_ref=workflow, origin=actor.origin, detail=dict(detail))
    except WfrunError as exc:  # StoreError included
        log.warning("wfrun: the audit row of this %s was not written: %s", action,
                    safe_message(exc.message, max_bytes=300))
