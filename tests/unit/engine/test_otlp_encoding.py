"""runner/engine/_otlp.py writes the same ExportTraceServiceRequest as the official
OTLP encoder: both are decoded with opentelemetry-proto and compared field by field,
for spans of every shape wfrun makes and for the records the tracing queues (written
by their fast path, which must say what their `span()` says)."""

from __future__ import annotations

import gc
from typing import Any

import pytest
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
)
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import Link, SpanContext, Status, StatusCode, TraceFlags

from runner.engine import _tracing
from runner.engine._otlp import Batch, Encoder, Span
from runner.engine._state import RunState
from runner.engine._tracing import _NodeEnd, _RunEnd

SAMPLED = TraceFlags(TraceFlags.SAMPLED)
RESOURCE = Resource.create({"service.name": "wfrun-test", "deployment": "ci",
                            "process.command_args": ("wfrun", "run", "x"), "cores": 2})
SCOPE = InstrumentationScope("wfrun")
TRACE = 0x0123456789ABCDEF0123456789ABCDEF


def encoder() -> Encoder:
    return Encoder(RESOURCE.attributes, RESOURCE.schema_url)


def readable(span: Span) -> ReadableSpan:
    """`span` as the SDK's span: what wfrun sent through the official exporter before."""
    def context(trace: int, span_id: int, remote: bool = False) -> SpanContext:
        return SpanContext(trace, span_id, is_remote=remote, trace_flags=SAMPLED)

    return ReadableSpan(
        span.name, context=context(span.trace_id, span.span_id),
        parent=None if span.parent_id is None else context(span.trace_id, span.parent_id),
        resource=RESOURCE, attributes=dict(span.attributes),
        links=[Link(context(t, s, remote=True)) for t, s in span.links],
        status=Status(StatusCode.ERROR if span.error else StatusCode.UNSET),
        start_time=span.start_ns or None, end_time=span.end_ns or None,
        instrumentation_scope=SCOPE)


def official(spans: list[Span]) -> ExportTraceServiceRequest:
    return ExportTraceServiceRequest.FromString(
        encode_spans([readable(s) for s in spans]).SerializePartialToString())


def spans() -> list[Span]:
    run = Span("run review", TRACE, 0xA1, None,
               {"wfrun.workflow": "review", "wfrun.run_id": "r-1", "wfrun.outcome": "failed",
                "wfrun.error.code": "x"}, ((0xFEED, 0xBEEF),), True,
               1_700_000_000_000_000_000, 1_700_000_000_500_000_000)
    node = Span("node plan — ünïcode", TRACE, 0xFFFF_FFFF_FFFF_FFFF, 0xA1,
                {"wfrun.workflow": "review", "wfrun.attempt": 2, "wfrun.will_retry": True,
                 "wfrun.negative": -5, "wfrun.big": 2**62, "wfrun.ratio": 0.25,
                 "wfrun.flag": False, "wfrun.empty": "", "wfrun.one": 1},
                (), False, 1, 2**63)
    other = Span("node other", TRACE, 0xC3, 0xA1, {"wfrun.workflow": "review",
                                                   "wfrun.flag": True},
                 (), False, 5, 6)
    unknown = Span("node untimed", TRACE, 0xC4, 0xA1, {}, (), False, 0, 0)
    return [run, node, other, unknown]


def test_the_hand_encoding_is_the_official_encoders_message() -> None:
    ours = ExportTraceServiceRequest.FromString(encoder().encode(spans()))
    assert ours == official(spans())
    assert len(ours.resource_spans[0].scope_spans[0].spans) == 4


def records() -> list[_NodeEnd | _RunEnd]:
    at = "2026-12-05T12:51:02.125Z"
    ok, failed = "node_finished", "node_failed"

    def attempt(n: int) -> str:  # an attempt's id, as runner/engine/_nodes.py makes them
        return f"{n:016x}"

    return [  # the payloads' values as they come: the exporter's thread makes them attributes
        _NodeEnd("r-1", "review", "plan", attempt(0x51), ok, "compute", 0, "ok", None, False,
                 at, 3),
        _NodeEnd("r-1", "review", "fetch", attempt(0x52), failed, "action", 0, None,
                 "exit_code", True, at, 1500),
        _NodeEnd("r-1", "review", "fetch", attempt(0x53), ok, "action", 1, "ok", None, None,
                 "2026-12-05T12:51:03.000Z", 0.5),
        _NodeEnd("r-2", "review", "plan", attempt(0x54), ok, "compute", None, None, None,
                 False, at, 3),
        _NodeEnd("r-2", "review", "odd", attempt(0x55), ok, None, None, "skipped", None,
                 False, None, None),
        _RunEnd("r-1", "review", "completed", None, None, "2026-12-05T12:51:01.000Z", at),
        _RunEnd("r-2", "review", "failed", "exit_code", "r-1", "2026-12-05T12:51:01+00:00",
                None),
    ]


