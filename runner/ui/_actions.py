"""The HTTP API's actions: start a workflow, cancel, pause, unpause or rerun a run,
answer a checkpoint, pause or resume a trigger; each recorded in `audit_log`.

Each action is the runtime function its command calls (`wfrun start`, `cancel`,
`pause`, `unpause`, `rerun --detach`, `answer`), detached: it queues or asks,
and a host (`wfrun host`) runs what was queued, so a request never waits for a
run. The guard (server.py, auth.py) has checked the token and the CSRF rule
before any of this runs; here every action,
done or refused by the runtime, leaves one audit row (who, what, which run, when,
from where). The row is written after the action in a transaction of its own:
a failed action is recorded too, and a process killed between the two loses the
row, never the action.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from typing import Any

from runner import _jsonin as jsonin
from runner.errors import InputError, NotFoundError, WfrunError
from runner.host.runtime._audit import Actor, Done, audited
from runner.host.runtime._foreground import queue_answer, queue_detached
from runner.host.runtime._launches import detached_coordinator
from runner.host.runtime._operations import (
    RerunRequest,
    pause_run,
    queue_rerun_detached,
    rerun_detail,
    unpause_run,
)
from runner.host.runtime._triggers import pause_trigger
from runner.launch import LaunchCoordinator, workflow_name
from runner.store import Store
from runner.store._states import AuditAction

from ._data import Site

#: A request body larger than this is refused before it is parsed.
BODY_MAX_BYTES = 1 << 20


def parse_body(raw: bytes) -> dict[str, Any]:
    """An action's body: empty, or a JSON object."""
    if len(raw) > BODY_MAX_BYTES:
        raise InputError(f"the request body is {len(raw)} bytes; the limit is "
                         f"{BODY_MAX_BYTES}")
    if not raw.strip():
        return {}
    try:
        value = jsonin.loads(raw.decode("utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        raise InputError(f"the request body must be a JSON object: {exc}") from None
    if not isinstance(value, dict):
        raise InputError("the request body must be a JSON object, such as "
                         '{"input": {...}}')
    return value


class Actions:
    """The actions over one served project; one at a time (they are few and quick,
    and one coordinator serves them all)."""

    def __init__(self, site: Site) -> None:
        self.site = site
        self._lock = threading.Lock()
        self._coordinator: LaunchCoordinator | None = None

    def _store(self) -> Store:
        return self.site.writable_store()

    def coordinator(self) -> LaunchCoordinator:
        if self._coordinator is None:
            self._coordinator = detached_coordinator(self.site.ws, self._store())
        return self._coordinator

    def run(self, actor: Actor, action: AuditAction, *, run_id: str | None,
            workflow: str | None, detail: Mapping[str, Any],
            do: Callable[[], dict[str, Any]]) -> dict[str, Any]:
        """Do one action and record it, whether it was done or refused."""
        with self._lock:
            return audited(self._store(), actor, action, run_id=run_id, workflow=workflow,
                           detail=detail, do=do,
                           done=lambda r: Done(r.get("run_id"), r.get("workflow")))

    # --- the actions ---------------------------------------------------------------

    def start(self, actor: Actor, name: str, body: dict[str, Any]) -> dict[str, Any]:
        value = body.get("input")

        def do() -> dict[str, Any]:
            workflow, run_id = queue_detached(self.coordinator(), name, value)
            return {"action": "start", "workflow": workflow, "run_id": run_id,
                    "status": "queued"}

        return self.run(actor, "start", run_id=None, workflow=name,
                        detail={"input": value is not None}, do=do)

    def cancel(self, actor: Actor, run_id: str) -> dict[str, Any]:
        def do() -> dict[str, Any]:
            record = self.coordinator().cancel(run_id)
            return {"action": "cancel", "run_id": run_id, "workflow": record.workflow_ref,
                    "status": record.status, "requested": record.status != "cancelled"}

        return self.run(actor, "cancel", run_id=run_id, workflow=None, detail={}, do=do)

    def answer(self, actor: Actor, run_id: str, body: dict[str, Any]) -> dict[str, Any]:
        if "answer" not in body:
            raise InputError('the body must carry the answer: {"answer": ...}')
        answer = body["answer"]

        def do() -> dict[str, Any]:
            record = queue_answer(self.coordinator(), run_id, answer)
            return {"action": "answer", "run_id": record.run_id, "continues": run_id,
                    "workflow": workflow_name(record.workflow_ref), "status": "queued"}

        return self.run(actor, "answer", run_id=run_id, workflow=None, detail={}, do=do)

    def pause(self, actor: Actor, run_id: str) -> dict[str, Any]:
        def do() -> dict[str, Any]:
            return {"action": "pause", **pause_run(self.site.ws, self._store(), run_id).to_json()}

        return self.run(actor, "pause", run_id=run_id, workflow=None, detail={}, do=do)

    def unpause(self, actor: Actor, run_id: str) -> dict[str, Any]:
        def do() -> dict[str, Any]:
            return {"action": "unpause",
                    **unpause_run(self.site.ws, self._store(), run_id).to_json()}

        return self.run(actor, "unpause", run_id=run_id, workflow=None, detail={}, do=do)

    def rerun(self, actor: Actor, run_id: str, body: dict[str, Any]) -> dict[str, Any]:
        request = rerun_request(run_id, body)
        detail = rerun_detail(request)

        def do() -> dict[str, Any]:
            queued = queue_rerun_detached(self.site.ws, self._store(), request)
            return {"action": "rerun", **queued.to_json(),
                    "workflow": workflow_name(queued.record.workflow_ref)}

        return self.run(actor, "rerun", run_id=run_id, workflow=None, detail=detail, do=do)

    def trigger(self, actor: Actor, name: str, paused: bool) -> dict[str, Any]:
        """`wfrun triggers pause|resume NAME`: audited there (pause/unpause naming it)."""
        with self._lock:
            return pause_trigger(self.site.ws, self._store(), actor, name, paused)

    def close(self) -> None:
        self._coordinator = None


def rerun_request(run_id: str, body: dict[str, Any]) -> RerunRequest:
    """`{"from": NODE, "input": ..., "set": {NODE: OUTPUT}, "force": false}`, each
    optional, as `wfrun rerun`'s options."""
    unknown = sorted(set(body) - {"from", "input", "set", "force"})
    if unknown:
        raise InputError(f"unknown rerun field(s) {', '.join(unknown)}; the fields are "
                         "from, input, set and force")
    from_node = body.get("from")
    if from_node is not None and (not isinstance(from_node, str) or not from_node):
        raise InputError("from must be a node id (text)")
    sets = body.get("set") or {}
    if not isinstance(sets, dict):
        raise InputError('set must be an object of node id -> output, such as {"review": '
                         '{"ok": true}}')
    force = body.get("force", False)
    if not isinstance(force, bool):
        raise InputError("force must be true or false")
    return RerunRequest(run_id=run_id, from_node=from_node, input=body.get("input"),
                        set=sets, force=force)


def error_status(error: WfrunError) -> int:
    """The HTTP status of a refused action or read (what the caller should do)."""
    from runner.errors import ConflictError, OperationFailed, TemporaryError

    if isinstance(error, NotFoundError):
        return 404
    if isinstance(error, InputError):
        return 400
    if isinstance(error, ConflictError):
        return 409
    if isinstance(error, TemporaryError):
        return 503
    if isinstance(error, OperationFailed):
        return 422
    return 500
