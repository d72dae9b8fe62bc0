"""What each page shows, gathered through the host's runtime views (read-only).

The run list pages in the store: every run is a launch row, so a page is one
indexed SQL query plus the bundles of that page's rows, never a fold of every
bundle. Nothing here writes: a project without a store yet shows no launches
instead of creating one.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, cast

from runner.compiler import Compiler, Diagnostic, build_catalog, render_text
from runner.engine import RunReader
from runner.errors import InputError, NotFoundError, WfrunError
from runner.host.runtime._channelnames import with_channels
from runner.host.runtime._controllers import discover, resource_view
from runner.host.runtime._launches import explain
from runner.host.runtime._local import Workspace, open_store, store_exists
from runner.host.runtime._runstate import COUNTED_STATES, counted_rows, run_state, state_counts
from runner.host.runtime._triggers import trigger_rows
from runner.host.runtime._views import launch_row, run_row, shown_input
from runner.store import LaunchBook, LaunchRecord, Store
from runner.store._controller_interface import ControllerStore

from ._graph import layout, render_svg
from ._runview import masked

WAITING_STATES = ("queued", "starting", "parked")  # not running: each gets its `why`
PER_PAGE = 50
MAX_PER_PAGE = 500
QUEUE_LIMIT = 500
SEARCH_SCAN = 500  # runs a text search reads at most (their bundles: title and input)
SEARCH_BATCH = 100
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

    def writable_store(self) -> Store:
        """The store for an action, made when this project has none yet (an action is
        the first write, as `wfrun start` is)."""
        if self._store is None:
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


def _day(text: str | None, name: str, *, end: bool) -> int | None:
    """A date filter (YYYY-MM-DD, or an ISO date and time; UTC unless it says) as epoch
    ms; a day's `until` bound is the end of that day."""
    if text is None or text == "":
        return None
    try:
        when = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise InputError(f"{name} must be a date such as 2026-01-31 or 2026-01-31T14:00, "
                         f"got {text[:40]!r}") from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    if end and len(text) == 10:
        when += timedelta(days=1)
    return int(when.timestamp() * 1000)


