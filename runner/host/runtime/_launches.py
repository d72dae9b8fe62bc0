"""Detached launches from the command line: a coordinator with no session, and views.

Status and `why` read the launch row first, so they work before a run bundle
exists, then add what the bundle says once it does.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from runner._safety import safe_message
from runner.errors import NotFoundError, WfrunError

# The runner's identity lives in identity.py (coordinators.py reads it without this
# module); named here too, where its importers have always found it.
from ._identity import dead_local_runner as dead_local_runner
from ._identity import environment_secrets as environment_secrets
from ._identity import runner_id as runner_id
from ._local import Workspace
from ._runstate import ENDED_STATES, run_state

if TYPE_CHECKING:
    from runner.engine import AgentStepExecutor
    from runner.launch import LaunchCoordinator
    from runner.store import LaunchBook, LaunchRecord, LaunchStatus, Store

    from ._drift import Drift

#: Launch states whose recorded sources the activation hash check has yet to pass.
DRIFT_STATES = ("queued", "starting")


def book(store: Store) -> LaunchBook:
    """The launch queue's one facade over an open store (`runner.store.LaunchBook`):
    how the host's functions, and the CLI through them, read launches."""
    from runner.store import LaunchBook  # here: cold views import this module

    return LaunchBook(store)


def detached_coordinator(ws: Workspace, store: Store,
                         executor: AgentStepExecutor | None = None) -> LaunchCoordinator:
    """The runner of a command outside every session (`wfrun start`, `resume`,
    `cancel`): a session's launch it runs gives its agent steps back."""
    # Here, not at the top: `status` and `why` read rows and bundles and must not load
    # the coordinator, the engine's executors and Jinja2 (issue 15, cold start).
    from ._coordinators import build_coordinator

    return build_coordinator(ws, store, "detached", executor=executor)


def _iso(ms: int | None) -> str | None:
    if ms is None:
        return None
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat().replace("+00:00", "Z")


#: The launches `wfrun status` lists (those not ended).
ACTIVE: tuple[LaunchStatus, ...] = ("queued", "starting", "running", "parked")


def launch_drift(record: LaunchRecord | None) -> Drift | None:
    """How the sources of a queued or starting launch drifted since it was queued (a
    re-hash of the recorded files; activation's digest check stays the authority)."""
    if record is None or record.status not in DRIFT_STATES:
        return None
    from ._drift import source_drift  # here: an idle `status` re-hashes nothing

    return source_drift(record)


def launch_status(ws: Workspace, store: Store, run_id: str, *,
                  record: LaunchRecord | None = None) -> dict[str, Any]:
    """The launch row (before a bundle exists) merged with the run bundle (after).
    `record`: the row, when the caller has just read it (a listing).

    `source` says, for a queued or starting launch, whether a file it was compiled
    from was edited or removed since it was queued (None for other states)."""
    from ._views import run_row  # here: an idle `status` reads no bundle (cold start)

    if record is None or record.run_id != run_id:
        record = book(store).get(run_id)
    bundle = run_row(ws.reader(store), run_id)
    if record is None and bundle is None:
        raise NotFoundError(f"no launch or run '{run_id}'; `wfrun status` lists launches")
    view: dict[str, Any] = {"run_id": run_id, "status": None, "launch": None, "run": None,
                            "error": None, "source": None}
    if record is not None:
        view["launch"] = {
            "status": record.status, "workflow": record.workflow_ref,
            "origin_session": record.origin_session_id, "runner": record.runner_id,
            "lease_expires_at": _iso(record.claim_expires_at), "epoch": record.epoch,
            "created_at": _iso(record.created_at), "started_at": _iso(record.started_at),
            "finished_at": _iso(record.finished_at), "parent_run_id": record.parent_run_id}
        if record.error_code:
            view["error"] = {"code": record.error_code, "message": record.error_message}
        if record.status in DRIFT_STATES:
            drift = launch_drift(record)
            view["source"] = (drift.to_json(ws.project_root) if drift is not None
                              else {"changed": False})
    if bundle is not None:
        run = bundle.to_json()
        if run.get("title"):
            # Titles are author templates over the input; status output stays redacted.
            run["title"] = safe_message(str(run["title"]))
        view["run"] = run
    view["status"] = run_state(record, bundle.status if bundle is not None else None)
    items = _item_progress(store, run_id) if record is not None and record.started_at else None
    if items:
        view["items"] = items  # fan-out nodes: their items by state, the last visit each
    if record is not None and record.status in ("starting", "running") and (
            not record.lease_live(store.now_ms())
            or dead_local_runner(record.runner_id) is not None):
        # Its runner is gone: whatever the bundle says, nothing runs it now.
        view["interrupted"] = True
    return view


