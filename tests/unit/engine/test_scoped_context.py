"""The per-scope template context is kept incrementally and agrees with a full scan."""

from __future__ import annotations

import random
from typing import Any

from runner.clock import SystemClock
from runner.engine import RunControl
from runner.engine._runner import RunDriver
from runner.engine._state import RunState, ScopedValues, fold, scoped


class CountingDict(dict[str, Any]):
    """A dict that counts full scans (items / iteration)."""

    scans = 0

    def items(self) -> Any:
        type(self).scans += 1
        return super().items()

    def __iter__(self) -> Any:
        type(self).scans += 1
        return super().__iter__()


class Trace:
    def __init__(self, state: RunState, index: ScopedValues) -> None:
        self.state, self.index, self.seq = state, index, 0

    def emit(self, kind: str, node: str | None = None, **payload: Any) -> None:
        self.seq += 1
        event: dict[str, Any] = {"seq": self.seq, "type": kind, "payload": payload,
                                 "at": "2026-01-01T00:00:00Z"}
        if node is not None:
            event["node"] = node
        self.state.apply(event)
        self.index.applied(event)


def _fresh() -> tuple[RunState, ScopedValues, Trace]:
    state = RunState("r1")
    index = ScopedValues(state, lambda v: v)
    trace = Trace(state, index)
    trace.emit("run_started", workflow="w", input={})
    return state, index, trace


def _agrees(state: RunState, index: ScopedValues, scopes: list[str]) -> None:
    for scope in scopes:
        outputs, results = index.lend(scope)
        assert outputs == scoped(state.outputs, scope), scope
        assert results == scoped(state.results, scope), scope


def test_random_runs_with_includes_agree_with_a_full_scan() -> None:
    rng = random.Random(15)
    scopes = ["", "fix", "fix/sub", "other"]
    for _ in range(30):
        state, index, trace = _fresh()
        for _ in range(200):
            scope = rng.choice(scopes)
            local = rng.choice(["a", "b", "c"])
            node = f"{scope}/{local}" if scope else local
            roll = rng.random()
            if roll < 0.5:
                trace.emit("node_finished", node, output=rng.randint(0, 9))
            elif roll < 0.7:
                trace.emit("node_failed", node, error={"code": "x"},
                           will_retry=rng.random() < 0.5)
            elif roll < 0.85:
                trace.emit("include_entered", scope or "fix", mount=scope or "fix", input={})
            else:
                trace.emit("include_exited", None, mount=scope or "fix", exit="done",
                           output=rng.randint(0, 9))
            if rng.random() < 0.3:
                _agrees(state, index, scopes)
        _agrees(state, index, scopes)


def test_a_lent_view_is_a_snapshot() -> None:
    _state, index, trace = _fresh()
    trace.emit("node_finished", "a", output=1)
    seen, seen_results = index.lend("")
    trace.emit("node_finished", "b", output=2)
    trace.emit("node_failed", "a", error={"code": "x"})
    assert seen == {"a": 1}  # what the node was given does not change under it
    assert list(seen_results) == ["a"]
    assert seen_results["a"]["outcome"] == "ok"
    assert index.lend("")[0] == {"b": 2}


def test_resume_builds_the_views_from_the_folded_state() -> None:
    state, _index, trace = _fresh()
    trace.emit("node_finished", "a", output=1)
    trace.emit("node_finished", "fix/p", output=2)
    resumed = ScopedValues(state, lambda v: ["live", v])
    resumed.reset()  # as the driver does over a resumed run's state
    assert resumed.lend("")[0] == {"a": ["live", 1]}
    assert resumed.lend("fix")[0] == {"p": ["live", 2]}
    assert resumed.lend("fix")[1]["p"][0] == "live"


def test_a_driver_over_a_resumed_runs_state_builds_its_views(env: Any) -> None:
    """What the driver's nodes see of a run it resumes: the values its fold holds."""
    d = env.workflow("""
        start: a
        nodes:
          a: {compute: "{{ 1 }}"}
          b: {compute: "{{ outputs.a + 1 }}"}
        edges:
          - {from: a, to: b}
        """)
    out = env.engine().start(d)
    assert out.status == "completed", out.error
    state = fold(out.run_id, env.trace(out.run_id))
    driver = RunDriver(run_id=out.run_id, definition=d, bundle=None,  # type: ignore[arg-type]
                       state=state, clock=SystemClock(), control=RunControl(), executor=None,
                       notifications=None, observer=None, work_dir=".", project_root=None)
    context = driver.context("")
    assert context["outputs"] == {"a": 1, "b": 2}
    assert [context["results"][n]["outcome"] for n in ("a", "b")] == ["ok", "ok"]


def test_node_ends_never_rescan_every_recorded_value() -> None:
    state = RunState("r1")
    state.outputs = CountingDict()
    state.results = CountingDict()
    index = ScopedValues(state, lambda v: v)
    trace = Trace(state, index)
    CountingDict.scans = 0
    for i in range(500):
        trace.emit("node_finished", f"n{i}", output=i)
        assert index.lend("")[0][f"n{i}"] == i
    # O(1) per node: a full scan per node (the old O(n²) context) would count >= 500.
    assert CountingDict.scans == 0
