"""Operating runs (issue 39): rerun, pause and unpause, one small typed function each.

The CLI (`wfrun rerun|pause|unpause`) and the HTTP API call these; the rules live
below (launch/_rerun.py, launch/_pausing.py, the store's domain/_operations.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from runner.engine import AgentStepExecutor, RunControl, RunOutcome
from runner.engine._runtypes import Observer
from runner.errors import InputError
from runner.launch import workflow_name
from runner.launch._pausing import PauseResult, pause, unpause
from runner.launch._rerun import RerunQueued, RerunRequest, queue_rerun
from runner.store import Store

from ._audit import Actor, Done, audited
from ._foreground import execute_here, foreground_coordinator, preflight_error
from ._launches import book, dead_local_runner, detached_coordinator
from ._local import Workspace

__all__ = ["PauseResult", "RerunQueued", "RerunRequest", "cache_entries", "clear_cache",
           "pause_run", "queue_rerun_detached", "rerun_detail", "rerun_done", "rerun_here",
           "unpause_run"]


def queue_rerun_detached(ws: Workspace, store: Store, request: RerunRequest) -> RerunQueued:
    """Queue a rerun for a host (`wfrun rerun --detach`, the HTTP API)."""
    from runner.launch import PreflightError

    coordinator = detached_coordinator(ws, store)
    try:
        return queue_rerun(coordinator, request)
    except PreflightError as exc:
        raise preflight_error(exc) from None


def rerun_here(ws: Workspace, store: Store, request: RerunRequest, control: RunControl, *,
               executor: AgentStepExecutor | None = None, observer: Observer | None = None,
               secrets: Mapping[str, str] | None = None,
               use_cache: bool = True,
               actor: Actor | None = None) -> tuple[RerunQueued, RunOutcome]:
    """`wfrun rerun`: the rerun's launch queued and claimed here, then run here; with
    an actor, the queueing is an audited action (recorded before the run runs)."""
    from runner.launch import PreflightError

    coordinator = foreground_coordinator(ws, store, executor=executor, observer=observer,
                                         secrets=secrets, use_cache=use_cache)

    def queue() -> RerunQueued:
        try:
            return queue_rerun(coordinator, request, here=True)
        except PreflightError as exc:
            raise preflight_error(exc) from None

    queued = queue() if actor is None else audited(
        store, actor, "rerun", run_id=request.run_id, workflow=None,
        detail=rerun_detail(request), do=queue, done=rerun_done)
    return queued, execute_here(coordinator, queued.record, control)


def rerun_done(queued: RerunQueued) -> Done:
    """What a rerun's audit row names: the new run and its workflow."""
    return Done(queued.run_id, workflow_name(queued.record.workflow_ref))


def rerun_detail(request: RerunRequest) -> dict[str, Any]:
    """A rerun's audit detail: its options, never input values or outputs."""
    return {"from": request.from_node, "input": request.input is not None,
            "set": sorted(request.set), "force": request.force}


def pause_run(ws: Workspace, store: Store, run_id: str) -> PauseResult:
    """`wfrun pause RUN`: any running run, on any host (or parked: it stays put)."""
    record = book(store).get(run_id)
    dead = dead_local_runner(record.runner_id) if record is not None else None
    return pause(detached_coordinator(ws, store), run_id, dead_runner=dead)


def unpause_run(ws: Workspace, store: Store, run_id: str) -> PauseResult:
    """`wfrun unpause RUN`: a paused run becomes claimable again (a host resumes it)."""
    return unpause(detached_coordinator(ws, store), run_id)


def cache_entries(store: Store, *, workflow: str | None = None,
                  node: str | None = None) -> list[dict[str, Any]]:
    """`wfrun cache list`: kept node results (not their outputs), oldest first."""
    from runner.clock import iso

    out = []
    now = store.now_ms()
    for entry in store.step_cache.entries(workflow=workflow, node_id=node):
        row = entry.to_json()
        row["created_at"] = iso(entry.created_at / 1000)
        row["expires_at"] = iso(entry.expires_at / 1000)
        row["expired"] = entry.expires_at <= now
        out.append(row)
    return out


def clear_cache(store: Store, *, workflow: str | None = None, node: str | None = None,
                keys: tuple[str, ...] = (), expired: bool = False) -> int:
    """`wfrun cache clear`: forget kept node results; how many."""
    if node is not None and workflow is None:
        raise InputError("--node needs --workflow (node ids are per workflow)")
    return store.step_cache.clear(workflow=workflow, node_id=node, keys=keys, expired=expired)


def rerun_links(store: Store, run_id: str) -> dict[str, Any]:
    """`rerun_of` and `rerun_by` of a run, from the store's links."""
    link = store.reruns.rerun(run_id)
    return {"rerun_of": link.to_json() if link is not None else None,
            "rerun_by": [r.run_id for r in store.reruns.reruns_of(run_id)]}
