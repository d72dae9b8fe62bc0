"""The store's disk fills while a foreground run is under way (issue 35): one line for
the user, no traceback in the log, the run bundle's lock let go, and nothing lost: once
space returns, the launch is settled from its bundle. A real tmpfs filled to its last
page (tests/machinefaults.py) at a named point of the run path."""

from __future__ import annotations

import logging
import textwrap
from pathlib import Path

import machinefaults as mf
import pytest

from runner.compiler import build_catalog
from runner.engine import RunControl
from runner.errors import TemporaryError
from runner.host.runtime._foreground import foreground_coordinator, run_workflow
from runner.host.runtime._local import Workspace, open_store

# `a` may be retried after a delay, so the run is not written whole with its ending
# (ADR 0009, lever 3): it goes `running` first, the store write this test refuses.
# A pure run meets the full disk at its bundle's write first (test_a_full_disk_...).
FLOW = """
    start: a
    nodes:
      a: {compute: "{{ 1 }}", retry: {attempts: 2, backoff: 1s}}
      b: {compute: "{{ outputs.a + 1 }}"}
    edges:
      - {from: a, to: b}
"""


@pytest.mark.parametrize("point", ["during_starting", "before_seal"])
def test_a_full_store_disk_is_one_line_and_loses_nothing(
        tmp_path: Path, point: str, caplog: pytest.LogCaptureFixture) -> None:
    with mf.tmpfs(tmp_path / "disk", "4m") as disk:
        root = disk / "proj"
        (root / ".wfrun" / "workflows").mkdir(parents=True)
        (root / ".wfrun" / "workflows" / "g.yaml").write_text(textwrap.dedent(FLOW))
        ws = Workspace(build_catalog("workflows", root, None), root, root / ".wfrun")
        filler: list[Path] = []

        def at(name: str) -> None:
            if name == point and not filler:
                filler.append(mf.fill(disk))  # `mark_running`, or the ending, is refused

        ws.crash_point = at
        store = open_store(ws)
        try:
            with caplog.at_level(logging.WARNING), pytest.raises(TemporaryError) as refused:
                run_workflow(ws, store, "g", {}, RunControl())
            message = refused.value.message
            assert "no space left on the device holding the store" in message
            assert "Traceback" not in message
            assert "\n" not in message
            assert not [r for r in caplog.records if r.exc_info], caplog.text
            [row] = store.launches.query()
            assert row.status in ("starting", "running")

            filler[0].unlink()  # space returns; the process that ran it is gone
            ws.crash_point = None
            coordinator = foreground_coordinator(ws, store)
            record = coordinator.claim(row.run_id, dead_runner=row.runner_id)
            outcome = coordinator.execute(record, control=RunControl())
            assert outcome is not None
            assert outcome.status == "completed"
            assert outcome.final_output == 2
            settled = store.launches.get(row.run_id)
            assert settled is not None
            assert settled.status == "done"
        finally:
            store.close()


def test_a_full_disk_under_a_pure_run_is_one_line_and_nothing_ran(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A pure run's bundle is written whole at its seal, before its ending commits (ADR
    0013): a full disk refuses that write, the half-made bundle is discarded, the
    ending is never committed, and nothing of the run is on disk: one line, and the
    start can simply be made again."""
    with mf.tmpfs(tmp_path / "disk", "4m") as disk:
        root = disk / "proj"
        (root / ".wfrun" / "workflows").mkdir(parents=True)
        pure = FLOW.replace(', retry: {attempts: 2, backoff: 1s}', "")
        (root / ".wfrun" / "workflows" / "g.yaml").write_text(textwrap.dedent(pure))
        ws = Workspace(build_catalog("workflows", root, None), root, root / ".wfrun")
        filler: list[Path] = []

        def at(name: str) -> None:
            if name == "before_seal" and not filler:
                filler.append(mf.fill(disk))

        ws.crash_point = at
        store = open_store(ws)
        try:
            with caplog.at_level(logging.WARNING), pytest.raises(TemporaryError) as refused:
                run_workflow(ws, store, "g", {}, RunControl())
            message = refused.value.message
            assert "did not start (nothing ran)" in message
            assert "no space left on the device" in message
            assert "\n" not in message
            assert not [r for r in caplog.records if r.exc_info], caplog.text
            [row] = store.launches.query()
            assert row.status in ("starting", "failed")  # never `running`: nothing ran
            assert not [p for p in (root / ".wfrun" / "runs").iterdir()
                        if not p.name.startswith(".")]
            filler[0].unlink()
            ws.crash_point = None
            outcome = run_workflow(ws, store, "g", {}, RunControl())
            assert (outcome.status, outcome.final_output) == ("completed", 2)
        finally:
            store.close()

