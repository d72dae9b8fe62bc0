"""`wfrun init` and `wfrun prune`, and the `--since`/`--older-than` times they read.

Prune is a plan, then (with `--yes`) its execution: the plan lists every ended
run older than the cut-off and says, for each one it keeps, why. A run that has
not ended (running, paused, waiting for an answer) or that a launch row, a
pending follow-up, an undelivered notification or a controller's request still
points at is never removed.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from runner.compiler._discovery import PROJECT_DIR
from runner.compiler._durations import DurationError, parse_duration
from runner.engine._removal import finish_leftovers, forget_snapshots, remove_ended_run
from runner.errors import InputError, NotFoundError, OperationFailed
from runner.store._trimming import TRIMMED_TABLES

from ._local import Workspace
from ._storeconfig import CONFIG_FILE, load_config
from ._views import RunRow, list_runs

if TYPE_CHECKING:
    from runner.store import ProjectStore

# `wfrun runs --status` names for ended runs; `continued` is an answered checkpoint.
PRUNABLE = ("completed", "failed", "timed_out", "cancelled", "continued")
GITIGNORE_LINES = (".wfrun/runs/", ".wfrun/state/")
EXAMPLE_NAME = "hello"
EXAMPLE = """\
# A first workflow: `wfrun run hello -i name=you`. The format: docs/workflows.md.
title: "hello {{ input.name }}"
description: Greets someone, runs one command and fails on purpose when it fails.
input:
  type: object
  required: [name]
  properties: {name: {type: string, description: who to greet}}
start: greet
nodes:
  greet: {compute: "{{ {'greeting': 'hello ' ~ input.name} }}"}
  check:
    # Input goes to a command as an argument of its own, never spliced into shell code.
    action: {shell: [echo, "checking for", "{{ input.name }}"]}
  done: {notify: {kind: final, message: "{{ outputs.greet.greeting }}"}}
  broken: {fail: {message: "the check failed: {{ results.check.error.message }}"}}
edges:
  - {from: greet, to: check}
  - {from: check, switch: {on: $result.outcome, cases: {ok: done, failed: broken}}}
