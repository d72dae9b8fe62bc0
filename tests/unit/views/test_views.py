"""Read-only run views (DESIGN §8): ETA, progress bars, list/show key sets, follow."""

from __future__ import annotations

import re
import textwrap
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from waiting import DEADLINE

from runner.compiler import Compiler, WorkflowDefinition
from runner.engine import Engine
from runner.errors import InputError, NotFoundError
from runner.host.runtime._views import eta_seconds, follow, list_runs, progress_bars, show_run

REPO = Path(__file__).resolve().parents[3]
ROW_KEYS = {"run_id", "workflow", "status", "started_at", "finished_at", "duration_s",
            "current_node", "parent_run_id", "title", "continued_by", "created_at"}
VIEW_KEYS = {"schema", "run_id", "workflow", "title", "status", "paused", "parent_run_id",
             "continued_by", "rerun_of", "rerun", "rerun_by",
             "definition_digest", "started_at", "finished_at", "current_node", "steps",
             "waiting_on", "timeline", "outputs", "final_output", "error", "updates",
             "trace_events", "trace_torn", "failure", "input"}
TIMELINE_KEYS = {"node", "attempt", "kind", "started_at", "finished_at", "outcome",
                 "duration_ms", "error", "cached_from"}
BAR_KEYS = {"node", "key", "label", "completed", "total", "unit", "eta_s"}


# -- eta_seconds ------------------------------------------------------------------------
def test_eta_is_none_without_a_total_or_an_observed_rate() -> None:
    assert eta_seconds([(0.0, 0.0), (1.0, 5.0)], None) is None  # no total
    assert eta_seconds([], 10.0) is None
    assert eta_seconds([(0.0, 1.0)], 10.0) is None  # one sample is no rate
    assert eta_seconds([(0.0, 3.0), (1.0, 3.0), (2.0, 3.0)], 10.0) is None  # no progress
    assert eta_seconds([(1.0, 0.0), (1.0, 4.0)], 10.0) is None  # no time passed
    assert eta_seconds([(2.0, 0.0), (1.0, 4.0)], 10.0) is None  # the clock went back


def test_eta_is_remaining_over_the_median_of_the_last_8_rates() -> None:
    # Rates 1000, then 1..8 per second: the first falls out of the last 8.
    samples = [(0.0, 0.0), (0.001, 1.0)]
    t, done = 0.001, 1.0
    for rate in (1, 2, 3, 4, 5, 6, 7, 8):
        t += 1.0
        done += rate
        samples.append((t, done))
    total = done + 45.0
    assert eta_seconds(samples, total) == pytest.approx(45.0 / 4.5)


def test_eta_uses_the_middle_rate_of_an_odd_count_and_ignores_outliers() -> None:
    samples = [(0.0, 0.0), (1.0, 2.0), (2.0, 4.0), (3.0, 100.0)]  # rates 2, 2, 96
    assert eta_seconds(samples, 120.0) == pytest.approx(20.0 / 2.0)


def test_eta_is_zero_when_done_or_past_the_total() -> None:
    assert eta_seconds([(0.0, 0.0), (1.0, 10.0)], 10.0) == 0.0
    assert eta_seconds([(0.0, 0.0), (1.0, 12.0)], 10.0) == 0.0


# -- progress_bars ------------------------------------------------------------------------
def update(at: float, data: Any, *, node: str = "work", key: str = "items",
           kind: str = "progress") -> dict[str, Any]:
    stamp = datetime.fromtimestamp(at, UTC).isoformat().replace("+00:00", "Z")
    return {"type": "update_published", "node": node, "at": stamp,
            "payload": {"type": kind, "key": key, "data": data}}


