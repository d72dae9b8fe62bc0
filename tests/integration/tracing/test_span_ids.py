"""A node attempt's span id is its attempt id (the trace's `attempt`), so a step's
TRACEPARENT names its span from the attempt alone, and a fan-out item's step names
its map node's span (an item has no span of its own): runs of a real Engine in this
process, spans sent by the real exporter to the OTLP/HTTP receiver on 127.0.0.1."""

from __future__ import annotations

from pathlib import Path

import pytest
from fakes.otlp_receiver import OtlpReceiver

from runner.compiler import Compiler
from runner.engine import Engine, _tracing

FLOW = """\
name: ids
start: first
nodes:
  first: {compute: "{{ 1 }}"}
  flaky:
    action:
      use_shell: true
      shell: 'echo "$TRACEPARENT" >> flaky.seen; test -e again || { touch again; exit 1; }'
    retry: {attempts: 2, backoff: 10ms}
  each:
    map:
      over: "{{ [0, 1] }}"
      do:
        action:
          use_shell: true
          shell: 'echo "$TRACEPARENT" > item-{{ item }}.seen'
edges: [{from: first, to: flaky}, {from: flaky, to: each}]
"""


def test_node_spans_are_named_by_their_attempt_ids(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    receiver = OtlpReceiver().start()
    try:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint)
        tracing = _tracing.Tracing()
        monkeypatch.setattr(_tracing, "decided", True)
        monkeypatch.setattr(_tracing, "current", tracing)
        # close() gives up after EXIT_WAIT (3 s: a process's exit must not wait on a slow
        # receiver); with both cores busy this receiver once took longer, and what is
        # checked here is the spans' ids, not that bound.
        monkeypatch.setattr(_tracing, "EXIT_WAIT", 60.0)
        (tmp_path / "ids.yaml").write_text(FLOW)
        compiled = Compiler().compile_path(tmp_path / "ids.yaml")
        definition = compiled.definition
        assert definition is not None, compiled
        engine = Engine(runs_dir=tmp_path / "runs", project_root=tmp_path)
        outcome = engine.start(definition)
        assert outcome.status == "completed", outcome.error
        tracing.close()  # every span sent
        spans = receiver.received()
    finally:
        receiver.stop()
    results = outcome.state.results
    by_name = {s.name: s for s in spans}
    # The last attempt of each node: its span id is the id the trace gives the attempt.
    for node in ("first", "flaky", "each"):
        assert by_name[f"node {node}"].span_id == results[node]["attempt_id"]
    [run] = [s for s in spans if s.name == "run ids"]
    # Each attempt of `flaky` saw its own span's id, and both were sent.
    seen = (tmp_path / "flaky.seen").read_text().split()
    flaky = sorted((s for s in spans if s.name == "node flaky"), key=lambda s: s.start_ns)
    assert seen == [f"00-{run.trace_id}-{s.span_id}-01" for s in flaky]
    assert flaky[1].span_id == results["flaky"]["attempt_id"]
    # An item's step names its map node's span.
    for item in (0, 1):
        assert (tmp_path / f"item-{item}.seen").read_text().strip() == \
            f"00-{run.trace_id}-{by_name['node each'].span_id}-01"
