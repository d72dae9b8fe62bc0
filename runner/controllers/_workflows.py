"""Child workflows: the controller runtime's only door into the engine (DESIGN §2, §7).

`ctx.workflows.ensure(request_key, workflow, input)` is keyed by (resource uid,
request key) plus an input fingerprint. The first call, or one after an
`interrupted` attempt, saves a new attempt with its run id *before* the run is
scheduled; attempts are immutable. When a child run ends, its request records
the outcome and the parent resource is enqueued. A request still `running` with
no run here is settled from its launch row: an ended row settles it, a queued,
parked or abandoned one is taken over, and no row at all (the process died
between saving the attempt and queueing it) makes it `interrupted`, so the next
pass starts a fresh attempt instead of waiting forever.

Child runs are launch rows (the one run lifecycle): `ChildLauncher`, supplied by
the host, queues and executes them; the store settles a request when its launch
ends, in the same transaction that wakes the parent.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from runner._canonical import fingerprint
from runner.clock import Clock, SystemClock
from runner.compiler import WorkflowDefinition
from runner.engine import RunReader, new_run_id
from runner.engine._hooks import load_hook
from runner.engine._rows import BundleRows
from runner.errors import InputError, WfrunError
from runner.store import IdentityConflict, LostRace
from runner.store._controller_interface import ControllerStore, Resource, WorkflowRequest

log = logging.getLogger(__name__)
STATE_BY_RUN = {"completed": "succeeded", "waiting": "waiting", "failed": "failed",
                "timed_out": "failed", "cancelled": "failed"}
#: How long (store time) a saved attempt may wait for its launch row before a missing
#: row means the process that saved it died: another process may be between saving
#: the attempt and queueing the row (a pass that timed out or lost its claim), and
#: declaring that attempt interrupted would start a second run beside it.
QUEUE_GRACE_SECONDS = 30.0

__all__ = ["ChildLauncher", "ChildView", "ChildWorkflows", "Resolver", "fingerprint",
           "load_hook"]


class Resolver(Protocol):
    def compile(self, ref: str) -> tuple[WorkflowDefinition, str]: ...


@dataclass(frozen=True)
class ChildView:
    """What a reconciler sees of its child workflow request."""

    request_id: str
    state: str  # pending | running | waiting | succeeded | failed | interrupted
    attempt: int
    run_id: str | None
    output: Any = None
    error: str | None = None

    def to_status(self) -> dict[str, Any]:
        return {"request_id": self.request_id, "run_id": self.run_id, "state": self.state,
                "attempt": self.attempt}


class ChildLauncher(Protocol):
    """Where child runs go: launch rows, executed by the host (host/children.py)."""

    def launch(self, run_id: str, workflow: str, run_input: Any) -> str | None:
        """Queue the launch row with this run id and start it; an error text if refused."""
        ...

    def status(self, run_id: str) -> str | None:
        """The launch row's status (None: no row)."""
        ...

    def take_over(self, run_id: str) -> bool:
        """Resume a child whose runner is gone; False while another runner holds it,
        or once it has ended."""
        ...

    def active(self, run_id: str | None) -> bool: ...

    @property
    def busy(self) -> bool: ...

    def shutdown(self, grace: float = 10.0) -> None: ...