def test_progress_bars_keep_the_latest_value_per_node_and_key_with_an_eta() -> None:
    base = 1_800_000_000.0
    events = [
        {"type": "node_started", "node": "work", "at": "2027-01-15T08:00:00Z", "payload": {}},
        update(base, {"completed": 0, "total": 10, "label": "files", "unit": "file"}),
        update(base + 1, {"completed": 2, "total": 10, "label": "files", "unit": "file"}),
        update(base + 2, {"completed": 4, "total": 10, "label": "files", "unit": "file"}),
        update(base + 2, {"completed": 1}, key="pages"),  # no total: no ETA
        update(base + 2, {"text": "hello"}, kind="log"),   # not progress
        update(base + 2, "not a mapping", key="odd"),       # ignored
    ]
    bars = progress_bars(events)
    assert [set(b) for b in bars] == [BAR_KEYS, BAR_KEYS]
    files, pages = bars
    assert files == {"node": "work", "key": "items", "label": "files", "completed": 4,
                     "total": 10, "unit": "file", "eta_s": pytest.approx(3.0)}
    assert pages == {"node": "work", "key": "pages", "label": "pages", "completed": 1,
                     "total": None, "unit": None, "eta_s": None}


# -- bundles: list, show, follow -----------------------------------------------------------
class Runs:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.dir = root / "runs"

    def definition(self, name: str, text: str) -> WorkflowDefinition:
        path = self.root / f"{name}.yaml"
        path.write_text(textwrap.dedent(text))
        result = Compiler().compile_path(path)
        assert result.valid, [d.message for d in result.errors]
        assert result.definition is not None
        return result.definition

    def run(self, name: str, text: str, value: Any = None) -> str:
        engine = Engine(runs_dir=self.dir, work_dir=self.root, project_root=self.root)
        return engine.start(self.definition(name, text), value).run_id


@pytest.fixture
def runs(tmp_path: Path) -> Runs:
    return Runs(tmp_path)


OK = """\
    title: "ok {{ input.who | default('x') }}"
    start: one
    nodes:
      one: {compute: "{{ 1 }}"}
      two: {compute: "{{ outputs.one + 1 }}"}
    edges: [{from: one, to: two}]
"""
FAILS = """\
    start: one
    nodes:
      one: {compute: "{{ 1 // 0 }}"}
"""
WAITS = """\
    start: ask
    nodes:
      ask: {checkpoint: "Ship it?"}
"""


def test_list_runs_rows_have_stable_keys_and_status_filters(runs: Runs) -> None:
    done = runs.run("good", OK, {"who": "me"})
    failed = runs.run("bad", FAILS)
    waiting = runs.run("gate", WAITS)
    (runs.dir / ".tmp-partial").mkdir()  # hidden folders are not runs
    (runs.dir / "not-a-run").mkdir()      # nor is a folder without a manifest

    rows = list_runs(runs.dir)
    assert {r.run_id for r in rows} == {done, failed, waiting}
    assert all(set(r.to_json()) == ROW_KEYS for r in rows)
    assert [r.run_id for r in list_runs(runs.dir, "failed")] == [failed]
    assert [r.run_id for r in list_runs(runs.dir, "completed")] == [done]
    assert [r.run_id for r in list_runs(runs.dir, "waiting")] == [waiting]
    assert list_runs(runs.dir, "cancelled") == []
    row = next(r for r in rows if r.run_id == done).to_json()
    assert row["workflow"] == "good"
    assert row["title"] == "ok me"
    assert isinstance(row["duration_s"], float)
    assert list_runs(runs.root / "nowhere") == []


def test_show_run_has_the_documented_keys_and_a_timeline(runs: Runs) -> None:
    run_id = runs.run("good", OK)

    view = show_run(runs.dir, run_id)

    assert set(view) == VIEW_KEYS
    assert view["schema"] == "wfrun.run-view.v1"
    assert view["status"] == "completed"
    assert view["final_output"] == 2
    assert [e["node"] for e in view["timeline"]] == ["one", "two"]
    assert all(set(e) == TIMELINE_KEYS for e in view["timeline"])
    assert [e["outcome"] for e in view["timeline"]] == ["ok", "ok"]
    with pytest.raises(NotFoundError):
        show_run(runs.dir, "good-20270101T000000Z-00000000")
    for bad in ("", "../x", ".hidden"):
        with pytest.raises(InputError):
            show_run(runs.dir, bad)


