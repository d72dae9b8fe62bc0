"""An OTLP/HTTP trace receiver on 127.0.0.1 (issue 40): a real threaded HTTP server that
takes `POST /v1/traces` (protobuf), decodes it with the `opentelemetry-proto` package
and keeps each span as a `Received` (ids as hex, attributes as a plain dict).

Use `OtlpReceiver().start()` and `.stop()`, or the `otlp` fixture; `endpoint` is the
value for `OTEL_EXPORTER_OTLP_ENDPOINT`. A test can script the answers (`answers`:
(status, headers) pairs given before the usual 200), hold every answer until it
opens `gate` (`arrived` counts the requests that came in), and read each request's
headers (`headers`); a gzip or deflate body is decompressed, as a collector does.
"""

from __future__ import annotations

import gzip
import threading
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue


@dataclass(frozen=True)
class Received:
    name: str
    trace_id: str
    span_id: str
    parent_span_id: str
    attributes: dict[str, Any]
    links: list[tuple[str, str]]  # (trace id, span id)
    service: str
    start_ns: int
    end_ns: int
    error: bool


def _value(value: AnyValue) -> Any:
    which = value.WhichOneof("value")
    return None if which is None else getattr(value, which)


class OtlpReceiver:
    def __init__(self) -> None:
        self.spans: list[Received] = []
        self.requests = 0
        self.arrived = 0
        self.headers: list[dict[str, str]] = []
        self.answers: list[tuple[int, dict[str, str]]] = []
        self.gate: threading.Event | None = None
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None

    @property
    def endpoint(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def start(self) -> OtlpReceiver:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                with receiver._lock:
                    receiver.arrived += 1
                    receiver.headers.append({k.lower(): v for k, v in self.headers.items()})
                    gate = receiver.gate
                    scripted = receiver.answers.pop(0) if receiver.answers else None
                if gate is not None:
                    gate.wait()
                if self.path != "/v1/traces":
                    self.send_error(404)
                    return
                if scripted is not None:
                    status, headers = scripted
                    self.send_response(status)
                    for name, value in {"Content-Length": "0", **headers}.items():
                        self.send_header(name, value)
                    self.end_headers()
                    return
                encoding = (self.headers.get("Content-Encoding") or "").lower()
                if encoding == "gzip":
                    body = gzip.decompress(body)
                elif encoding == "deflate":
                    body = zlib.decompress(body)
                request = ExportTraceServiceRequest()
                request.ParseFromString(body)
                receiver.take(request)
                answer = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, *_args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def take(self, request: ExportTraceServiceRequest) -> None:
        spans = []
        for resource_spans in request.resource_spans:
            service = next((_value(a.value) for a in resource_spans.resource.attributes
                            if a.key == "service.name"), "")
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    spans.append(Received(
                        name=span.name, trace_id=span.trace_id.hex(),
                        span_id=span.span_id.hex(), parent_span_id=span.parent_span_id.hex(),
                        attributes={a.key: _value(a.value) for a in span.attributes},
                        links=[(link.trace_id.hex(), link.span_id.hex())
                               for link in span.links],
                        service=service, start_ns=span.start_time_unix_nano,
                        end_ns=span.end_time_unix_nano, error=span.status.code == 2))
        with self._lock:
            self.requests += 1
            self.spans.extend(spans)

    def received(self) -> list[Received]:
        with self._lock:
            return list(self.spans)

    def stop(self) -> None:
        if self.gate is not None:
            self.gate.set()  # a held answer must not outlive the test
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None


@pytest.fixture
def otlp() -> Iterator[OtlpReceiver]:
    receiver = OtlpReceiver().start()
    yield receiver
    receiver.stop()
