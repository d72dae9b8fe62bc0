"""A controller's child run ended: its request settles in the launch's own transaction.

Apart from `_workflow_requests.py` so that ending any launch (every `wfrun run`) loads
no controller records: the request is looked up by SQL alone, and the parent's key is
woken (`_controller_queue.wake`) only when the run was a controller's child.
"""

from __future__ import annotations

from collections.abc import Mapping

from runner.store._connector import Transaction as Tx
from runner.store._records import bounded_message
from runner.store._states import CONTROLLER_ERROR_MAX_BYTES

_SETTLE_FIND = (
    "SELECT w.request_id, r.controller, r.resource_key FROM workflow_requests w"
    " JOIN resources r ON r.uid = w.resource_uid"
    " WHERE w.run_id = :run AND w.state IN ('running', 'waiting')"
)
_SETTLE_UPDATE = ("UPDATE workflow_requests SET state = :state, error = :error,"
                  " updated_at = :now WHERE request_id = :id")


def _child_error(error_message: object, status: object, state: str) -> str | None:
    """The error a child's ending leaves on its request (None when it succeeded or waits)."""
    if state in ("succeeded", "waiting"):
        return None
    return bounded_message(str(error_message or f"the child run ended {status}"),
                           CONTROLLER_ERROR_MAX_BYTES)


def settle_child(tx: Tx, launch: Mapping[str, object], state: str) -> None:
    """A controller's child run ended (`launch` is its launch row): record it on its
    request and wake the parent's key, in the transaction that ends the launch (no
    crash can leave one without the other)."""
    lock = f"{tx.dialect.lock} OF w" if tx.dialect.lock else ""
    request = tx.one(_SETTLE_FIND + lock, {"run": launch["run_id"]})
    if request is None:
        return
    now = tx.now_ms()
    tx.run(_SETTLE_UPDATE, {"state": state, "now": now, "id": request["request_id"],
                           "error": _child_error(launch["error_message"], launch["status"],
                                                state)})
    from runner.store.domain._controller_queue import wake

    wake(tx, request["controller"], request["resource_key"], now)
