"""runner/engine/_otlp.py writes the same ExportTraceServiceRequest as the official
OTLP encoder: both are decoded with opentelemetry-proto and compared field by field."""

from __future__ import annotations

import pytest
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
)
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import Link, SpanContext, Status, StatusCode, TraceFlags

from runner.engine._otlp import encode

SAMPLED = TraceFlags(TraceFlags.SAMPLED)
RESOURCE = Resource.create({"service.name": "wfrun-test", "deployment": "ci"})
SCOPE = InstrumentationScope("wfrun")


def context(trace: int, span: int, *, remote: bool = False) -> SpanContext:
    return SpanContext(trace, span, is_remote=remote, trace_flags=SAMPLED)


def spans() -> list[ReadableSpan]:
    trace = 0x0123456789ABCDEF0123456789ABCDEF
    run = ReadableSpan("run review", context=context(trace, 0xA1), resource=RESOURCE,
                       attributes={"wfrun.workflow": "review", "wfrun.run_id": "r-1",
                                   "wfrun.outcome": "failed", "wfrun.error.code": "x"},
                       links=[Link(context(0xFEED, 0xBEEF, remote=True))],
                       status=Status(StatusCode.ERROR), start_time=1_700_000_000_000_000_000,
                       end_time=1_700_000_000_500_000_000, instrumentation_scope=SCOPE)
    node = ReadableSpan("node plan — ünïcode", context=context(trace, 0xFFFF_FFFF_FFFF_FFFF),
                        parent=context(trace, 0xA1), resource=RESOURCE,
                        attributes={"wfrun.workflow": "review", "wfrun.attempt": 2,
                                    "wfrun.will_retry": True, "wfrun.negative": -5,
                                    "wfrun.big": 2**62, "wfrun.ratio": 0.25,
                                    "wfrun.flag": False, "wfrun.empty": ""},
                        status=Status(StatusCode.UNSET), start_time=1, end_time=2**63,
                        instrumentation_scope=SCOPE)
    other = ReadableSpan("node other", context=context(trace, 0xC3), parent=context(trace, 0xA1),
                         resource=RESOURCE, attributes={"wfrun.workflow": "review"},
                         start_time=5, end_time=6, instrumentation_scope=SCOPE)
    return [run, node, other]


def test_the_hand_encoding_is_the_official_encoders_message() -> None:
    ours = ExportTraceServiceRequest.FromString(encode(spans()))
    official = ExportTraceServiceRequest.FromString(
        encode_spans(spans()).SerializePartialToString())
    assert ours == official
    assert len(ours.resource_spans[0].scope_spans[0].spans) == 3


def test_a_value_it_cannot_write_is_refused_for_the_official_encoder() -> None:
    odd = ReadableSpan("odd", context=context(1, 2), resource=RESOURCE,
                       attributes={"list": ("a", "b")}, start_time=1, end_time=2,
                       instrumentation_scope=SCOPE)
    with pytest.raises(ValueError, match="tuple"):
        encode([odd])
