"""Read-only views of runs: they read bundles through `RunReader` and never write
(DESIGN §2, §4, §8).

A bundle's state is re-folded from its trace, so a view of a running or parked
run is exact even when `state.json` lags the trace.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from runner.clock import Clock, SystemClock
from runner.engine import RunReader, fold, fold_attempts
from runner.errors import InputError, OperationFailed, WfrunError

from ._logs import failure_summary
from ._runstate import run_state

if TYPE_CHECKING:
    from runner.store import LaunchRecord, Store

    from ._local import Workspace

VIEW_SCHEMA = "wfrun.run-view.v1"


@dataclass(frozen=True)
class RunRow:
    run_id: str
    workflow: str
    status: str
    started_at: str | None
    finished_at: str | None
    duration_s: float | None
    current_node: str | None
    parent_run_id: str | None
    title: str | None
    continued_by: str | None = None  # the run `wfrun answer` started from this one
    created_at: str | None = None  # when its launch was queued (None: no launch row)

    def to_json(self) -> dict[str, Any]:
        return {"run_id": self.run_id, "workflow": self.workflow, "status": self.status,
                "started_at": self.started_at, "finished_at": self.finished_at,
                "duration_s": self.duration_s, "current_node": self.current_node,
                "parent_run_id": self.parent_run_id, "title": self.title,
                "continued_by": self.continued_by, "created_at": self.created_at}


def _parse_iso(text: str | None) -> datetime | None:
    if not text:
        return None
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None


def _duration(start: str | None, end: str | None) -> float | None:
    a, b = _parse_iso(start), _parse_iso(end)
    if a is None or b is None:
        return None
    return round((b - a).total_seconds(), 3)


def reader_for(runs: Path | RunReader) -> RunReader:
    return runs if isinstance(runs, RunReader) else RunReader(runs)


def run_row(runs: Path | RunReader, run_id: str) -> RunRow | None:
    """One row of `wfrun runs`; None when there is no readable manifest (yet)."""
    reader = reader_for(runs)
    try:
        manifest = reader.manifest(run_id)
        state = reader.state(run_id)
    except (InputError, OperationFailed, OSError):  # InputError covers NotFoundError
        return None
    status = state.status if state.trace_seq else str(manifest.get("status", "running"))
    if status == "running" and state.paused:
        status = "paused"
    continued_by = reader.continued_by(run_id) if status == "waiting" else None
    if continued_by is not None:
        status = "continued"  # answered: its bundle stays `waiting`, the work went on
    return RunRow(run_id=run_id, workflow=str(manifest.get("workflow", "")), status=status,
                  started_at=manifest.get("started_at"), finished_at=state.finished_at,
                  duration_s=_duration(manifest.get("started_at"), state.finished_at),
                  current_node=state.current_node, parent_run_id=manifest.get("parent_run_id"),
                  title=manifest.get("title"), continued_by=continued_by)


def _ms_iso(ms: int | None) -> str | None:
    if ms is None:
        return None
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat().replace("+00:00", "Z")


def launch_row(runs: Path | RunReader, record: LaunchRecord) -> RunRow:
    """One row of a run list from a launch row and its bundle (when it has one yet): its
    status is `run_state`, the name every surface gives it."""
    bundle = run_row(runs, record.run_id)
    if bundle is None:  # queued, or ended before its bundle began: the row is the run
        return RunRow(run_id=record.run_id, workflow=_workflow_name(record.workflow_ref),
                      status=run_state(record, None), started_at=_ms_iso(record.started_at),
                      finished_at=_ms_iso(record.finished_at), duration_s=None,
                      current_node=None, parent_run_id=record.parent_run_id, title=None,
                      created_at=_ms_iso(record.created_at))
    return replace(bundle, status=run_state(record, bundle.status),
                   created_at=_ms_iso(record.created_at))


def _workflow_name(ref: str) -> str:
    """A launch's workflow ref is a name or a file's path: the name a bundle records."""
    name = Path(ref).name
    for suffix in (".yaml", ".yml"):
        name = name.removesuffix(suffix)
    return name


@dataclass(frozen=True)
class RunFilter:
    """What `wfrun runs` narrows the list to; every field None keeps every run."""

    status: str | None = None
    workflow: str | None = None
    since: float | None = None  # epoch seconds: runs started at or after it
    limit: int | None = None

    @property
    def narrows(self) -> bool:
        return any(v is not None for v in (self.status, self.workflow, self.since))


def list_runs(runs: Path | RunReader, status: str | None = None, *,
              where: RunFilter | None = None) -> list[RunRow]:
    """Runs newest first; `status` filters (running, paused, waiting, continued,
    completed, ...), `where` by workflow, start time and count too."""
    where = where or RunFilter(status=status)
    status = where.status if where.status is not None else status
    reader = reader_for(runs)
    rows = []
    for run_id in reader.list_ids():
        if where.workflow is not None and not run_id.startswith(f"{where.workflow}-"):
            continue  # run ids begin with the workflow name: skip the read
        row = run_row(reader, run_id)
        if row is None or (status is not None and row.status != status):
            continue
        if where.workflow is not None and row.workflow != where.workflow:
            continue
        if where.since is not None:
            started = _parse_iso(row.started_at)
            if started is None or started.timestamp() < where.since:
                continue
        rows.append(row)
    rows.sort(key=lambda r: (r.started_at or "", r.run_id), reverse=True)
    return rows if where.limit is None else rows[:where.limit]


def show_run(runs: Path | RunReader, run_id: str) -> dict[str, Any]:
    """Status, node timeline, outputs and errors of one run, as stable JSON."""
    reader = reader_for(runs)
    manifest = reader.manifest(run_id)  # InputError, NotFoundError, OperationFailed
    trace = reader.read_trace(run_id)
    state = fold(run_id, trace.events)
    timeline: list[dict[str, Any]] = [
        {"node": a.node, "attempt": a.attempt, "kind": a.kind,
         "started_at": a.started_at, "finished_at": a.finished_at,
         "outcome": a.outcome if a.ended else None, "duration_ms": a.duration_ms,
         "error": a.error, "cached_from": a.cached_from,
         **({"items": a.items} if a.items is not None else {})}
        for a in fold_attempts(trace.events)]
    if state.rerun:
        # A rerun: the nodes it reused ran in the run it reran; shown first, marked.
        reused = [_reused_entry(node, state.results.get(node) or {})
                  for node in state.rerun.get("reused") or []]
        timeline = reused + timeline
    status = state.status
    if status == "running" and state.paused:
        status = "paused"
    continued_by = reader.continued_by(run_id) if state.status == "waiting" else None
    if continued_by is not None:
        status = "continued"
    view = {
        "schema": VIEW_SCHEMA,
        "run_id": run_id,
        "workflow": manifest.get("workflow"),
        "title": manifest.get("title"),
        # The bundle's side of `run_state`; `show_view` merges in the launch row.
        "status": status,
        "paused": state.paused,
        "parent_run_id": manifest.get("parent_run_id"),
        "continued_by": continued_by,
        # What this run reran (its `run_started`); `show_view` adds `rerun_by`.
        "rerun_of": (state.rerun or {}).get("of"),
        "rerun": state.rerun,
        "rerun_by": [],
        "definition_digest": manifest.get("definition_digest"),
        "started_at": manifest.get("started_at"),
        "finished_at": state.finished_at,
        "current_node": state.current_node,
        "steps": state.steps,
        "waiting_on": state.waiting_on,
        "input": shown_input(state.input, _input_schema(reader, run_id)),
        "timeline": timeline,
        "outputs": state.outputs,
        "final_output": state.final_output,
        "error": state.error,
        "updates": list(state.updates.values()),
        "trace_events": len(trace.events),
        "trace_torn": trace.torn,
        # The failed node's error and the last lines of its stdout and stderr.
        "failure": failure_summary(reader, run_id, trace.events),
    }
    # Long strings live in artifacts/; a view shows the real values.
    live: dict[str, Any] = reader.live(run_id, view)
    return live


def _reused_entry(node: str, result: dict[str, Any]) -> dict[str, Any]:
    return {"node": node, "attempt": result.get("attempt_id"), "kind": result.get("kind"),
            "started_at": result.get("started_at"), "finished_at": result.get("finished_at"),
            "outcome": result.get("outcome"), "duration_ms": result.get("duration_ms"),
            "error": result.get("error"),
            "cached_from": (result.get("cached_from") or {}).get("run_id"),
            "reused_from": result.get("reused_from"), "set": bool(result.get("set"))}


def show_view(ws: Workspace, run_id: str) -> dict[str, Any]:
    """`wfrun show`: the run's bundle (`show_run`) with its launch row, so its status is
    `run_state`, the name `runs`, `status`, `why` and the web view give it; a launch
    that has no bundle yet (queued) is shown from its row."""
    from runner.store import LaunchBook
    from runner.store._errors import StoreCorrupt

    from ._local import open_store, store_exists

    store = None
    if store_exists(ws):
        try:
            store = open_store(ws, read_only=True)
        except WfrunError:
            store = None  # a damaged store: the bundle is still the run's own record
    try:
        try:
            record = LaunchBook(store).get(run_id) if store is not None else None
        except StoreCorrupt:
            record = None  # its launch pages are damaged: the bundle, as `runs` falls back
        reader = ws.reader(store)
        if record is not None and not reader.exists(run_id):
            view = _launch_only_view(record)
            link = store.reruns.rerun(run_id) if store is not None else None
            if link is not None:  # a rerun still queued: its link says what it reruns
                view["rerun_of"] = link.rerun_of
                view["rerun"] = {"of": link.rerun_of, "from": link.from_node, "reused": [],
                                 "set": [], "forced": link.forced,
                                 "changed_nodes": list(link.changed_nodes)}
            return view
        view = show_run(reader, run_id)
        view["status"] = run_state(record, view["status"])
        view["launch"] = record.status if record is not None else None
        if store is not None:
            view["rerun_by"] = [r.run_id for r in store.reruns.reruns_of(run_id)]
            _running_items(store, run_id, view["timeline"])
        return view
    finally:
        if store is not None:
            store.close()


def _running_items(store: Store, run_id: str, timeline: list[dict[str, Any]]) -> None:
    """A running map's or parallel's items by state, from the store (its rows change as
    they end; the bundle records the node once it has ended): done, running, failed of N."""
    from runner.store._errors import StoreError

    running = [e for e in timeline if e.get("outcome") is None
               and e.get("kind") in ("map", "parallel")]
    if not running:
        return
    try:
        progress = store.fanout.progress(run_id)
    except StoreError:
        return  # a store made before fan-out items (read-only: the table is not made)
    latest: dict[str, dict[str, int]] = {}
    for (node, _visit), counts in sorted(progress.items()):
        latest[node] = counts  # the last visit wins
    for entry in running:
        found = latest.get(str(entry["node"]))
        if found:
            entry["items"] = found


def _launch_only_view(record: LaunchRecord) -> dict[str, Any]:
    """A launch that has no bundle: what its row says, in `show_run`'s shape."""
    error = ({"code": record.error_code, "message": record.error_message}
             if record.error_code else None)
    return {"schema": VIEW_SCHEMA, "run_id": record.run_id,
            "workflow": _workflow_name(record.workflow_ref), "title": None,
            "status": run_state(record, None), "launch": record.status, "paused": False,
            "parent_run_id": record.parent_run_id, "continued_by": None,
            "rerun_of": None, "rerun": None, "rerun_by": [],
            "definition_digest": record.definition_digest,
            "started_at": _ms_iso(record.started_at), "finished_at": _ms_iso(record.finished_at),
            "current_node": None, "steps": 0, "waiting_on": None, "input": None,
            "timeline": [], "outputs": {}, "final_output": None, "error": error,
            "updates": [], "trace_events": 0, "trace_torn": False, "failure": None}


