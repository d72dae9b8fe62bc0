"""OTLP/protobuf encoding of wfrun's spans, written out by hand (issue 40, tracing cost).

The official encoder (`opentelemetry-exporter-otlp-proto-common`) builds a protobuf
message object per span, attribute and value: about 50-90 µs of CPU a span, as much
as a trivial node costs to run (bench/bench_tracing.py). wfrun's spans are few
shapes (a name, ids, two times, a handful of string/int/bool attributes, a status,
maybe a link), so this module writes the same `ExportTraceServiceRequest` bytes
directly from the protobuf wire format (opentelemetry-proto's trace.proto,
common.proto, resource.proto): ~10 µs a span. A span it cannot write (an attribute
value of another type) makes `encode` raise ValueError, and the caller sends the
batch through the official encoder instead; tests/unit/engine/test_otlp_encoding.py
decodes both with opentelemetry-proto and requires the same message.

`exporter` wraps the official OTLPSpanExporter: the bytes go out through its own
HTTP client (endpoint, headers, timeout, compression, retries from the standard
`OTEL_EXPORTER_OTLP_*` variables). That client is a private attribute of the
exporter (1.45); an exporter without it is used as it is.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping, Sequence
from typing import Any

# Span.flags: the parent's is_remote is known (and set): trace.proto SpanFlags.
_HAS_IS_REMOTE = 0x100
_IS_REMOTE = 0x200
_STATUS_CODES = {"UNSET": 0, "OK": 1, "ERROR": 2}
_SPAN_KINDS = {"INTERNAL": 1, "SERVER": 2, "CLIENT": 3, "PRODUCER": 4, "CONSUMER": 5}
_fixed64 = struct.Struct("<Q").pack
_fixed32 = struct.Struct("<I").pack
_double = struct.Struct("<d").pack
_SCALARS = (str, bool, int, float)


def _varint(value: int) -> bytes:
    if value < 0:
        value += 1 << 64  # int64: two's complement, ten bytes
    if value < 0x80:
        return bytes((value,))
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _field(number: int, payload: bytes) -> bytes:
    """A length-delimited field (wire type 2)."""
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def _text(number: int, value: str) -> bytes:
    return _field(number, value.encode()) if value else b""


def _any_value(value: Any) -> bytes:
    if isinstance(value, str):
        return _field(1, value.encode())
    if isinstance(value, bool):
        return b"\x10" + (b"\x01" if value else b"\x00")
    if isinstance(value, int):
        return b"\x18" + _varint(value)
    if isinstance(value, float):
        return b"\x21" + _double(value)
    raise ValueError(f"an attribute value of type {type(value).__name__}")


def _attributes(number: int, attributes: Mapping[str, Any] | None,
                cache: dict[tuple[str, type, Any], bytes]) -> bytes:
    """Repeated KeyValue. `cache`: one batch's key-values, most repeat (the workflow,
    the run id, `kind: compute`, `outcome: ok`...)."""
    out = b""
    for key, value in (attributes or {}).items():
        kind = type(value)
        if kind not in _SCALARS:
            raise ValueError(f"an attribute value of type {kind.__name__}")
        marker = (key, kind, value)
        encoded = cache.get(marker)
        if encoded is None:
            encoded = cache[marker] = _field(number, _text(1, key)
                                             + _field(2, _any_value(value)))
        out += encoded
    return out


def _span(span: Any, cache: dict[tuple[str, type, Any], bytes]) -> bytes:
    context = span.context
    parent = span.parent
    out: bytes = (b"\x0a\x10" + context.trace_id.to_bytes(16, "big")
           + b"\x12\x08" + context.span_id.to_bytes(8, "big"))
    if context.trace_state:
        out += _text(3, context.trace_state.to_header())
    if parent is not None:
        out += b"\x22\x08" + parent.span_id.to_bytes(8, "big")
    out += _text(5, span.name) + b"\x30" + _varint(_SPAN_KINDS[span.kind.name])
    if span.start_time:
        out += b"\x39" + _fixed64(span.start_time)
    if span.end_time:
        out += b"\x41" + _fixed64(span.end_time)
    out += _attributes(9, span.attributes, cache)
    if span.events or span.dropped_attributes or span.dropped_events or span.dropped_links:
        raise ValueError("events and dropped counts are the official encoder's")
    for link in span.links:
        linked = link.context
        body = (b"\x0a\x10" + linked.trace_id.to_bytes(16, "big")
                + b"\x12\x08" + linked.span_id.to_bytes(8, "big"))
        if linked.trace_state:
            body += _text(3, linked.trace_state.to_header())
        body += _attributes(4, link.attributes, cache)
        body += b"\x35" + _fixed32(_HAS_IS_REMOTE | (_IS_REMOTE if linked.is_remote else 0))
        out += _field(13, body)
    status = span.status
    code = _STATUS_CODES[status.status_code.name]
    out += _field(15, _text(2, status.description or "") + (  # always there, as the
        b"\x18" + _varint(code) if code else b""))              # official encoder has it
    remote = parent is not None and parent.is_remote
    return out + b"\x85\x01" + _fixed32(_HAS_IS_REMOTE | (_IS_REMOTE if remote else 0))


def encode(spans: Sequence[Any]) -> bytes:
    """The ExportTraceServiceRequest of `spans` (SDK ReadableSpans), serialized."""
    groups: dict[int, tuple[Any, dict[int, tuple[Any, list[bytes]]]]] = {}
    cache: dict[tuple[str, type, Any], bytes] = {}
    for span in spans:
        resource, scope = span.resource, span.instrumentation_scope
        by_scope = groups.setdefault(id(resource), (resource, {}))[1]
        by_scope.setdefault(id(scope), (scope, []))[1].append(_span(span, cache))
    out = b""
    for resource, by_scope in groups.values():
        body = _field(1, _attributes(1, resource.attributes, cache))
        for scope, encoded in by_scope.values():
            head = b""
            if scope is not None:
                head = _field(1, _text(1, scope.name) + _text(2, scope.version or ""))
            body += _field(2, head + b"".join(_field(2, e) for e in encoded)
                           + _text(3, str(scope.schema_url or "") if scope is not None else ""))
        body += _text(3, str(resource.schema_url or ""))
        out += _field(1, body)
    return out


def exporter(inner: Any) -> Any:
    """`inner` (an OTLPSpanExporter), sending what `encode` wrote through its own
    HTTP client; the official encoding where that is not possible."""
    from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

    client = getattr(inner, "_client", None)
    send = getattr(client, "export", None)
    limit = getattr(inner, "_max_request_size", None)

    class Exporter(SpanExporter):
        def export(self, spans: Sequence[Any]) -> SpanExportResult:
            if not callable(send) or getattr(inner, "_shutdown", False):
                return inner.export(spans)  # type: ignore[no-any-return]
            try:
                data = encode(spans)
            except (ValueError, AttributeError, KeyError, OverflowError):
                return inner.export(spans)  # type: ignore[no-any-return]
            if isinstance(limit, int) and len(data) > limit:
                return inner.export(spans)  # type: ignore[no-any-return]  # it says so
            result = send(data)
            return (SpanExportResult.SUCCESS if getattr(result, "success", False)
                    else SpanExportResult.FAILURE)

        def shutdown(self) -> None:
            inner.shutdown()

        def force_flush(self, timeout_millis: int = 30_000) -> bool:
            return bool(inner.force_flush(timeout_millis))

    return Exporter()
