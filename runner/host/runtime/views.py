"""Read-only views of runs: they read bundles through `RunReader` and never write
(DESIGN §2, §4, §8).

A bundle's state is re-folded from its trace, so a view of a running or parked
run is exact even when `state.json` lags the trace.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from runner.clock import Clock, SystemClock
from runner.engine import RunReader, fold
from runner.errors import InputError, OperationFailed

from .logs import failure_summary

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

    def to_json(self) -> dict[str, Any]:
        return {"run_id": self.run_id, "workflow": self.workflow, "status": self.status,
                "started_at": self.started_at, "finished_at": self.finished_at,
                "duration_s": self.duration_s, "current_node": self.current_node,
                "parent_run_id": self.parent_run_id, "title": self.title,
                "continued_by": self.continued_by}


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
    timeline: list[dict[str, Any]] = []
    open_nodes: dict[str, dict[str, Any]] = {}
    for event in trace.events:
        kind, node, p = event["type"], event.get("node"), event.get("payload") or {}
        if kind == "node_started" and node:
            entry = {"node": node, "attempt": event.get("attempt"), "kind": p.get("kind"),
                     "started_at": event.get("at"), "finished_at": None, "outcome": None,
                     "duration_ms": None, "error": None}
            open_nodes[node] = entry
            timeline.append(entry)
        elif kind in ("node_finished", "node_failed") and node and node in open_nodes:
            entry = open_nodes.pop(node)
            entry.update({"finished_at": event.get("at"), "outcome": p.get("outcome"),
                          "duration_ms": p.get("duration_ms"), "error": p.get("error")})
        elif kind in ("include_entered", "include_exited"):
            timeline.append({"node": node, "kind": kind, "started_at": event.get("at"),
                             "finished_at": event.get("at"), "outcome": "ok",
                             "attempt": None, "duration_ms": 0, "error": None})
    view = {
        "schema": VIEW_SCHEMA,
        "run_id": run_id,
        "workflow": manifest.get("workflow"),
        "title": manifest.get("title"),
        "status": state.status,
        "paused": state.paused,
        "parent_run_id": manifest.get("parent_run_id"),
        "continued_by": reader.continued_by(run_id) if state.status == "waiting" else None,
        "definition_digest": manifest.get("definition_digest"),
        "started_at": manifest.get("started_at"),
        "finished_at": state.finished_at,
        "current_node": state.current_node,
        "steps": state.steps,
        "waiting_on": state.waiting_on,
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


def follow(runs: Path | RunReader, run_id: str, on_view: Any, *, poll: float = 0.2,
           stop: Any = None, timeout: float | None = None,
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
        if view["status"] != "running" or (stop is not None and stop.is_set()):
            return view
        if timeout is not None and clock.monotonic() - started > timeout:
            return view
        clock.sleep(poll, stop)