def _item_progress(store: Store, run_id: str) -> dict[str, dict[str, int]] | None:
    """Per fan-out node of the run, its items by state (`{"files": {"ok": 48, ...}}`)."""
    from runner.store._errors import StoreError

    try:
        progress = store.fanout.progress(run_id)
    except StoreError:
        return None  # a store made before fan-out items, opened read-only
    latest: dict[str, dict[str, int]] = {}
    for (node, _visit), counts in sorted(progress.items()):
        latest[node] = counts
    return latest


def explain(ws: Workspace, store: Store, run_id: str) -> dict[str, Any]:
    """Facts and one-line reasons for why a run is (not) running."""
    from runner.store._states import HANDED_OVER

    view = launch_status(ws, store, run_id)
    record = book(store).get(run_id)
    reasons: list[str] = []
    now = store.now_ms()
    state = view["status"]
    waiting_on = ws.reader(store).state(run_id).waiting_on if state == "waiting" else None
    if record is None:
        reasons.append(f"{run_id} has no launch row (made by a wfrun before every run was "
                       f"one); its bundle says {state}")
        if state in ENDED_STATES:
            reasons.extend(_ended_reasons(view, None, waiting_on))
        return {**view, "reasons": reasons}
    status = record.status
    handed_over = record.origin_session_id is not None and \
        record.affinity_runner_id == HANDED_OVER
    if state == "queued":
        if handed_over:
            reasons.append(f"queued; session {record.origin_session_id} ended and handed it "
                           "over: a running `wfrun host` activates it (or the session, if it "
                           "starts again first); its outcome goes to the session's next turn")
        elif record.origin_session_id:
            reasons.append(f"queued for session {record.origin_session_id}: it starts after "
                           "that session's current turn settles (a client without a "
                           "turn-end signal, such as a plain MCP client: when it exits, "
                           "under `wfrun host`, or when the session starts again)")
        else:
            reasons.append("queued as a detached launch: a `wfrun host` (or `wfrun start "
                           "--wait`) activates it")
    elif status in ("starting", "running") and state in ("starting", "running", "paused"):
        live = record.lease_live(now)
        left = (record.claim_expires_at or 0) - now
        reasons.append(f"{state} on runner {record.runner_id}; lease "
                       + (f"expires in {left / 1000:.1f}s" if live else
                          "expired: another runner may recover it"))
        if handed_over:
            reasons.append(f"session {record.origin_session_id} handed it over when it ended; "
                           "its outcome goes to the session's next turn")
        dead = dead_local_runner(record.runner_id)
        if dead is not None:
            later = ("its session takes it over when it starts again"
                     if record.origin_session_id and not handed_over
                     else "`wfrun host` after the lease")
            reasons.append(f"its runner (process {dead.rpartition(':')[2]}) is "
                           f"gone: `wfrun resume {run_id}` takes it over now, {later}, "
                           "`wfrun cancel` ends it")
    elif state == "paused" and record.status == "parked":
        reasons.append(f"paused (`wfrun pause`): no host takes it until `wfrun unpause "
                       f"{run_id}` (or `wfrun resume {run_id}` continues it here)")
    elif state == "parked":
        if record.park_mode == "auto" and (record.origin_session_id is None or handed_over):
            whose = (f"session {record.origin_session_id} ended and handed it over"
                     if handed_over else "parked by a host shutdown")
            reasons.append(f"parked ({whose}): the next `wfrun host` (or the session, when it "
                           "starts again) continues it at the interrupted node")
        elif record.park_mode == "auto":
            reasons.append(f"parked for session {record.origin_session_id}: it continues when "
                           "that session starts again (a step only the session can take, or "
                           "a session that stopped without handing it over); no host takes it")
        else:
            reasons.append(f"parked on request (Ctrl-C or a pause): it waits for `wfrun "
                           f"resume {run_id}`; no host resumes it by itself")
    else:
        reasons.extend(_ended_reasons(view, record, waiting_on))
    if record.origin_session_id and status in ("queued", "starting", "running"):
        reasons.append(f"it holds the one-workflow reservation of session "
                       f"{record.origin_session_id}")
    if status in ("queued", "starting", "parked"):
        reasons.extend(_source_reasons(ws, record))
    if status in ("queued", "parked"):
        import contextlib

        from runner.store import StoreError

        with contextlib.suppress(StoreError):  # a store made before flow control, read-only
            reasons.extend(_gate_reasons(store, record, now))
    try:
        manifest = ws.reader(store).manifest(run_id)
    except NotFoundError:
        manifest = None
    if manifest is not None:
        reasons.append(f"bundle status: {manifest.get('status')}")
    return {**view, "reasons": reasons}


