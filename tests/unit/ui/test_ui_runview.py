"""The run view folded from trace events: node states, the timeline, logs, masking."""

from __future__ import annotations

from typing import Any

from runner.ui._runview import masked, node_logs, node_states, run_live, timeline

SNAPSHOT = {"start": "a", "nodes": {"a": {"kind": "action"}, "b": {"kind": "compute"},
                                    "c": {"kind": "compute"}},
            "edges": [{"from": "a", "switch": {"on": "$.v", "cases": {"x": "b"},
                                                "default": "c"}}]}


def ev(seq: int, etype: str, node: str | None = None, **payload: Any) -> dict[str, Any]:
    event: dict[str, Any] = {"seq": seq, "type": etype, "at": f"2026-01-01T00:00:0{seq}Z",
                             "payload": payload}
    if node is not None:
        event["node"] = node
        event["attempt"] = f"att{seq}"
    return event


START = ev(1, "run_started", workflow="w", input={})


def test_a_retried_node_then_ok_and_the_route_not_taken_is_skipped() -> None:
    events = [START,
              ev(2, "node_started", "a", kind="action", retry=0),
              ev(3, "node_failed", "a", outcome="failed", will_retry=True, duration_ms=5,
                 error={"code": "nonzero_exit", "message": "boom"}),
              ev(4, "node_started", "a", kind="action", retry=1)]
    assert node_states(events, ["a", "b", "c"], "running") == {
        "a": "running", "b": "pending", "c": "pending"}
    assert node_states(events[:3], ["a", "b", "c"], "running")["a"] == "retrying"
    events += [ev(5, "node_finished", "a", outcome="ok", duration_ms=7, output={"v": "x"}),
               ev(6, "node_started", "b", kind="compute", retry=0),
               ev(7, "node_finished", "b", outcome="ok", duration_ms=1, output={}),
               ev(8, "run_completed", final_output=None)]
    view = run_live("r", events, SNAPSHOT)
    assert view["status"] == "completed"
    assert view["nodes"] == {"a": "ok", "b": "ok", "c": "skipped"}
    rows = [(r["node"], r["retry"], r["outcome"], r["error"], r["will_retry"])
            for r in view["timeline"]]
    assert rows == [("a", 0, "failed", "boom", True), ("a", 1, "ok", None, False),
                    ("b", 0, "ok", None, False)]


def test_an_interrupted_node_and_a_waiting_run() -> None:
    events = [START, ev(2, "node_started", "a"), ev(3, "run_interrupted")]
    assert node_states(events, ["a", "b"], "running") == {"a": "interrupted", "b": "pending"}
    waiting = [START, ev(2, "node_started", "a")]
    assert node_states(waiting, ["a", "b"], "waiting") == {"a": "waiting", "b": "skipped"}


def test_logs_come_from_node_log_events() -> None:
    events = [START, ev(2, "node_started", "a", retry=0),
              ev(3, "node_log", "a", stdout="out1\nout2\n", stderr="err1\n", exit_code=2,
                 stdout_truncated=True),
              ev(4, "node_failed", "a", outcome="failed", duration_ms=3,
                 error={"code": "nonzero_exit", "message": "exited with 2"})]
    lines = node_logs(events)["a"]
    assert lines[1:5] == ["--- stdout (cut at the output cap) ---", "out1", "out2",
                          "--- stderr ---"]
    assert "err1" in lines
    assert any(line.endswith("exit status 2") for line in lines)
    assert any("error nonzero_exit: exited with 2" in line for line in lines)
    assert timeline(events)[0]["outcome"] == "failed"


def test_masking_replaces_known_values_and_credential_shapes() -> None:
    value = {"say": "key=hunter2-swordfish", "nested": ["hunter2-swordfish"],
             "gh": "ghp_" + "a" * 36}
    out = masked(value, ("hunter2-swordfish",))
    assert "hunter2-swordfish" not in repr(out)
    assert "a" * 36 not in out["gh"]


def test_progress_with_an_eta_and_a_timed_out_node() -> None:
    def progress(seq: int, done: int) -> dict[str, Any]:
        event = ev(seq, "update_published", "a", type="progress", key="files",
                   data={"completed": done, "total": 10, "label": "files", "unit": "files"})
        event["at"] = f"2026-01-01T00:00:{seq:02d}Z"  # one second apart
        return event

    events = [START, ev(2, "node_started", "a"), progress(3, 2), progress(4, 4),
              ev(5, "node_failed", "a", outcome="timed_out", duration_ms=900_000,
                 error={"code": "timeout", "message": "timed out after 15m"}),
              ev(6, "run_timed_out", error={"code": "timeout", "message": "timed out"})]
    view = run_live("r", events, SNAPSHOT)
    assert view["status"] == "timed_out"
    assert view["nodes"] == {"a": "timed_out", "b": "skipped", "c": "skipped"}
    (bar,) = view["progress"]
    assert (bar["completed"], bar["total"], bar["label"]) == (4, 10, "files")
    assert bar["eta_s"] == 3.0  # 6 left at 2 per second