SLOW = """\
    start: work
    nodes:
      work: {compute: {call: "./slow.py:work"}}
      done: {compute: "{{ outputs.work }}"}
    edges: [{from: work, to: done}]
"""
# Step i waits for the file gate/<i>, which the test writes once `follow` reported the
# step before: every step is seen on its own, however the threads are scheduled.
SLOW_PY = """\
import os
import time

GATE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "gate")


def work(ctx):
    for i in range(1, 7):
        end = time.monotonic() + 60
        while not os.path.exists(os.path.join(GATE, str(i))):
            if time.monotonic() > end:
                raise TimeoutError(f"step {i} was never released")
            time.sleep(0.01)
        ctx.publish_update("progress", "items", {"completed": i, "total": 6})
    return "finished"
"""


def test_follow_reports_each_change_and_ends_with_the_run(runs: Runs) -> None:
    (runs.root / "slow.py").write_text(SLOW_PY)
    definition = runs.definition("slow", SLOW)
    engine = Engine(runs_dir=runs.dir, work_dir=runs.root, project_root=runs.root)
    _, driver = engine.create(definition, {})
    run_id = driver.run_id
    gate = runs.root / "gate"
    gate.mkdir()
    views: list[dict[str, Any]] = []
    released = [0]

    def on_view(view: dict[str, Any]) -> None:
        views.append(view)
        shown = max((b["completed"] for b in view["progress"]), default=0)
        if view["status"] == "running" and shown == released[0] < 6:
            released[0] += 1  # step `shown` was reported: let the next one happen
            (gate / str(released[0])).touch()

    worker = threading.Thread(target=lambda: driver.drive(definition.start))
    worker.start()
    try:
        final = follow(runs.dir, run_id, on_view, poll=0.02, timeout=DEADLINE)
    finally:
        worker.join(timeout=DEADLINE)

    assert final["status"] == "completed"
    assert views[-1]["status"] == "completed"
    assert {v["status"] for v in views[:-1]} == {"running"}
    counts = [v["trace_events"] for v in views]
    assert counts == sorted(set(counts))  # one view per change, never a repeat
    assert all(set(v) == VIEW_KEYS | {"progress"} for v in views)
    bars = [v["progress"][0] for v in views if v["progress"]]
    done = [b["completed"] for b in bars]
    assert done[:6] == [1, 2, 3, 4, 5, 6]  # each step seen on its own
    assert set(done[6:]) <= {6}  # then the end of the run
    assert bars[-1]["completed"] == 6
    assert bars[-1]["eta_s"] == 0.0
    assert any(b["eta_s"] is not None and b["eta_s"] > 0 for b in bars)
    assert bars[0]["eta_s"] is None  # one sample: no rate, no invented ETA


def test_follow_stops_on_request_or_timeout_while_the_run_is_still_running(
        runs: Runs) -> None:
    definition = runs.definition("good", OK)
    engine = Engine(runs_dir=runs.dir, work_dir=runs.root, project_root=runs.root)
    _, driver = engine.create(definition, {})  # created, never driven: stays running
    driver.bundle.close()
    stop = threading.Event()
    stop.set()
    assert follow(runs.dir, driver.run_id, lambda _v: None, stop=stop)["status"] == "running"
    t0 = time.monotonic()
    view = follow(runs.dir, driver.run_id, lambda _v: None, poll=0.02, timeout=0.2)
    assert view["status"] == "running"
    assert 0.2 <= time.monotonic() - t0 < DEADLINE  # it gave up (the run never ends)


# -- the documented key sets ---------------------------------------------------------------
def documented_keys() -> dict[str, set[str]]:
    """The key lists in the `Host, dev mode and views` section of docs/hosts.md."""
    text = (REPO / "docs" / "hosts.md").read_text()
    section = text.split("## Host, dev mode and views", 1)[1]
    block = re.search(r"<!-- view-keys -->\n```text\n(.*?)```", section, re.S)
    assert block is not None, "the view key block is missing from docs/hosts.md"
    out = {}
    for line in block.group(1).splitlines():
        label, _, keys = line.partition(":")
        out[label.strip()] = set(keys.split())
    return out


def test_the_json_key_sets_are_documented() -> None:
    docs = documented_keys()
    assert docs["runs --json row"] == ROW_KEYS
    assert docs["show --json"] == VIEW_KEYS | {"launch"}  # show_view adds the launch status
    assert docs["timeline entry"] == TIMELINE_KEYS
    assert docs["show --follow --json"] == {"show-keys", "progress"}
    assert docs["progress bar"] == BAR_KEYS