def test_the_records_written_are_their_spans() -> None:
    batch = Batch()
    for record in records():
        record.write(batch)
    ours = ExportTraceServiceRequest.FromString(encoder().request(batch))
    assert ours == official([record.span() for record in records()])
    # And the spans say what the records say (a few exact fields).
    node, failed = records()[0].span(), records()[1].span()
    assert node.span_id == 0x51  # the attempt's id
    assert node.end_ns - node.start_ns == 3_000_000
    assert node.end_ns == 1_796_475_062_125_000_000  # date -d 2026-12-05T12:51:02Z +%s
    assert failed.error
    assert failed.attributes["wfrun.outcome"] == "failed"  # a failure without its own word
    assert failed.attributes["wfrun.error.code"] == "exit_code"
    assert failed.attributes["wfrun.will_retry"] is True
    child = records()[-1].span()
    assert child.parent_id is None
    assert child.links == (_tracing.run_ids("r-1"),)
    assert child.end_ns == child.start_ns  # no end time: the start


def test_a_batch_of_plain_records_is_written_in_one_loop_as_their_spans() -> None:
    """The exporter's loop (`_write_records`): the queued plain tuples and the run
    ends of a batch, with the odd shapes its short paths must hand on (a zero id,
    times not of runner.clock.iso's shape, a date that is not one)."""
    def node(name: str, attempt: str, at: str) -> _NodeEnd:
        return _NodeEnd("r-3", "review", name, attempt, "node_finished", "compute", 0, "ok",
                        None, False, at, 2)

    odd = [node("zero", "0000000000000000", "2026-12-05T12:51:02.125+00:00"),
           node("late", "00000000000000c1", "2026-12-05T12:51:02.12xZ"),
           node("late", "00000000000000c2", "2026-13-05T12:51:02.125Z"),
           node("late", "00000000000000C3", "2026-12-05T12:51:02.999Z")]
    every = [*records(), *odd]
    batch = Batch()
    _tracing._write_records([r if isinstance(r, _RunEnd) else tuple(r) for r in every], batch)
    ours = ExportTraceServiceRequest.FromString(encoder().request(batch))
    assert ours == official([record.span() for record in every])
    assert [s.span_id for s in ours.resource_spans[0].scope_spans[0].spans[-4:]] == \
        [(1).to_bytes(8, "big"), *(bytes.fromhex(f"{n:016x}") for n in (0xC1, 0xC2, 0xC3))]


def test_a_batch_uses_the_pieces_of_the_one_before(monkeypatch: pytest.MonkeyPatch) -> None:
    """The exporter's batches hand their encoded pieces on (a run cut across two
    requests, a workflow's node names): each request is still its spans' message."""
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:9")
    monkeypatch.setattr(_tracing, "_PIECES_KEPT", 12)  # a few batches, then afresh
    tracing = _tracing.Tracing()
    try:
        every = [r if isinstance(r, _RunEnd) else tuple(r) for r in records()]
        for _ in range(4):
            for start in range(0, len(every), 3):
                part = every[start:start + 3]
                ours = ExportTraceServiceRequest.FromString(tracing._encode(part))
                theirs = official([(r if isinstance(r, _RunEnd) else _NodeEnd(*r)).span()
                                   for r in part])
                assert ours.resource_spans[0].scope_spans[0].spans == \
                    theirs.resource_spans[0].scope_spans[0].spans  # the resource: the env's
    finally:
        tracing.close()


@pytest.mark.parametrize("value", [object(), 2**64])
def test_a_value_it_cannot_write_is_refused(value: Any) -> None:
    odd = Span("odd", 1, 2, None, {"odd": value}, (), False, 1, 2)
    with pytest.raises(ValueError, match="attribute value"):
        encoder().encode([odd])


def test_the_run_thread_queues_plain_records_the_collector_lets_go(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A node's record waits in the queue for up to a batch or 5 s: a plain tuple of
    atomic values is untracked at the garbage collector's first pass (a NamedTuple
    stayed tracked into the oldest generation, more full collections per run), and
    the exporter's thread writes it as the `_NodeEnd` of the same fields."""
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:9")
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "3600000")
    tracing = _tracing.Tracing()
    try:
        observe = tracing.observer(None)
        state = RunState("r-gc")
        state.workflow = "review"
        at = "2026-12-05T12:51:02.125Z"
        observe({"type": "node_finished", "node": "plan", "at": at,
                 "attempt": "00000000000000a7",
                 "payload": {"kind": "compute", "outcome": "ok", "retry": 0,
                             "duration_ms": 3, "output": {"big": [1, 2, 3]}}}, state)
        (record,) = list(tracing.exporter._queue)
        gc.collect(0)
        assert type(record) is tuple
        assert not gc.is_tracked(record)
        named = _NodeEnd(*record)
        assert named.run_id == "r-gc"
        assert named.node == "plan"
        assert named.span().span_id == 0xa7
        plain, typed = Batch(), Batch()
        tracing._encode([record])  # the exporter's dispatch takes it
        _tracing._write_node(record, plain)
        named.write(typed)
        assert encoder().request(plain) == encoder().request(typed)
        ours = ExportTraceServiceRequest.FromString(encoder().request(plain))
        assert ours == official([named.span()])
    finally:
        tracing.exporter._queue.clear()
        tracing.close()
