"""A controller's child run ended: its request settles in the launch's own transaction.

Apart from `_workflow_requests.py` so that ending any launch (every `wfrun run`) loads
no controller records: the launch queue looks the request up by SQL alone (its named
statement `child_request`) and loads this module only when it finds one; the parent's
key is woken (`_controller_queue.wake`) from here.
"""

from __future__ import annotations

from collections.abc import Mapping

from runner.store._connector import Row
from runner.store._connector import Transaction as Tx
from runner.store._records import bounded_message
from runner.store._states import CONTROLLER_ERROR_MAX_BYTES

_SETTLE_UPDATE = ("UPDATE workflow_requests SET state = :state, error = :error,"
                  " updated_at = :now WHERE request_id = :id")


def _child_error(error_message: object, status: object, state: str) -> str | None:
    """The error a child's ending leaves on its request (None when it succeeded or waits)."""
    if state in ("succeeded", "waiting"):
        return None
    return bounded_message(str(error_message or f"the child run ended {status}"),
                           CONTROLLER_ERROR_MAX_BYTES)


def settle_child(tx: Tx, launch: Mapping[str, object], state: str,
                 request: Row) -> None:
    """A controller's child run ended (`launch` is its launch row, `request` its
    request as `child_request` found it, locked): record it on the request and wake
    the parent's key, in the transaction that ends the launch (no crash can leave one
    without the other)."""
    now = tx.now_ms()
    tx.run(_SETTLE_UPDATE, {"state": state, "now": now, "id": request["request_id"],
                           "error": _child_error(launch["error_message"], launch["status"],
                                                state)})
    from runner.store.domain._controller_queue import wake

    wake(tx, request["controller"], request["resource_key"], now)
