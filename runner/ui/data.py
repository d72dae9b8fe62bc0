"""What each page shows, gathered through the host's runtime views (read-only).

The run list pages in the store: every run is a launch row, so a page is one
indexed SQL query plus the bundles of that page's rows, never a fold of every
bundle. Nothing here writes: a project without a store yet shows no launches
instead of creating one.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from runner.compiler import Compiler, Diagnostic, build_catalog, render_text
from runner.engine import RunReader
from runner.errors import InputError, NotFoundError, WfrunError
from runner.host.runtime.controllers import discover, resource_view
from runner.host.runtime.launches import explain
from runner.host.runtime.local import Workspace, open_store, store_exists
from runner.host.runtime.runstate import COUNTED_STATES, counted_rows, run_state, state_counts
from runner.host.runtime.views import launch_row, run_row, shown_input
from runner.store import LaunchBook, LaunchRecord, Store
from runner.store.controller_interface import ControllerStore

from .graph import layout, render_svg
from .runview import masked

WAITING_STATES = ("queued", "starting", "parked")  # not running: each gets its `why`
PER_PAGE = 50
MAX_PER_PAGE = 500
QUEUE_LIMIT = 500
EVENTS_SHOWN = 50


@dataclass
class Site:
    """The project a `wfrun ui` serves, and the secrets it masks."""

    ws: Workspace
    user_dir: Path | None = None
    secrets: tuple[str, ...] = ()
    _store: Store | None = field(default=None, init=False, repr=False)

    @property
    def reader(self) -> RunReader:
        return self.ws.reader(self.store())  # folders, or rows on a Postgres store

    def store(self) -> Store | None:
        """The project's store, opened on first use; None while it does not exist (the
        UI never creates one)."""
        if self._store is None:
            if not store_exists(self.ws):
                return None
            self._store = cast(Store, open_store(self.ws))
        return self._store

    def close(self) -> None:
        if self._store is not None:
            self._store.close()
            self._store = None

    def mask(self, value: dict[str, Any]) -> dict[str, Any]:
        out: dict[str, Any] = masked(value, self.secrets)
        return out


def _int(text: str | None, default: int, name: str, low: int, high: int) -> int:
    if text is None or text == "":
        return default
    if not text.isdigit() or not low <= int(text) <= high:
        raise InputError(f"{name} must be a whole number from {low} to {high}, got {text!r}")
    return int(text)


def runs_page(site: Site, *, status: str | None = None, workflow: str | None = None,
              order: str | None = None, page: str | None = None,
              per_page: str | None = None) -> dict[str, Any]:
    if status and status not in COUNTED_STATES:
        raise InputError(f"status must be one of {', '.join(COUNTED_STATES)}, got {status!r}")
    if order and order not in ("newest", "oldest"):
        raise InputError(f"order must be newest or oldest, got {order!r}")
    size = _int(per_page, PER_PAGE, "per_page", 1, MAX_PER_PAGE)
    number = _int(page, 1, "page", 1, 10**9)
    store = site.store()
    view: dict[str, Any] = {"status": status or None, "workflow": workflow or None,
                            "order": order or "newest", "page": number, "per_page": size,
                            "rows": [], "counts": {}, "total": 0, "workflows": [],
                            "pages": 1}
    if store is None:
        return view
    # Per run state, as `wfrun runs` names them: done rows split into completed and
    # waiting by their ending.
    counts = state_counts(LaunchBook(store).ending_counts(workflow_ref=workflow or None))
    view["counts"] = counts
    view["all"] = sum(counts.values())
    view["total"] = counts[status] if status else view["all"]
    view["pages"] = max(1, -(-view["total"] // size))
    view["workflows"] = list(LaunchBook(store).workflow_counts())
    # A chip counts rows by status and ending alone, so its page takes exactly those rows.
    rows = counted_rows(status) if status else None
    records = LaunchBook(store).page(statuses=rows.statuses if rows else None,
                                  ending=rows.ending if rows else None,
                                  workflow_ref=workflow or None,
                                  newest_first=view["order"] == "newest",
                                  limit=size, offset=(number - 1) * size)
    reader = site.reader
    for record in records:
        row = launch_row(reader, record)
        # Ids, states and times are ours; only the free text needs masking.
        text = site.mask({"title": row.title, "error": record.error_message})
        view["rows"].append({
            "run_id": record.run_id, "workflow": record.workflow_ref,
            "launch": record.status,
            "status": row.status,
            "title": text["title"],
            "created_at": record.created_at,
            "started_at": row.started_at,
            "duration_s": row.duration_s,
            "current_node": row.current_node,
            "parent_run_id": record.parent_run_id,
            "error": text["error"]})
    return view


def run_page(site: Site, run_id: str) -> dict[str, Any]:
    """The static part of the run page: manifest, links, launch row, the graph."""
    reader = site.reader
    store = site.store()
    record = LaunchBook(store).get(run_id) if store is not None else None
    if not reader.exists(run_id):
        if record is None:
            raise NotFoundError(f"no run '{run_id}'")
        # Queued: no bundle yet; the launch row and its why are the whole story.
        return site.mask({"run_id": run_id, "bundle": False, "launch": _launch(record),
                          "status": run_state(record, None),
                          "why": _why(site, store, run_id), "title": None,
                          "workflow": record.workflow_ref, "graph": None,
                          "started_at": None, "definition_digest": None, "input": None,
                          "parent_run_id": record.parent_run_id, "continued_by": None})
    manifest = reader.manifest(run_id)
    try:
        snapshot = reader.workflow(run_id)
    except NotFoundError:
        snapshot = {"nodes": {}, "edges": []}
    bundle = run_row(reader, run_id)
    try:
        run_input = reader.state(run_id).input
    except WfrunError:
        run_input = None
    view = site.mask({
        "run_id": run_id, "bundle": True, "workflow": manifest.get("workflow"),
        "status": run_state(record, bundle.status if bundle is not None else None),
        # Secrets, writeOnly fields and credential shapes masked (shown_input), then
        # this process's secret values (site.mask).
        "input": shown_input(run_input, snapshot.get("input")),
        "title": manifest.get("title"), "started_at": manifest.get("started_at"),
        "definition_digest": manifest.get("definition_digest"),
        "parent_run_id": manifest.get("parent_run_id"),
        "continued_by": reader.continued_by(run_id),
        "launch": _launch(record) if record is not None else None,
        "why": _why(site, store, run_id) if record is not None
        and record.status in WAITING_STATES else [],
    })
    view["graph"] = render_svg(layout(snapshot))
    view["snapshot"] = snapshot
    return view


def launch_of(site: Site, run_id: str) -> LaunchRecord | None:
    """The run's launch row, None without a store or a row (the live views' state)."""
    store = site.store()
    return LaunchBook(store).get(run_id) if store is not None else None


def _launch(record: LaunchRecord) -> dict[str, Any]:
    return {"status": record.status, "workflow": record.workflow_ref,
            "runner": record.runner_id, "session": record.origin_session_id,
            "error_code": record.error_code, "error": record.error_message,
            "created_at": record.created_at, "crash_count": record.crash_count,
            "park_mode": record.park_mode}


def _why(site: Site, store: Store | None, run_id: str) -> list[str]:
    if store is None:
        return []
    try:
        reasons: list[str] = explain(site.ws, store, run_id)["reasons"]
    except WfrunError as exc:
        return [f"cannot explain: {exc.message}"]
    return reasons


def queue_page(site: Site) -> dict[str, Any]:
    """Live launches by state; each one that is not running says why."""
    store = site.store()
    groups: dict[str, list[dict[str, Any]]] = {s: [] for s in (*WAITING_STATES, "running")}
    if store is not None:
        for record in LaunchBook(store).query(statuses=list(groups),  # type: ignore[arg-type]
                                           limit=QUEUE_LIMIT):
            entry = {"run_id": record.run_id, "workflow": record.workflow_ref,
                     "status": record.status, "created_at": record.created_at,
                     "session": record.origin_session_id, "runner": record.runner_id,
                     "why": _why(site, store, record.run_id)
                     if record.status in WAITING_STATES else []}
            groups[record.status].append(site.mask(entry))
    return {"groups": groups}


def _diagnostics_text(diags: list[Diagnostic], texts: dict[str, str] | None = None) -> str:
    return render_text(diags, texts) if diags else ""


def workflows_page(site: Site) -> dict[str, Any]:
    catalog = build_catalog("workflows", site.ws.project_root, site.user_dir)
    compiler = Compiler(catalog)
    rows = []
    for entry in catalog.entries:
        result = compiler.compile_path(entry.path, display=entry.display, origin=entry.origin)
        d = result.definition
        rows.append({"name": entry.name, "source": entry.origin, "path": entry.display,
                     "shadowed_by": entry.shadowed_by, "valid": result.valid,
                     "title": d.title if d else None,
                     "digest": d.digest if d and result.valid else None,
                     "errors": sum(1 for x in result.diagnostics if x.severity == "error"),
                     "warnings": sum(1 for x in result.diagnostics if x.severity != "error"),
                     "diagnostics": _diagnostics_text(result.diagnostics, result.texts)})
    return site.mask({"rows": rows, "problems": _diagnostics_text(catalog.problems)})


def workflow_page(site: Site, name: str) -> dict[str, Any]:
    catalog = build_catalog("workflows", site.ws.project_root, site.user_dir)
    entries = [e for e in catalog.entries if e.name == name]
    if not entries:
        raise NotFoundError(f"no workflow '{name}'")
    active = next((e for e in entries if e.shadowed_by is None), entries[0])
    result = Compiler(catalog).compile_path(active.path, display=active.display,
                                            origin=active.origin)
    d = result.definition
    view = site.mask({
        "name": name, "source": active.origin, "path": active.display,
        "shadowed": [{"source": e.origin, "path": e.display, "by": e.shadowed_by}
                     for e in entries if e is not active],
        "valid": result.valid, "title": d.title if d else None,
        "description": d.description if d else None,
        "digest": d.digest if d and result.valid else None,
        "sources": [s.to_json() for s in d.sources] if d else [],
        "diagnostics": _diagnostics_text(result.diagnostics, result.texts)})
    view["graph"] = render_svg(layout(d.snapshot())) if d is not None and result.valid else None
    return view


def _ready(status: dict[str, Any]) -> str:
    for c in status.get("conditions") or []:
        if isinstance(c, dict) and c.get("type") == "Ready":
            return str(c.get("status"))
    return "Unknown"


def controllers_page(site: Site) -> dict[str, Any]:
    store = cast(ControllerStore | None, site.store())
    out = []
    for entry in discover(site.ws, site.user_dir):
        resources = []
        if store is not None and entry.shadowed_by is None:
            for r in store.resources.list(entry.name):
                phase = (r.status.get("controller_status") or {})
                resources.append({
                    "key": r.key, "generation": r.generation,
                    "resource_version": r.resource_version, "ready": _ready(r.status),
                    "phase": phase.get("phase") if isinstance(phase, dict) else None,
                    "deleting": r.deletion_timestamp is not None})
        info = entry.to_json()
        info["diagnostics"] = _diagnostics_text(list(entry.result.diagnostics))
        info["resources"] = resources
        out.append(site.mask(info))
    return {"controllers": out}


def resource_page(site: Site, controller: str, key: str) -> dict[str, Any]:
    store = cast(ControllerStore | None, site.store())
    if store is None:
        raise NotFoundError(f"no {controller} resource '{key}'")
    view = resource_view(store, controller, key)
    status = view["status"] if isinstance(view["status"], dict) else {}
    view["conditions"] = [c for c in status.get("conditions") or [] if isinstance(c, dict)]
    view["observed_generation"] = status.get("observed_generation")
    events = store.controller_events.read(controller=controller, key=key, limit=100_000)
    view["events"] = [{"seq": e.seq, "type": e.type, "reconcile_id": e.reconcile_id,
                       "payload": e.payload, "recorded_at": e.recorded_at}
                      for e in events[-EVENTS_SHOWN:]][::-1]
    view["indeterminate"] = sum(1 for e in view["effects"] if e["state"] == "indeterminate")
    # Metadata is ours (a uid looks like a token to the redactor); the rest is user data.
    metadata = view.pop("metadata")
    return {"metadata": metadata, **site.mask(view)}
