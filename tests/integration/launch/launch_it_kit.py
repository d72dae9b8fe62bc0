"""Helpers for the launch integration tests: projects, driver processes, evidence.

The evidence a test reads after a crash and restart is all on disk: the store
file, the run bundles, the session log (JSONL) and `effects.log`, where every
shell node appends `<node> <run id>` once its side effect is done. A `Project`
with a `store_url` keeps its store (and its run bundles, as rows) in that
Postgres schema instead; the same views read it.
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import textwrap
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from runner.engine._bundlefmt import MANIFEST, parse_trace
from runner.engine._reader import RunReader
from runner.store import SqliteStore, Store

HERE = Path(__file__).resolve().parent
DRIVER = HERE / "launch_driver.py"
RACER = HERE / "launch_racer.py"
TERMINAL = ("done", "failed", "cancelled")

# before (shell) -> plan (agent step in the session) -> after (shell) -> report (notify)
STEADY = """\
    input: {type: object, required: [task], properties: {task: {type: string}}}
    start: before
    nodes:
      before:
        action: {use_shell: true, shell: "echo before {{ run.id }} >> effects.log"}
      plan:
        agent:
          prompt: "Plan {{ input.task }}"
          output: {type: object, required: [summary], properties: {summary: {type: string}}}
      after:
        action: {use_shell: true, shell: "echo after {{ run.id }} >> effects.log"}
      report: {notify: {kind: final, message: "finished v1: {{ outputs.plan.summary }}"}}
    edges:
      - {from: before, to: plan}
      - {from: plan, to: after}
      - {from: after, to: report}
"""
TINY = """\
    start: one
    nodes:
      one: {compute: "{{ 1 }}"}
"""


@dataclass
class Project:
    root: Path
    store_url: str | None = None  # a Postgres schema; None: the SQLite file

    @property
    def store_path(self) -> Path:
        return self.root / ".wfrun" / "state" / "store.sqlite3"

    @property
    def runs_dir(self) -> Path:
        return self.root / ".wfrun" / "runs"

    @property
    def session_log(self) -> Path:
        return self.root / "session.jsonl"

    def write_workflow(self, name: str, text: str) -> None:
        folder = self.root / ".wfrun" / "workflows"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"{name}.yaml").write_text(textwrap.dedent(text))

    # -- processes -------------------------------------------------------------------
    def drive(self, point: str, *, prompt: str | None = None, offset: float = 0.0,
              timeout: float = 45.0) -> subprocess.CompletedProcess[str]:
        argv = [sys.executable, str(DRIVER), str(self.root), str(self.session_log), point,
                "--offset", str(offset)]
        if prompt is not None:
            argv += ["--prompt", prompt]
        if self.store_url is not None:
            argv += ["--store", self.store_url]
        return subprocess.run(argv, cwd=self.root, capture_output=True, text=True,
                              timeout=timeout, check=False)

    # -- evidence --------------------------------------------------------------------
    def open_store(self) -> Store:
        if self.store_url is None:
            return SqliteStore(self.store_path)
        from runner.store.postgres import PostgresStore

        return PostgresStore(self.store_url, pool_size=1)

    def launches(self) -> list[Any]:
        with self.open_store() as store:
            return store.launches.query()

    def rows(self, sql: str, params: tuple[Any, ...] = ()) -> list[Any]:
        """Raw rows by column name, read-only (the intents table keeps resolved intents
        too). `sql` in the backend's own placeholder style."""
        if self.store_url is not None:
            import psycopg
            from psycopg.rows import dict_row

            with psycopg.connect(self.store_url, row_factory=dict_row) as pg:
                return pg.execute(sql, params).fetchall()
        conn = sqlite3.connect(self.store_path.as_uri() + "?mode=ro", uri=True)
        conn.row_factory = sqlite3.Row
        try:
            return conn.execute(sql, params).fetchall()
        finally:
            conn.close()

    def intents(self) -> list[sqlite3.Row]:
        return self.rows("SELECT * FROM workflow_turn_intents ORDER BY requested_at")

    def session_entries(self) -> list[dict[str, Any]]:
        if not self.session_log.exists():
            return []
        out = []
        for line in self.session_log.read_text().splitlines():
            try:
                raw = json.loads(line)
            except ValueError:
                continue
            if raw.get("type") != "session":
                out.append(raw)
        return out

    def custom(self, custom_type: str) -> list[dict[str, Any]]:
        return [e for e in self.session_entries()
                if e["type"] == "custom_message" and e.get("custom_type") == custom_type]

    def effects(self) -> Counter[tuple[str, str]]:
        path = self.root / "effects.log"
        if not path.exists():
            return Counter()
        return Counter(tuple(line.split()) for line in path.read_text().splitlines()
                       if line.strip())  # type: ignore[misc]

    def trace(self, run_id: str) -> list[dict[str, Any]]:
        if self.store_url is not None:
            with self.open_store() as store:
                reader = RunReader(self.runs_dir, store.bundles)  # type: ignore[attr-defined]
                return reader.trace(run_id) if reader.exists(run_id) else []
        path = self.runs_dir / run_id / "trace.jsonl"
        if not path.exists():
            return []
        return parse_trace(path.read_bytes()).events

    def manifest(self, run_id: str) -> dict[str, Any] | None:
        if self.store_url is not None:
            with self.open_store() as store:
                text = store.bundles.read_document(  # type: ignore[attr-defined]
                    run_id, "manifest")
            if text is None:
                return None
            document: dict[str, Any] = json.loads(text)
            return document
        path = self.runs_dir / run_id / MANIFEST
        if not path.exists():
            return None
        data: dict[str, Any] = json.loads(path.read_text())
        return data

    def bundles(self) -> list[str]:
        if self.store_url is not None:
            with self.open_store() as store:
                return sorted(store.bundles.bundle_ids())  # type: ignore[attr-defined]
        if not self.runs_dir.exists():
            return []
        return sorted(p.name for p in self.runs_dir.iterdir() if not p.name.startswith("."))


def event_counts(events: list[dict[str, Any]]) -> Counter[tuple[str, str | None]]:
    return Counter((e["type"], e.get("node")) for e in events)