"""


def parse_age(text: str, what: str) -> float:
    """`30m`, `2h`, `7d`, ... as seconds; an InputError naming `what` otherwise."""
    try:
        seconds = parse_duration(text.strip())
    except DurationError as exc:
        raise InputError(f"{what} takes an age like 2h or 7d, not '{text}': {exc}") from None
    if seconds is None:
        raise InputError(f"{what} takes an age like 2h or 7d, not '{text}'")
    return seconds


def parse_since(text: str, now: float) -> float:
    """`--since`: an age (`2h`, `7d`: that long before `now`) or an ISO date or time
    (`2026-01-31`, `2026-01-31T12:00:00Z`, UTC unless it says otherwise); epoch s."""
    stripped = text.strip()
    if stripped[:4].isdigit() and "-" in stripped:
        try:
            at = datetime.fromisoformat(stripped.replace("Z", "+00:00"))
        except ValueError:
            raise InputError(f"--since '{text}' is not a date like 2026-01-31 or "
                             "2026-01-31T12:00:00Z, nor an age like 2h or 7d") from None
        return (at if at.tzinfo else at.replace(tzinfo=UTC)).timestamp()
    return now - parse_age(stripped, "--since")


# -- init ------------------------------------------------------------------------------
@dataclass
class InitReport:
    root: Path
    created: list[str] = field(default_factory=list)  # paths relative to root
    kept: list[str] = field(default_factory=list)  # already there, left alone

    def to_json(self) -> dict[str, Any]:
        return {"project": str(self.root), "created": self.created, "kept": self.kept}


def init_project(root: Path) -> InitReport:
    """`.wfrun/workflows/` with an example workflow and the `.gitignore` lines for
    runs and state; anything already there is kept as it is (safe to run again)."""
    try:
        root = root.expanduser().resolve(strict=True)
    except (OSError, RuntimeError):
        raise NotFoundError(f"folder '{root}' does not exist; create it first") from None
    if not root.is_dir():
        raise InputError(f"'{root}' is not a folder")
    report = InitReport(root)
    workflows = root / PROJECT_DIR / "workflows"
    for folder in (root / PROJECT_DIR, workflows):
        rel = str(folder.relative_to(root)) + "/"
        if folder.is_dir():
            report.kept.append(rel)
            continue
        try:
            folder.mkdir(mode=0o755)
        except OSError as exc:
            raise OperationFailed(f"cannot create {folder}: {exc.strerror}") from None
        report.created.append(rel)
    example = workflows / f"{EXAMPLE_NAME}.yaml"
    rel = str(example.relative_to(root))
    if any(workflows.glob("*.y*ml")):
        report.kept.append(str(workflows.relative_to(root)) + "/*.yaml")
    else:
        _write_new(example, EXAMPLE)
        report.created.append(rel)
    _gitignore(root / ".gitignore", report)
    return report


def _write_new(path: Path, text: str) -> None:
    try:
        with open(path, "x", encoding="utf-8") as fh:
            fh.write(text)
    except OSError as exc:
        raise OperationFailed(f"cannot write {path}: {exc.strerror}") from None


def _gitignore(path: Path, report: InitReport) -> None:
    try:
        existing = path.read_text(encoding="utf-8") if path.exists() else ""
    except (OSError, UnicodeDecodeError):
        raise OperationFailed(f"cannot read {path}; add {' and '.join(GITIGNORE_LINES)} "
                              "to it yourself") from None
    present = {line.strip() for line in existing.splitlines()}
    missing = [line for line in GITIGNORE_LINES if line not in present]
    if not missing:
        report.kept.append(".gitignore")
        return
    block = ("" if not existing or existing.endswith("\n") else "\n") + (
        "# wfrun: run bundles and the local store (docs/hosts.md)\n" if existing == ""
        or "# wfrun" not in existing else "") + "".join(f"{line}\n" for line in missing)
    try:
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(block)
    except OSError as exc:
        raise OperationFailed(f"cannot write {path}: {exc.strerror}") from None
    report.created.append(".gitignore" if not existing else ".gitignore (appended)")


# -- prune -----------------------------------------------------------------------------
@dataclass
class PrunePlan:
    cutoff: float
    remove: list[RunRow] = field(default_factory=list)
    keep: dict[str, str] = field(default_factory=dict)  # run id -> why it stays
    # A store table's own history cut-off (epoch s), from `retention:` in config.yaml.
    history: dict[str, float] = field(default_factory=dict)

    def to_json(self, *, removed: bool) -> dict[str, Any]:
        def iso(at: float) -> str:
            return datetime.fromtimestamp(at, UTC).isoformat()

        history = {name: iso(self.history.get(name, self.cutoff)) for name in TRIMMED_TABLES}
        return {"cutoff": iso(self.cutoff),
                "removed" if removed else "would_remove": [r.run_id for r in self.remove],
                "kept": [{"run_id": k, "why": v} for k, v in sorted(self.keep.items())],
                "history_cutoffs": history}


def retention_settings(project_root: Path | None) -> dict[str, float]:
    """`retention:` in `.wfrun/config.yaml`: a store table that only grows, each with
    the age its history is kept for (`effects: 90d`); tables not named follow
    `--older-than`."""
    if project_root is None:
        return {}
    data = load_config(project_root).get("retention")
    origin = f"{PROJECT_DIR}/{CONFIG_FILE} retention"
    if data is None:
        return {}
    if not isinstance(data, Mapping):
        raise InputError(f"{origin} must map tables to ages, for example "
                         "`retention: {run_events: 30d, effects: 90d}`")
    ages: dict[str, float] = {}
    for name, value in data.items():
        if name not in TRIMMED_TABLES:
            raise InputError(f"{origin}: no table {name!r}; retention takes "
                             f"{', '.join(TRIMMED_TABLES)}")
        ages[str(name)] = parse_age(str(value), f"{origin} {name}")
    return ages


def plan_prune(ws: Workspace, store: ProjectStore | None, older_than: float, now: float,
               statuses: tuple[str, ...] = ()) -> PrunePlan:
    """Ended runs that started before `now - older_than` (only `statuses`, if given),
    and each history table's cut-off (`retention:` settings, else the same age)."""
    for status in statuses:
        if status not in PRUNABLE:
            raise InputError(f"--status {status} is not an ended state; prune takes "
                             f"{', '.join(PRUNABLE)}")
    plan = PrunePlan(cutoff=now - older_than,
                     history={name: now - age
                              for name, age in retention_settings(ws.project_root).items()})
    old: list[RunRow] = []
    for row in list_runs(ws.reader(store)):
        started = _epoch(row.started_at or row.finished_at)
        if started is None or started >= plan.cutoff:
            continue
        if row.status not in PRUNABLE:
            plan.keep[row.run_id] = f"it is {row.status}, not ended"
            continue
        if statuses and row.status not in statuses:
            continue
        old.append(row)
    pinned = store.retention.pinned([r.run_id for r in old]) if store is not None else {}
    for row in old:
        if row.run_id in pinned:
            plan.keep[row.run_id] = pinned[row.run_id]
        else:
            plan.remove.append(row)
    return plan


def execute_prune(ws: Workspace, store: ProjectStore | None, plan: PrunePlan) -> PrunePlan:
    """Remove the planned bundles, then their store rows and old history. A run that
    changed since the plan (held open, resumed) is kept and reported, not forced."""
    finish_leftovers(ws.runs_dir)
    done = PrunePlan(plan.cutoff, keep=dict(plan.keep), history=dict(plan.history))
    pinned = store.retention.pinned([r.run_id for r in plan.remove]) if store else {}
    for row in plan.remove:
        if row.run_id in pinned:
            done.keep[row.run_id] = pinned[row.run_id]
            continue
        try:
            remove_ended_run(ws.runs_dir, row.run_id, ws.bundle_rows(store))
        except (InputError, OperationFailed) as exc:  # held by a process, or changed
            done.keep[row.run_id] = exc.message
            continue
        done.remove.append(row)
    forget_snapshots(ws.runs_dir)
    if store is not None:
        store.retention.forget_runs([r.run_id for r in done.remove])
        store.retention.trim(int(plan.cutoff * 1000),
                             tables={k: int(v * 1000) for k, v in plan.history.items()})
    return done


def _epoch(text: str | None) -> float | None:
    if not text:
        return None
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def store_if_present(ws: Workspace) -> ProjectStore | None:
    """The project's store when it exists (prune never creates one)."""
    from ._local import open_store, store_choice, store_path

    if store_choice(ws).url is not None:  # Postgres: always there (its pins must count)
        return open_store(ws)
    return open_store(ws) if store_path(ws).exists() else None
