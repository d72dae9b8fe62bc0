"""OTLP/protobuf encoding of wfrun's spans, written out by hand (issue 40, tracing cost).

The official encoder (`opentelemetry-exporter-otlp-proto-common`) wants the SDK's
`ReadableSpan`s and builds a protobuf message object per span, attribute and value:
about 45 µs of CPU a span, as much as a trivial node costs to run
(bench/bench_tracing.py). wfrun's spans are few shapes (a name, ids, two times, a
handful of scalar attributes, an error flag, maybe a link to a parent run), so they
are plain `Span` tuples here, and `Encoder` writes the `ExportTraceServiceRequest`
bytes straight from the protobuf wire format (opentelemetry-proto's trace.proto,
common.proto, resource.proto). tests/unit/engine/test_otlp_encoding.py decodes its
output and the official encoder's for the same spans with opentelemetry-proto and
requires the same message, so a receiver cannot tell them apart.

This module imports only the standard library: it runs on the exporter's thread.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, NamedTuple

__all__ = ["Batch", "Encoder", "Span", "key_value"]

# Span.flags and Link.flags: whether the parent (the linked span) is remote is known,
# and whether it is (trace.proto SpanFlags).
_HAS_IS_REMOTE = 0x100
_IS_REMOTE = 0x200
_fixed64 = struct.Struct("<Q").pack
_fixed32 = struct.Struct("<I").pack
_double = struct.Struct("<d").pack

# Constant pieces of every span: its kind (INTERNAL), its status (UNSET, or ERROR
# with no message: the message could hold what a secret looks like), its flags
# (a local parent, or none).
_KIND_INTERNAL = b"\x30\x01"
_STATUS = (b"\x7a\x00", b"\x7a\x02\x18\x02")
_LOCAL = b"\x85\x01" + _fixed32(_HAS_IS_REMOTE)
_LINK_REMOTE = b"\x35" + _fixed32(_HAS_IS_REMOTE | _IS_REMOTE)
# A timed span's own fields after its shared ones, two packs: its id (big-endian,
# as trace.proto's bytes are read) and kind, then its start and end (fixed64, little).
_ID_KIND_STRUCT = struct.Struct(">HQH")  # 0x1208 span_id (8 bytes), 0x3001 kind INTERNAL
_TIMES_STRUCT = struct.Struct("<BQBQ")  # 0x39 start_time_unix_nano, 0x41 end_time_unix_nano
_ID_KIND, _TIMES = _ID_KIND_STRUCT.pack, _TIMES_STRUCT.pack
_ENDS = (_STATUS[0] + _LOCAL, _STATUS[1] + _LOCAL)
# Bytes of a timed span's own fields, by whether it failed (its status).
_OWN = tuple(_ID_KIND_STRUCT.size + _TIMES_STRUCT.size + len(end) for end in _ENDS)
# The same in one pack, the span id given as its 8 bytes (`Batch.timed_id`).
_OWN_PACK = struct.Struct("<2s8s2sBQBQ").pack


class Span(NamedTuple):
    """One finished span, as wfrun makes them: INTERNAL, sampled, never open.

    `parent_id` is a span of the same trace made by wfrun (a local parent); `links`
    name other traces' spans, (trace id, span id), each remote. A time of 0 is
    unknown (left out of the message, as the official encoder does with None).
    """

    name: str
    trace_id: int
    span_id: int
    parent_id: int | None
    attributes: Mapping[str, Any]
    links: tuple[tuple[int, int], ...]
    error: bool
    start_ns: int
    end_ns: int


def _varint(value: int) -> bytes:
    if value < 0:
        value += 1 << 64  # int64: two's complement, ten bytes
    if value < 0x80:
        return bytes((value,))
    if value < 0x4000:  # a span's length, most often
        return bytes((value & 0x7F | 0x80, value >> 7))
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
    """An AnyValue's fields, for every attribute value the SDK allows (and None)."""
    if value is None:
        return b""
    if isinstance(value, str):
        return _field(1, value.encode())
    if isinstance(value, bool):
        return b"\x10" + (b"\x01" if value else b"\x00")
    if isinstance(value, int):
        if not -(1 << 63) <= value < 1 << 63:
            raise ValueError(f"an attribute value out of int64's range: {value}")
        return b"\x18" + _varint(value)
    if isinstance(value, float):
        return b"\x21" + _double(value)
    if isinstance(value, bytes):
        return _field(7, value)
    if isinstance(value, Mapping):
        return _field(6, b"".join(_key_value(1, str(k), v) for k, v in value.items()))
    if isinstance(value, Sequence):
        return _field(5, b"".join(_field(1, _any_value(v)) for v in value))
    raise ValueError(f"an attribute value of type {type(value).__name__}")


def _key_value(number: int, key: str, value: Any) -> bytes:
    return _field(number, _text(1, key) + _field(2, _any_value(value)))


def key_value(number: int, key: str, value: Any) -> bytes:
    """A KeyValue as field `number` (9: a span's attribute), for a value a batch sees
    once (a run's id): not kept among its pieces."""
    return _key_value(number, key, value)