class ChildWorkflows:
    """Child requests of reconcilers; their runs are launch rows (one lifecycle).

    When a child's launch ends, the store settles its request and wakes the parent
    key in that same transaction, so no crash separates the two.
    """

    def __init__(self, store: ControllerStore, resolver: Resolver, runs_dir: Path, *,
                 launcher: ChildLauncher, clock: Clock | None = None,
                 queue_grace: float = QUEUE_GRACE_SECONDS,
                 rows: BundleRows | None = None) -> None:
        self.store = store
        self.resolver = resolver
        self.reader = RunReader(runs_dir, rows)  # rows: bundles in the database
        self.launcher = launcher
        self.clock = clock or SystemClock()
        self.queue_grace = queue_grace

    # -- for reconcilers ---------------------------------------------------------------
    def ensure(self, resource: Resource, request_key: str, workflow: str,
               run_input: Any) -> ChildView:
        try:
            fp = fingerprint(run_input)
        except (TypeError, ValueError):
            raise InputError(f"child workflow input for '{request_key}' must be JSON") from None
        try:
            req = self.store.workflow_requests.ensure(resource.uid, request_key,
                                                      workflow=workflow, input_fingerprint=fp)
        except IdentityConflict:
            raise InputError(f"child workflow request '{request_key}' was made before with a "
                             "different workflow or input; use a new request key") from None
        if req.state == "running" and not self.launcher.active(req.run_id):
            req = self._settle_leftover(req)
        if req.state in ("pending", "interrupted"):
            req = self._start(req, workflow, run_input)
        return self._view(req)

    def _view(self, req: WorkflowRequest) -> ChildView:
        output = None
        if req.run_id and req.state in ("succeeded", "waiting"):
            output = self.reader.final_output(req.run_id)
        return ChildView(req.request_id, req.state, req.attempt, req.run_id, output, req.error)

    # -- scheduling ----------------------------------------------------------------------
    def _start(self, req: WorkflowRequest, workflow: str, run_input: Any) -> WorkflowRequest:
        try:
            definition, _ = self.resolver.compile(workflow)
        except WfrunError as exc:
            return self._fail_request(req, f"cannot start child workflow: {exc.message}")
        if any(n.kind == "notify" for n in definition.nodes.values()):
            return self._fail_request(req, "child workflows may not use notify nodes")
        run_id = new_run_id(definition.name, self.clock.now())
        # The attempt (with its run id) is durable before the launch row exists: a crash
        # in between leaves a running request with no row, settled as interrupted below.
        started = self.store.workflow_requests.start_attempt(
            req.request_id, expected_attempt=req.attempt, run_id=run_id)
        if isinstance(started, LostRace):
            current = self.store.workflow_requests.get(req.request_id)
            return current or req
        refused = self.launcher.launch(run_id, workflow, run_input)
        if refused is not None:
            return self._fail_request(started, refused)
        return started

    def _fail_request(self, req: WorkflowRequest, message: str) -> WorkflowRequest:
        result = self.store.workflow_requests.finish(req.request_id, attempt=req.attempt,
                                                     state="failed", error=message[:500])
        return req if isinstance(result, LostRace) else result

    def _settle_leftover(self, req: WorkflowRequest) -> WorkflowRequest:
        """A `running` request whose run is not executing here: its launch row decides."""
        run_id = req.run_id
        assert run_id is not None
        status = self.launcher.status(run_id)
        if status is None:
            if self.store.now_ms() - req.updated_at < self.queue_grace * 1000:
                # Saved moments ago: its process may still be about to queue the row.
                return req
            # The process died between saving the attempt and queueing the row.
            return self._finish(req, "interrupted", "the child run was never queued")
        if status in ("done", "failed", "cancelled"):
            # Ended without settling the request (a row from before this link existed).
            state = "failed" if status != "done" else (
                "waiting" if self.reader.status(run_id) == "waiting" else "succeeded")
            return self._finish(req, state, None if state != "failed" else
                                f"the child run ended {status}")
        if self.launcher.take_over(run_id):  # queued, parked or abandoned: run it here
            return req
        # Another process holds it, or ran it to its end after the status read above;
        # an ending settled the request in its own transaction.
        return self.store.workflow_requests.get(req.request_id) or req

    def _finish(self, req: WorkflowRequest, state: str, error: str | None) -> WorkflowRequest:
        result = self.store.workflow_requests.finish(req.request_id, attempt=req.attempt,
                                                     state=state,  # type: ignore[arg-type]
                                                     error=error)
        return req if isinstance(result, LostRace) else result

    @property
    def busy(self) -> bool:
        """True while a child run started here has not ended."""
        return self.launcher.busy

    def shutdown(self, grace: float = 10.0) -> None:
        """Park active children; a later process resumes them from their launch rows."""
        self.launcher.shutdown(grace)