def _input_schema(reader: RunReader, run_id: str) -> Any:
    try:
        return reader.workflow(run_id).get("input")
    except (InputError, OperationFailed, OSError):
        return None


def shown_input(value: Any, schema: Any) -> Any:
    """A run's input as a view may show it: writeOnly fields masked by the schema (the
    engine recorded them masked already; a view does not rely on it), values under
    secret-named keys and credential-shaped strings masked too. Declared secrets and
    secret environment values were masked before the trace was written."""
    from runner._safety import MASK, mask_json, mask_values, secret_values

    props = schema.get("properties") if isinstance(schema, dict) else None
    if isinstance(value, dict) and isinstance(props, dict):
        value = {k: MASK if isinstance(props.get(k), dict) and props[k].get("writeOnly") is True
                 else v for k, v in value.items()}
    return mask_json(value, mask_values(secret_values(value)))


def eta_seconds(samples: list[tuple[float, float]], total: float | None) -> float | None:
    """Remaining seconds from the median of the last 8 observed rates; never invented."""
    if total is None or len(samples) < 2:
        return None
    rates = []
    for (t0, c0), (t1, c1) in itertools.pairwise(samples):
        if t1 > t0 and c1 > c0:
            rates.append((c1 - c0) / (t1 - t0))
    rates = rates[-8:]
    if not rates:
        return None
    import statistics  # here: it loads fractions and decimal, which the views never need

    rate = statistics.median(rates)  # an even count averages the two middle rates
    remaining = max(total - samples[-1][1], 0.0)
    return remaining / rate if rate > 0 else None