class Batch:
    """The spans of one request being written, and the pieces they share: a batch's
    spans repeat most of their fields (a run's trace id, its run span as the parent,
    the workflow and run id attributes, `kind: compute`, `outcome: ok`), so each
    piece is encoded once a batch. `pieces` is for a writer's own larger pieces."""

    def __init__(self, kept: Batch | None = None) -> None:
        """`kept`: an earlier batch whose pieces this one may use (a process's batches
        repeat a workflow's node names and outcomes, and the runs a batch cut)."""
        self.spans: list[bytes] = []  # the spans' bytes, in order (a span may be pieces)
        if kept is None:
            self.pieces: dict[Any, Any] = {}
            self._heads: dict[int, bytes] = {}
            self._pairs: dict[tuple[str, Any, type], bytes] = {}
        else:
            self.pieces, self._heads, self._pairs = kept.pieces, kept._heads, kept._pairs

    def kept(self) -> int:
        """How many pieces this batch keeps (a caller bounds a chain of batches)."""
        return len(self.pieces) + len(self._heads) + len(self._pairs)

    def attribute(self, key: str, value: Any) -> bytes:
        """A span's attribute (a KeyValue, field 9); `value` a scalar."""
        marker = (key, value, type(value))  # True and 1 are equal, not the same
        encoded = self._pairs.get(marker)
        if encoded is None:
            encoded = self._pairs[marker] = _key_value(9, key, value)
        return encoded

    @staticmethod
    def trace(trace_id: int) -> bytes:
        return b"\x0a\x10" + trace_id.to_bytes(16, "big")

    @staticmethod
    def parent(span_id: int | None) -> bytes:
        return b"" if span_id is None else b"\x22\x08" + span_id.to_bytes(8, "big")

    @staticmethod
    def name(name: str) -> bytes:
        return _text(5, name)

    def write(self, fields: bytes, span_id: int, start_ns: int, end_ns: int,
              links: tuple[tuple[int, int], ...], error: bool) -> None:
        """One span: `fields` holds its trace id, parent, name and attributes (the
        attributes in their order), as the methods above encode them."""
        parts = [fields, b"\x12\x08", span_id.to_bytes(8, "big"), _KIND_INTERNAL]
        if start_ns:
            parts += (b"\x39", _fixed64(start_ns))
        if end_ns:
            parts += (b"\x41", _fixed64(end_ns))
        for trace_id, linked in links:
            parts.append(_field(13, b"\x0a\x10" + trace_id.to_bytes(16, "big")
                                + b"\x12\x08" + linked.to_bytes(8, "big") + _LINK_REMOTE))
        parts += (_STATUS[error], _LOCAL)
        self.spans.append(_field(2, b"".join(parts)))

    def timed(self, fields: bytes, span_id: int, start_ns: int, end_ns: int,
              error: bool) -> None:
        """`write` for the most common span: both times known (not 0), no links. The
        exporter's thread writes one per node attempt, so it is short: the span's
        length is known before its bytes are made (its header kept per length), and
        its five pieces join the request's bytes as they are, not as one span."""
        size = len(fields) + _OWN[error]
        head = self._heads.get(size)
        if head is None:
            head = self._heads[size] = b"\x12" + _varint(size)
        self.spans += (head, fields, _ID_KIND(0x1208, span_id, 0x3001),
                       _TIMES(0x39, start_ns, 0x41, end_ns), _ENDS[error])

    def timed_id(self, run: bytes, fields: bytes, span_id: bytes, start_ns: int,
                 end_ns: int, error: bool) -> None:
        """`timed` for a span whose fields are two pieces (a run's, then the node's)
        and whose id is its 8 bytes already: one pack, no join, for the exporter's
        loop over a batch's node spans (runner/engine/_tracing.py `_write_records`)."""
        size = len(run) + len(fields) + _OWN[error]
        head = self._heads.get(size)
        if head is None:
            head = self._heads[size] = b"\x12" + _varint(size)
        self.spans += (head, run, fields,
                       _OWN_PACK(b"\x12\x08", span_id, b"\x30\x01", 0x39, start_ns, 0x41,
                                 end_ns),
                       _ENDS[error])

    def add(self, span: Span) -> None:
        """`span`, whatever its shape."""
        fields = [self.trace(span.trace_id), self.parent(span.parent_id), self.name(span.name)]
        fields += [self.attribute(k, v) for k, v in span.attributes.items()]
        self.write(b"".join(fields), span.span_id, span.start_ns, span.end_ns, span.links,
                   span.error)


class Encoder:
    """The request bytes of a batch of spans of one process: its resource (made once,
    encoded once) and its instrumentation scope, `wfrun`."""

    def __init__(self, resource: Mapping[str, Any], resource_schema_url: str = "",
                 scope: str = "wfrun", scope_version: str = "") -> None:
        body = b"".join(_key_value(1, key, value) for key, value in resource.items())
        self._resource = _field(1, body)
        self._resource_schema = _text(3, resource_schema_url)
        self._scope = _field(1, _text(1, scope) + _text(2, scope_version))

    def request(self, batch: Batch) -> bytes:
        """One ExportTraceServiceRequest holding the batch's spans, serialized."""
        scope_spans = _field(2, self._scope + b"".join(batch.spans))
        return _field(1, self._resource + scope_spans + self._resource_schema)

    def encode(self, spans: Iterable[Span]) -> bytes:
        batch = Batch()
        for span in spans:
            batch.add(span)
        return self.request(batch)