def runs_page(site: Site, *, status: str | None = None, workflow: str | None = None,
              order: str | None = None, page: str | None = None,
              per_page: str | None = None, search: str | None = None,
              since: str | None = None, until: str | None = None) -> dict[str, Any]:
    if status and status not in COUNTED_STATES:
        raise InputError(f"status must be one of {', '.join(COUNTED_STATES)}, got {status!r}")
    if order and order not in ("newest", "oldest"):
        raise InputError(f"order must be newest or oldest, got {order!r}")
    size = _int(per_page, PER_PAGE, "per_page", 1, MAX_PER_PAGE)
    number = _int(page, 1, "page", 1, 10**9)
    created_from = _day(since, "since", end=False)
    created_to = _day(until, "until", end=True)
    search = (search or "").strip()[:200] or None
    store = site.store()
    view: dict[str, Any] = {"status": status or None, "workflow": workflow or None,
                            "order": order or "newest", "page": number, "per_page": size,
                            "q": search, "since": since or None, "until": until or None,
                            "rows": [], "counts": {}, "total": 0, "workflows": [],
                            "pages": 1, "searched": None, "search_limited": False}
    if store is None:
        return view
    # Per run state, as `wfrun runs` names them: done rows split into completed and
    # waiting by their ending.
    counts = state_counts(LaunchBook(store).ending_counts(
        workflow_ref=workflow or None, created_from=created_from, created_to=created_to))
    view["counts"] = counts
    view["all"] = sum(counts.values())
    view["total"] = counts[status] if status else view["all"]
    view["workflows"] = list(LaunchBook(store).workflow_counts())
    # A chip counts rows by status and ending alone, so its page takes exactly those rows.
    rows = counted_rows(status) if status else None

    def fetch(limit: int, offset: int) -> list[LaunchRecord]:
        return LaunchBook(store).page(statuses=rows.statuses if rows else None,
                                   ending=rows.ending if rows else None,
                                   workflow_ref=workflow or None,
                                   newest_first=view["order"] == "newest",
                                   limit=limit, offset=offset,
                                   created_from=created_from, created_to=created_to)

    reader = site.reader
    if search is None:
        records = fetch(size, (number - 1) * size)
    else:
        records, view["searched"], view["search_limited"] = _search(site, fetch, search)
        view["total"] = len(records)
        records = records[(number - 1) * size:number * size]
    view["pages"] = max(1, -(-view["total"] // size))
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


def _search(site: Site, fetch: Callable[[int, int], list[LaunchRecord]],
            text: str) -> tuple[list[LaunchRecord], int, bool]:
    """The runs among the newest SEARCH_SCAN (after the other filters) whose id, title
    or input (as shown: masked, so a search never probes a secret) contains `text`,
    case-insensitively; (matches, runs read, whether older runs were left unread)."""
    needle = text.casefold()
    found: list[LaunchRecord] = []
    scanned = 0
    while scanned < SEARCH_SCAN:
        batch = fetch(min(SEARCH_BATCH, SEARCH_SCAN - scanned), scanned)
        for record in batch:
            if needle in record.run_id.casefold() or needle in _searchable(site, record):
                found.append(record)
        scanned += len(batch)
        if len(batch) < SEARCH_BATCH:
            return found, scanned, False
    return found, scanned, bool(fetch(1, scanned))


def _searchable(site: Site, record: LaunchRecord) -> str:
    """A run's title and shown input as one lower-cased text."""
    reader = site.reader
    parts: list[Any] = [record.workflow_ref]
    if reader.exists(record.run_id):
        try:
            manifest = reader.manifest(record.run_id)
            parts.append(manifest.get("title"))
            snapshot = reader.workflow(record.run_id)
            parts.append(shown_input(reader.state(record.run_id).input, snapshot.get("input")))
        except WfrunError:
            pass
    elif record.input_json is not None:  # queued: the row still holds it
        with contextlib.suppress(ValueError):
            parts.append(shown_input(json.loads(record.input_json), None))
    shown = site.mask({"parts": parts})
    return json.dumps(shown, ensure_ascii=False, default=str).casefold()


def audit_page(site: Site, *, run_id: str | None = None, before: str | None = None,
               limit: str | None = None) -> dict[str, Any]:
    """The newest audit rows (`wfrun audit`), paged back by `before` (a seq)."""
    size = _int(limit, PER_PAGE, "limit", 1, MAX_PER_PAGE)
    older = _int(before, 0, "before", 1, 2**62) or None
    store = site.store()
    rows = [e.to_json() for e in store.audit.newest(run_id=run_id or None, limit=size,
                                                    before_seq=older)] if store else []
    return {"rows": rows, "run_id": run_id or None,
            "next_before": rows[-1]["seq"] if len(rows) == size else None}


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
                          "parent_run_id": record.parent_run_id, "continued_by": None,
                          "deliveries": [],
                          "rerun_of": None, "rerun_from": None, "rerun_by": []})
    manifest = reader.manifest(run_id)
    try:
        snapshot = reader.workflow(run_id)
    except NotFoundError:
        snapshot = {"nodes": {}, "edges": []}
    bundle = run_row(reader, run_id)
    try:
        state = reader.state(run_id)
        run_input, rerun = state.input, state.rerun or {}
    except WfrunError:
        run_input, rerun = None, {}
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
        "rerun_of": rerun.get("of"), "rerun_from": rerun.get("from"),
        "rerun_by": [r.run_id for r in store.reruns.reruns_of(run_id)]
        if store is not None else [],
        "launch": _launch(record) if record is not None else None,
        "why": _why(site, store, run_id) if record is not None
        and record.status in WAITING_STATES else [],
    })
    view["deliveries"] = _deliveries(store, run_id)
    view["graph"] = render_svg(layout(snapshot))
    view["snapshot"] = snapshot
    return view


def _deliveries(store: Store | None, run_id: str) -> list[dict[str, Any]]:
    """Where the run's `notify` messages stand on their channels (no message text: it
    is in the trace, masked there)."""
    if store is None:
        return []
    return [{"notification_id": d.notification_id, "channel": d.channel, "node": d.node_id,
             "status": d.status, "attempts": d.attempts, "last_error": d.last_error,
             "delivered_at": d.delivered_at} for d in store.deliveries.of_run(run_id)]


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
    catalog = with_channels(build_catalog("workflows", site.ws.project_root, site.user_dir))
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
    catalog = with_channels(build_catalog("workflows", site.ws.project_root, site.user_dir))
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
    # The start form's source; masked like the rest (a default holding a secret
    # value of this process's environment is not shown).
    schema = d.snapshot().get("input") if d is not None and result.valid else None
    view["input_schema"] = site.mask({"s": schema})["s"]
    view["graph"] = render_svg(layout(d.snapshot())) if d is not None and result.valid else None
    return view


def _ready(status: dict[str, Any]) -> str:
    for c in status.get("conditions") or []:
        if isinstance(c, dict) and c.get("type") == "Ready":
            return str(c.get("status"))
    return "Unknown"


def triggers_page(site: Site) -> dict[str, Any]:
    """The project's triggers as `wfrun triggers --json` lists them (one function feeds
    both): policy, last and next firing, skipped and missed slots, paused."""
    return {"triggers": [site.mask(row) for row in trigger_rows(site.ws, site.store())]}


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