def progress_bars(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Latest progress per (node, key) with an ETA from the rates observed so far."""
    samples: dict[tuple[str, str], list[tuple[float, float]]] = {}
    latest: dict[tuple[str, str], dict[str, Any]] = {}
    for event in events:
        p = event.get("payload") or {}
        if event.get("type") != "update_published" or p.get("type") != "progress":
            continue
        data = p.get("data")
        if not isinstance(data, dict):
            continue
        key = (str(event.get("node")), str(p.get("key")))
        at = _parse_iso(event.get("at"))
        done = data.get("completed")
        if at is not None and isinstance(done, (int, float)):
            samples.setdefault(key, []).append((at.timestamp(), float(done)))
        latest[key] = data
    out = []
    for key, data in latest.items():
        total = data.get("total")
        total_f = float(total) if isinstance(total, (int, float)) else None
        out.append({"node": key[0], "key": key[1], "label": data.get("label") or key[1],
                    "completed": data.get("completed"), "total": total,
                    "unit": data.get("unit"),
                    "eta_s": eta_seconds(samples.get(key, []), total_f)})
    return out


def follow(runs: Path | RunReader, run_id: str,
           on_view: Callable[[dict[str, Any]], object], *, poll: float = 0.2,
           stop: threading.Event | None = None, timeout: float | None = None,
           clock: Clock | None = None) -> dict[str, Any]:
    """Call `on_view(view)` whenever the trace grows, until the run ends (or `stop`,
    or `timeout` seconds on `clock`)."""
    clock = clock or SystemClock()
    reader = reader_for(runs)
    last = -1
    started = clock.monotonic()
    while True:
        view = show_run(reader, run_id)
        if view["trace_events"] != last:
            last = view["trace_events"]
            view["progress"] = progress_bars(reader.trace(run_id))
            on_view(view)
        if view["status"] not in ("running", "paused") or (stop is not None and stop.is_set()):
            return view
        if timeout is not None and clock.monotonic() - started > timeout:
            return view
        clock.sleep(poll, stop)
