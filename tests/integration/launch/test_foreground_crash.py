"""Issue 34 item 9: a run that crashes in a foreground runner (an unexpected exception
on the run path, not a node failure) says what happened: `wfrun run` gets the
exception's class and its masked text, instead of "see the host log" (a foreground
run has no host). What is persisted keeps the class alone (an exception's text may
hold input) and says where the cause went."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import pytest

from runner.compiler import build_catalog
from runner.engine import RunControl, RunReader
from runner.errors import OperationFailed
from runner.host.runtime._foreground import run_workflow
from runner.host.runtime._local import Workspace, open_store

TOKEN = "zebra-cabbage-31"
FLOW = """\
secrets: [TOKEN]
start: one
nodes:
  one: {compute: "{{ {'n': 1} }}"}
"""


def test_a_foreground_crash_says_its_cause_masked(tmp_path: Path) -> None:
    root = tmp_path / "proj"
    (root / ".wfrun" / "workflows").mkdir(parents=True)
    (root / ".wfrun" / "workflows" / "flow.yaml").write_text(textwrap.dedent(FLOW))
    ws = Workspace(build_catalog("workflows", root, None), root, root / "state")
    store = open_store(ws)

    def observer(event: dict[str, Any], _state: Any) -> None:
        if event["type"] == "node_started":  # a bug in the runner's own code, mid-run
            raise RuntimeError(f"observer broke\nnear {TOKEN}")

    try:
        with pytest.raises(OperationFailed) as raised:
            run_workflow(ws, store, "flow", {}, RunControl(), observer=observer,
                         secrets={"TOKEN": TOKEN})
        (run_id,) = RunReader(ws.runs_dir).list_ids()
        shown = "the run crashed (RuntimeError: observer broke near [redacted])"
        assert raised.value.message == f"run {run_id} failed: {shown} [run_failed]"
        cause = "the run crashed (RuntimeError); the runner that ran it logged the cause"
        record = store.launches.get(run_id)
        assert record is not None
        assert (record.status, record.error_code, record.error_message) == (
            "failed", "run_failed", cause)
        state = RunReader(ws.runs_dir).state(run_id)
        assert state.status == "failed"
        assert state.error is not None
        assert (state.error.get("code"), state.error.get("message")) == ("crashed", cause)
    finally:
        store.close()