def _gate_reasons(store: Store, record: LaunchRecord, now: int) -> list[str]:
    """Flow control (DESIGN §10): which key a waiting run waits for, and the runs
    holding it, or when its rate lets it start."""
    queue = book(store)
    gate = queue.gate(record.run_id)
    if gate is None:
        return []
    out = []
    if gate.concurrency_key is not None and gate.concurrency_limit is not None:
        holders = [r for r, _ in queue.gate_holders(gate.concurrency_key)
                   if r != record.run_id]
        if len(holders) >= gate.concurrency_limit:
            out.append(f"waits for concurrency key '{gate.concurrency_key}' (limit "
                       f"{gate.concurrency_limit}, {gate.strategy}): held by run(s) "
                       + ", ".join(holders) + "; it holds no host slot meanwhile")
    if gate.rate_key is not None and gate.rate_limit is not None and gate.rate_per_ms:
        starts = queue.gate_starts(gate.rate_key, now - gate.rate_per_ms)
        if len(starts) >= gate.rate_limit:
            free = starts[len(starts) - gate.rate_limit] + gate.rate_per_ms
            out.append(f"waits for rate limit '{gate.rate_key}' ({gate.rate_limit} per "
                       f"{gate.rate_per_ms / 1000:g}s): {len(starts)} started in the last "
                       f"period; the next start is possible in {max(0, free - now) / 1000:.1f}s")
    return out


def _ended_reasons(view: dict[str, Any], record: LaunchRecord | None,
                   waiting_on: str | None = None) -> list[str]:
    """Why a run that is not going anywhere by itself stopped, by its state."""
    run_id, state = view["run_id"], view["status"]
    run = view.get("run") or {}
    if state == "waiting":
        where = f" at {waiting_on}" if waiting_on else ""
        return [f"waiting for an answer{where}: `wfrun answer {run_id} '<json or text>'` "
                "continues it as a new run"]
    if state == "continued":
        return [f"answered: its work went on in run {run.get('continued_by')}"]
    if state == "completed":
        return ["finished: completed"]
    if state == "cancelled":
        return ["cancelled"]
    if state in ("failed", "timed_out"):
        if record is not None and record.error_code:
            return [f"{state.replace('_', ' ')}: {record.error_code}: {record.error_message}"]
        return [f"{state.replace('_', ' ')}: `wfrun show {run_id}` says where and why"]
    return [f"its bundle says {state}"]


def _source_reasons(ws: Workspace, record: LaunchRecord) -> list[str]:
    """What a re-hash of the recorded files and a compile now say about activation."""
    drift = launch_drift(record)
    changed: bool | None = None
    error = None
    try:
        current, _ = ws.compile(record.workflow_ref)
        changed = current.digest != record.definition_digest
    except WfrunError as exc:
        error = exc.message
    reasons = []
    if drift is not None:
        where = drift.display(ws.project_root)
        if drift.kind != "edited":
            where += f", {drift.detail}"
        if changed is False:
            reasons.append(f"the workflow source changed since it was queued ({where}) but its "
                           "definition did not (same digest): activation goes ahead")
        elif changed:
            reasons.append(f"the workflow source changed since it was queued ({where}); "
                           "activation will fail with source_changed unless you restore it")
        else:
            reasons.append(f"the workflow source changed since it was queued ({where}); "
                           "activation will fail unless you restore it")
    elif changed:
        reasons.append("its workflow source changed since it was queued: activation "
                       "will fail with source_changed")
    if error is not None:
        reasons.append(f"its workflow cannot be compiled now: {error}")
    return reasons
