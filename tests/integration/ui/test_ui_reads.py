"""The reads `wfrun ui` adds below it: the store's paged launch list and counts (real
SQLite), and the reader's trace tail (real bundle files, a torn last line)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from runner.engine import RunReader
from runner.store import NewLaunch, SqliteStore


class Clock:
    def __init__(self) -> None:
        self.t = 1_800_000_000.0

    def now(self) -> float:
        self.t += 1.0  # every launch one second after the last
        return self.t


def _launch(run_id: str, workflow: str) -> NewLaunch:
    return NewLaunch(run_id=run_id, workflow_ref=workflow,
                     source={"kind": "file", "path": f"/p/{workflow}.yaml", "sha256": "ab" * 32},
                     definition_digest="sha256:" + "cd" * 32, input={})


@pytest.fixture
def store(tmp_path: Path) -> SqliteStore:
    store = SqliteStore(tmp_path / "store.sqlite3", clock=Clock())
    for i in range(25):
        store.launches.enqueue(_launch(f"run-{i:02d}", "alpha" if i % 5 else "beta"))
    for i in (3, 7, 11):
        store.launches.cancel(f"run-{i:02d}")
    return store


def test_pages_are_newest_first_and_cut_in_sql(store: SqliteStore) -> None:
    first = store.launches.page(limit=10)
    assert [r.run_id for r in first] == [f"run-{i:02d}" for i in range(24, 14, -1)]
    third = store.launches.page(limit=10, offset=20)
    assert [r.run_id for r in third] == [f"run-{i:02d}" for i in range(4, -1, -1)]
    assert store.launches.page(limit=10, offset=30) == []
    oldest = store.launches.page(limit=3, newest_first=False)
    assert [r.run_id for r in oldest] == ["run-00", "run-01", "run-02"]


def test_pages_filter_by_status_and_workflow(store: SqliteStore) -> None:
    cancelled = store.launches.page(statuses=["cancelled"])
    assert [r.run_id for r in cancelled] == ["run-11", "run-07", "run-03"]
    beta = store.launches.page(workflow_ref="beta")
    assert [r.run_id for r in beta] == ["run-20", "run-15", "run-10", "run-05", "run-00"]
    both = store.launches.page(statuses=["queued"], workflow_ref="alpha", limit=100)
    assert len(both) == 20 - 3
    assert store.launches.page(statuses=[]) == []
    with pytest.raises(ValueError, match="unknown launch status"):
        store.launches.page(statuses=["bogus"])  # type: ignore[list-item]


def test_counts_per_status_and_per_workflow(store: SqliteStore) -> None:
    assert store.launches.counts() == {"queued": 22, "cancelled": 3}
    assert store.launches.counts(workflow_ref="beta") == {"queued": 5}
    assert store.launches.workflow_counts() == {"alpha": 20, "beta": 5}


def _event(seq: int, kind: str = "node_started") -> bytes:
    return (json.dumps({"seq": seq, "type": kind, "node": "a", "payload": {}}) + "\n").encode()


def test_the_trace_tail_reads_only_whole_new_events(tmp_path: Path) -> None:
    bundle = tmp_path / "runs" / "r1"
    bundle.mkdir(parents=True)
    trace = bundle / "trace.jsonl"
    trace.write_bytes(_event(1, "run_started") + _event(2))
    reader = RunReader(tmp_path / "runs")
    first = reader.trace_tail("r1", 0, 1)
    assert [e["seq"] for e in first.events] == [1, 2]
    assert first.valid_bytes == trace.stat().st_size

    whole = _event(3, "node_finished")
    with trace.open("ab") as fh:
        fh.write(whole + _event(4)[:10])  # a torn, half-written fourth line
    second = reader.trace_tail("r1", first.valid_bytes, 3)
    assert [e["seq"] for e in second.events] == [3]
    assert second.torn
    assert second.valid_bytes == first.valid_bytes + len(whole)

    with trace.open("ab") as fh:
        fh.write(_event(4)[10:])  # the write completes
    third = reader.trace_tail("r1", second.valid_bytes, 4)
    assert [e["seq"] for e in third.events] == [4]
    assert not third.torn
    assert reader.trace_tail("r1", third.valid_bytes, 5).events == []


def test_a_tail_out_of_sequence_reads_nothing(tmp_path: Path) -> None:
    (tmp_path / "runs" / "r1").mkdir(parents=True)
    (tmp_path / "runs" / "r1" / "trace.jsonl").write_bytes(_event(1) + _event(2))
    assert RunReader(tmp_path / "runs").trace_tail("r1", 0, 5).events == []
