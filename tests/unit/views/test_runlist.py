"""`wfrun runs` paged in the store (issue 15): only the page's bundles are read, and
every filter agrees with the fold of every bundle it replaces."""

from __future__ import annotations

import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from runner.clock import FakeClock
from runner.compiler import build_catalog
from runner.engine import RunControl, RunReader
from runner.host.runtime._foreground import answer_run, run_workflow
from runner.host.runtime._local import Workspace, open_store
from runner.host.runtime._runlist import DEFAULT_LIMIT, list_runs_paged, page_runs
from runner.host.runtime._views import RunFilter, list_runs

WORKFLOWS = {
    "quick": """
        start: one
        nodes:
          one: {compute: "{{ {'n': input.n} }}"}
    """,
    # Its run ids also begin with `quick-`: the workflow filter must not take them.
    "quick-two": """
        start: one
        nodes:
          one: {compute: "{{ {'n': 2} }}"}
    """,
    "boom": """
        start: fail
        nodes:
          fail: {action: {shell: [sh, -c, "exit 3"]}}
    """,
    "approve": """
        start: ask
        nodes:
          ask: {checkpoint: {summary: "Ship it?"}}
          after: {compute: "{{ {'answer': outputs.ask.answer} }}"}
        edges:
          - {from: ask, to: after}
    """,
}


class CountingReader(RunReader):
    """The real reader, counting which bundles a listing opens."""

    def __init__(self, runs_dir: Path) -> None:
        super().__init__(runs_dir)
        self.opened: list[str] = []

    def manifest(self, run_id: str) -> dict[str, Any]:
        self.opened.append(run_id)
        return super().manifest(run_id)


class Project:
    def __init__(self, root: Path) -> None:
        folder = root / ".wfrun" / "workflows"
        folder.mkdir(parents=True)
        for name, text in WORKFLOWS.items():
            (folder / f"{name}.yaml").write_text(f"name: {name}\n" + textwrap.dedent(text))
        catalog = build_catalog("workflows", root, None)
        self.clock = FakeClock(start=1_900_000_000.0)
        self.ws = Workspace(catalog, root, root / "state", clock=self.clock)
        self.store = open_store(self.ws)

    def run(self, name: str, value: Any = None) -> str:
        self.clock.advance(10)  # each run starts later than the one before
        outcome = run_workflow(self.ws, self.store, name, value or {}, RunControl())
        return outcome.run_id

    def answer(self, run_id: str) -> str:
        self.clock.advance(10)
        return answer_run(self.ws, self.store, run_id, {"ok": True}, RunControl()).run_id

    def page(self, reader: RunReader | None = None, **where: Any) -> list[str]:
        got = page_runs(self.store, reader or RunReader(self.ws.runs_dir), RunFilter(**where))
        return [r.run_id for r in got.rows]

    def fold(self, **where: Any) -> list[str]:
        return [r.run_id for r in list_runs(self.ws.runs_dir, where=RunFilter(**where))]


@pytest.fixture
def project(tmp_path: Path) -> Iterator[Project]:
    p = Project(tmp_path)
    yield p
    p.store.close()


def test_the_first_page_reads_only_the_bundles_of_its_rows(project: Project) -> None:
    ids = [project.run("quick", {"n": i}) for i in range(8)]
    reader = CountingReader(project.ws.runs_dir)
    page = page_runs(project.store, reader, RunFilter(limit=3))
    assert [r.run_id for r in page.rows] == ids[::-1][:3]
    assert page.more is True
    # The page, plus one row to know that more match: never the other four bundles.
    assert reader.opened == ids[::-1][:4]


def test_a_damaged_bundle_off_the_page_does_not_touch_the_page(project: Project) -> None:
    ids = [project.run("quick", {"n": i}) for i in range(4)]
    # The oldest bundle's trace is a directory: reading it fails (OSError).
    trace = project.ws.runs_dir / ids[0] / "trace.jsonl"
    trace.unlink()
    trace.mkdir()
    assert project.page(limit=2) == ids[::-1][:2]


def test_every_status_filter_agrees_with_the_fold_of_every_bundle(project: Project) -> None:
    project.run("quick", {"n": 1})
    project.run("boom")
    waiting = project.run("approve")
    answered = project.run("approve")
    child = project.answer(answered)  # `answered` now reads as continued
    project.run("quick-two")
    for status in ("completed", "failed", "waiting", "continued", "running", "paused",
                   "timed_out", "cancelled", None):
        assert project.page(status=status) == project.fold(status=status), status
    assert project.page(status="waiting") == [waiting]
    assert project.page(status="continued") == [answered]
    assert child in project.page(status="completed")
    assert len(project.page()) == 6


def test_the_workflow_filter_is_exact_though_run_ids_share_a_prefix(
        project: Project) -> None:
    quick = [project.run("quick", {"n": i}) for i in range(2)]
    project.run("quick-two")
    project.run("boom")
    assert project.page(workflow="quick") == quick[::-1]
    assert project.page(workflow="quick-two") == project.fold(workflow="quick-two")
    assert project.page(workflow="nosuch") == []


def test_since_keeps_runs_started_at_or_after_it(project: Project) -> None:
    old = project.run("quick", {"n": 0})
    project.clock.advance(3600)
    cut = project.clock.now()
    new = [project.run("quick", {"n": i}) for i in range(2)]
    assert project.page(since=cut) == new[::-1] == project.fold(since=cut)
    assert old in project.page(since=cut - 7200)


def test_a_filter_that_skips_many_rows_still_fills_the_page(project: Project) -> None:
    # Waiting runs are done rows like completed ones: the scan goes past a whole
    # first SQL chunk of completed runs to find them.
    waiting = project.run("approve")
    for i in range(70):
        project.run("quick", {"n": i})
    assert project.page(status="waiting") == [waiting]
    assert len(project.page()) == DEFAULT_LIMIT
    assert len(project.page(limit=71)) == 71


def test_waiting_pages_in_sql_and_opens_no_completed_bundle(project: Project) -> None:
    waiting = project.run("approve")
    answered = project.run("approve")
    project.answer(answered)
    completed = [project.run("quick", {"n": i}) for i in range(5)]
    reader = CountingReader(project.ws.runs_dir)
    assert project.page(reader, status="waiting") == [waiting]
    assert not set(reader.opened) & set(completed)  # the row's ending said so
    assert project.page(status="continued") == [answered]


def test_a_project_without_a_store_lists_nothing_and_creates_nothing(tmp_path: Path) -> None:
    (tmp_path / ".wfrun").mkdir()
    ws = Workspace(build_catalog("workflows", tmp_path, None), tmp_path, tmp_path / "state")
    page = list_runs_paged(ws, RunFilter())
    assert page.rows == []
    assert page.more is False
    assert not (tmp_path / ".wfrun" / "state").exists()
