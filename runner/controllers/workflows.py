"""Child workflows: the controller runtime's only door into the engine (DESIGN §2, §7).

`ctx.workflows.ensure(request_key, workflow, input)` is keyed by (resource uid,
request key) plus an input fingerprint. The first call, or one after an
`interrupted` attempt, saves a new attempt with its run id *before* the run is
scheduled; attempts are immutable. When a child run ends, its request records
the outcome and the parent resource is enqueued. A request still `running` from
a process that died has its bundle marked interrupted, so the next pass starts
a fresh attempt instead of waiting forever.
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from runner.clock import Clock, SystemClock
from runner.compiler import WorkflowDefinition
from runner.engine import AgentStepExecutor, Engine, FolderBundle, RunControl, new_run_id
from runner.engine.bundle import MANIFEST, read_json
from runner.engine.hooks import load_hook
from runner.errors import InputError, WfrunError
from runner.store import IdentityConflict, LostRace
from runner.store.controller_interface import ControllerStore, Resource, WorkflowRequest

log = logging.getLogger(__name__)
STATE_BY_RUN = {"completed": "succeeded", "waiting": "waiting", "failed": "failed",
                "timed_out": "failed", "cancelled": "failed"}

__all__ = ["ChildView", "ChildWorkflows", "Resolver", "fingerprint", "load_hook"]


class Resolver(Protocol):
    def compile(self, ref: str) -> tuple[WorkflowDefinition, str]: ...


def fingerprint(value: Any) -> str:
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                      allow_nan=False)
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()


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


class ChildWorkflows:
    """Schedules child runs on threads and reports completions back to the parent."""

    def __init__(self, store: ControllerStore, resolver: Resolver, runs_dir: Path, *,
                 enqueue_parent: Callable[[str, str], None],
                 executor: Callable[[], AgentStepExecutor | None] = lambda: None,
                 clock: Clock | None = None, project_root: Path | None = None) -> None:
        self.store = store
        self.resolver = resolver
        self.runs_dir = runs_dir
        self.enqueue_parent = enqueue_parent
        self.executor = executor
        self.clock = clock or SystemClock()
        self.project_root = project_root
        self._active: dict[str, tuple[threading.Thread, RunControl]] = {}
        self._lock = threading.Lock()

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
        if req.state == "running" and not self._is_active(req.run_id):
            req = self._settle_leftover(req)
        if req.state in ("pending", "interrupted"):
            req = self._start(resource, req, workflow, run_input)
        return self._view(req)

    def _view(self, req: WorkflowRequest) -> ChildView:
        output = None
        if req.run_id and req.state in ("succeeded", "waiting"):
            output = self._final_output(req.run_id)
        return ChildView(req.request_id, req.state, req.attempt, req.run_id, output, req.error)

    # -- scheduling ----------------------------------------------------------------------
    def _start(self, resource: Resource, req: WorkflowRequest, workflow: str,
               run_input: Any) -> WorkflowRequest:
        try:
            definition, ref = self.resolver.compile(workflow)
        except WfrunError as exc:
            return self._fail_request(req, f"cannot start child workflow: {exc.message}")
        if any(n.kind == "notify" for n in definition.nodes.values()):
            return self._fail_request(req, "child workflows may not use notify nodes")
        run_id = new_run_id(definition.name, self.clock.now())
        started = self.store.workflow_requests.start_attempt(
            req.request_id, expected_attempt=req.attempt, run_id=run_id)
        if isinstance(started, LostRace):
            current = self.store.workflow_requests.get(req.request_id)
            return current or req
        control = RunControl()
        thread = threading.Thread(
            target=self._run, args=(resource.controller, resource.key, started, definition,
                                    ref, run_input, control),
            daemon=True, name=f"wfrun-child-{run_id}")
        with self._lock:
            self._active[run_id] = (thread, control)
        thread.start()
        return started

    def _fail_request(self, req: WorkflowRequest, message: str) -> WorkflowRequest:
        result = self.store.workflow_requests.finish(req.request_id, attempt=req.attempt,
                                                     state="failed", error=message[:500])
        return req if isinstance(result, LostRace) else result

    def _run(self, controller: str, key: str, req: WorkflowRequest,
             definition: WorkflowDefinition, ref: str, run_input: Any,
             control: RunControl) -> None:
        assert req.run_id is not None
        engine = Engine(runs_dir=self.runs_dir, clock=self.clock, executor=self.executor(),
                        project_root=self.project_root, work_dir=self.project_root)
        state, error = "failed", None
        try:
            outcome = engine.start(definition, run_input, workflow_ref=ref, run_id=req.run_id,
                                   control=control)
            if outcome.parked:
                state, error = "interrupted", "the child run was parked"
            else:
                state = STATE_BY_RUN.get(outcome.status, "failed")
                if outcome.error:
                    error = str(outcome.error.get("message", ""))[:500]
        except WfrunError as exc:
            error = exc.message[:500]
        except Exception as exc:  # a child must never kill the manager
            log.exception("child workflow %s crashed", req.run_id)
            error = f"child run crashed ({type(exc).__name__})"
        # Stay "active" until the outcome is recorded: otherwise a pass in between sees
        # a `running` request with no live run and settles it from the bundle itself,
        # and shutdown() stops waiting for a thread that still writes to the store.
        try:
            self.store.workflow_requests.finish(req.request_id, attempt=req.attempt,
                                                state=state,  # type: ignore[arg-type]
                                                error=error)
            self.enqueue_parent(controller, key)
        finally:
            with self._lock:
                self._active.pop(req.run_id, None)

    def _is_active(self, run_id: str | None) -> bool:
        with self._lock:
            return run_id is not None and run_id in self._active

    def _settle_leftover(self, req: WorkflowRequest) -> WorkflowRequest:
        """A `running` request whose run is not ours: finish it from its bundle."""
        run_id = req.run_id
        assert run_id is not None
        manifest_path = self.runs_dir / run_id / MANIFEST
        state: str = "interrupted"
        error: str | None = "the child run was interrupted"
        if manifest_path.exists():
            status = read_json(manifest_path).get("status")
            if status in STATE_BY_RUN:
                state, error = STATE_BY_RUN[status], None
            else:
                try:
                    Engine(runs_dir=self.runs_dir, clock=self.clock).interrupt(run_id)
                except WfrunError:
                    return req  # still locked by a live process: leave it running
        result = self.store.workflow_requests.finish(req.request_id, attempt=req.attempt,
                                                     state=state,  # type: ignore[arg-type]
                                                     error=error)
        return req if isinstance(result, LostRace) else result

    def _final_output(self, run_id: str) -> Any:
        from runner.engine import fold
        from runner.engine.artifacts import internalize

        bundle = FolderBundle(self.runs_dir / run_id, run_id)
        state = fold(run_id, bundle.read_trace())
        return internalize(state.final_output, bundle.read_artifact)

    @property
    def busy(self) -> bool:
        """True while a child run this object started has not recorded its outcome."""
        with self._lock:
            return bool(self._active)

    def shutdown(self, grace: float = 10.0) -> None:
        """Park active children so a later process can settle them from their bundles."""
        with self._lock:
            active = list(self._active.values())
        for _, control in active:
            control.park("controller shutdown")
        for thread, _ in active:
            thread.join(timeout=grace)
