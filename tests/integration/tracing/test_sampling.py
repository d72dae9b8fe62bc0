"""The sampler (OTEL_TRACES_SAMPLER) decides once per run and its decision covers the
run span and every node span alike, and the TRACEPARENT a step sees says it: runs of
a real Engine in this process, spans sent by the real exporter to the OTLP/HTTP
receiver on 127.0.0.1 (tests/fakes/otlp_receiver.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fakes.otlp_receiver import OtlpReceiver
from opentelemetry.sdk.trace.sampling import Decision, TraceIdRatioBased
from waiting import wait_until

from runner.compiler import Compiler, WorkflowDefinition
from runner.engine import Engine, _tracing

CHAIN = """\
name: sampled
start: a
nodes:
  a: {compute: "{{ 1 }}"}
  b: {action: {shell: [sh, -c, "echo \\"$TRACEPARENT\\" > seen-{{ run.id }}.txt"]}}
  c: {compute: "{{ 2 }}"}
edges: [{from: a, to: b}, {from: b, to: c}]
"""
RUNS = 24


@pytest.fixture
def traced(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[OtlpReceiver, pytest.MonkeyPatch]]:
    receiver = OtlpReceiver().start()
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint)
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "20")
    yield receiver, monkeypatch
    receiver.stop()


def definition(folder: Path) -> WorkflowDefinition:
    (folder / "sampled.yaml").write_text(CHAIN)
    result = Compiler().compile_path(folder / "sampled.yaml")
    assert result.definition is not None
    return result.definition


def run_all(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sampler: str,
            arg: str | None = None) -> tuple[_tracing.Tracing, list[str]]:
    monkeypatch.setenv("OTEL_TRACES_SAMPLER", sampler)
    if arg is not None:
        monkeypatch.setenv("OTEL_TRACES_SAMPLER_ARG", arg)
    tracing = _tracing.Tracing()  # reads the environment now, as at a process's start
    monkeypatch.setattr(_tracing, "decided", True)
    monkeypatch.setattr(_tracing, "current", tracing)
    engine = Engine(runs_dir=tmp_path / "runs", project_root=tmp_path)
    flow = definition(tmp_path)
    run_ids = []
    for _ in range(RUNS):
        outcome = engine.start(flow)
        assert outcome.status == "completed"
        run_ids.append(outcome.run_id)
    tracing.close()  # flushed: every span the receiver will get is in
    return tracing, run_ids


def seen(tmp_path: Path, run_id: str) -> str:
    return (tmp_path / f"seen-{run_id}.txt").read_text().strip()


def test_a_ratio_sampler_keeps_or_drops_each_run_whole(
        tmp_path: Path, traced: tuple[OtlpReceiver, pytest.MonkeyPatch]) -> None:
    receiver, monkeypatch = traced
    tracing, run_ids = run_all(tmp_path, monkeypatch, "parentbased_traceidratio", "0.5")
    ratio = TraceIdRatioBased(0.5)
    kept = {r for r in run_ids if ratio.should_sample(
        None, _tracing.run_ids(r)[0], "run").decision is Decision.RECORD_AND_SAMPLE}
    spans = receiver.received()
    by_run: dict[str, set[str]] = {}
    for span in spans:
        by_run.setdefault(str(span.attributes["wfrun.run_id"]), set()).add(span.name)
    # Exactly the runs whose trace id the ratio keeps, each with all its spans.
    assert set(by_run) == kept
    assert all(names == {"run sampled", "node a", "node b", "node c"}
               for names in by_run.values())
    assert tracing.made == 4 * len(kept)  # a dropped run's spans were never built
    for run_id in run_ids:
        trace_id = f"{_tracing.run_ids(run_id)[0]:032x}"
        flags = "01" if run_id in kept else "00"
        assert seen(tmp_path, run_id).startswith(f"00-{trace_id}-")
        assert seen(tmp_path, run_id).endswith(f"-{flags}")


def test_always_off_sends_nothing_and_says_so_in_traceparent(
        tmp_path: Path, traced: tuple[OtlpReceiver, pytest.MonkeyPatch]) -> None:
    receiver, monkeypatch = traced
    tracing, run_ids = run_all(tmp_path, monkeypatch, "always_off")
    assert receiver.received() == []
    assert tracing.made == 0
    assert all(seen(tmp_path, r).endswith("-00") for r in run_ids)
    # The same runs with the default sampler: all of it.
    receiver.spans.clear()
    monkeypatch.delenv("OTEL_TRACES_SAMPLER")
    _, again = run_all(tmp_path, monkeypatch, "parentbased_always_on")
    wait_until(lambda: len(receiver.received()) == 4 * RUNS, what="every span")
    assert all(seen(tmp_path, r).endswith("-01") for r in again)
