"""OpenTelemetry spans for runs and node attempts (issue 40, DESIGN §10; extra `wfrun[otel]`).

On when the standard `OTEL_EXPORTER_OTLP_ENDPOINT` (or `..._TRACES_ENDPOINT`) is set
and `OTEL_SDK_DISABLED` is not `true`; the other standard `OTEL_*` variables (headers,
timeout, service name, sampler, batch queue size) are the SDK's. Off, this module
imports nothing and `observer` hands the engine's observer back unchanged.

Why spans are made from the run's trace events, each once it ended: a span is built
from facts the trace holds (a node attempt's start and duration, the run's start and
end), so nothing stays open across a crash. A run's trace id and its run span's id are
derived from the run id, which the bundle keeps: a run resumed by another process,
after a SIGKILL, continues the same trace, and its node spans find their parent; the
run span itself is sent when the run ends (completed, failed, timed out, cancelled,
or waiting at a checkpoint). A child run's span (a continuation, a controller's
child) links to its parent run's span. The node span's id is chosen when
the node starts, so a shell step gets `TRACEPARENT` naming it.

The sampler (`OTEL_TRACES_SAMPLER`) decides once per run, by its trace id, and the
decision covers the run span and its node spans alike: a dropped run costs no span
object at all, and its `TRACEPARENT` says "not sampled" (flags 00).

Exporting never blocks or fails a run: spans go to the SDK's batch processor (a
bounded queue, sent by its own thread; a full queue drops spans), a problem building
one is logged at debug level, and a process exits after at most `EXIT_WAIT` seconds
of flushing, whether or not the receiver answers.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import os
import random
import threading
from collections.abc import Callable
from datetime import datetime
from typing import Any

from . import _otlp
from ._state import RunState

log = logging.getLogger(__name__)

ENDPOINTS = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
# A run waiting at a checkpoint has ended too: `wfrun answer` continues it as a new run
# (its own trace, its span linked to this one).
RUN_ENDS = {"run_completed": "completed", "run_failed": "failed",
            "run_timed_out": "timed_out", "run_cancelled": "cancelled",
            "run_waiting": "waiting"}
NODE_ENDS = ("node_finished", "node_failed")
EXIT_WAIT = 3.0  # seconds a process waits at exit for its last spans to be sent
_SAMPLED_KEPT = 4096  # sampling decisions kept: the runs in flight in a host, and then some

Observer = Callable[[dict[str, Any], RunState], None]

_decided = False
_current: Tracing | None = None
_lock = threading.Lock()


def wanted(environ: dict[str, str] | os._Environ[str] = os.environ) -> bool:
    """Whether the environment asks for traces (the standard OTEL_* switches)."""
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    if environ.get("OTEL_TRACES_EXPORTER", "").strip().lower() == "none":
        return False
    return any(environ.get(name, "").strip() for name in ENDPOINTS)


def active() -> Tracing | None:
    """This process's tracing, set up on first use from the environment (None: off)."""
    global _decided, _current
    if _decided:
        return _current
    with _lock:
        if not _decided:
            if wanted():
                try:
                    _current = Tracing()
                except ImportError:
                    log.warning("wfrun: OTEL_EXPORTER_OTLP_ENDPOINT is set but the "
                                "OpenTelemetry SDK is not installed (pip install "
                                "'wfrun[otel]'): no traces are sent")
                except Exception as exc:  # a bad OTEL_* value: the runs go on untraced
                    log.warning("wfrun: cannot set up OpenTelemetry (%s): no traces are sent",
                                exc)
            _decided = True
    return _current


def flush() -> None:
    """Send what this process's tracing holds (bounded, as at exit): for a process that
    ends with os._exit, which runs no atexit handler (a host's worker process)."""
    if _current is not None:
        _current.close()


def observer(inner: Observer | None) -> Observer | None:
    """The engine observer with tracing, or `inner` itself when tracing is off."""
    tracing = active()
    return inner if tracing is None else tracing.observer(inner)


def environment(run_id: str) -> dict[str, str]:
    """`TRACEPARENT` for a step of `run_id` now running (empty when tracing is off)."""
    tracing = _current
    return {} if tracing is None else tracing.environment(run_id)


@functools.lru_cache(maxsize=1024)  # the runs in flight in a host, and then some
def run_ids(run_id: str) -> tuple[int, int]:
    """The trace id of `run_id` and the span id of its run span (never zero)."""
    digest = hashlib.sha256(b"wfrun run " + run_id.encode()).digest()
    return (int.from_bytes(digest[:16], "big") or 1), (int.from_bytes(digest[16:24], "big") or 1)


def traceparent(trace_id: int, span_id: int, sampled: bool = True) -> str:
    return f"00-{trace_id:032x}-{span_id:016x}-{'01' if sampled else '00'}"


def _nanos(at: Any) -> int | None:
    if not isinstance(at, str):
        return None
    try:
        return int(datetime.fromisoformat(at).timestamp() * 1_000_000_000)
    except ValueError:
        return None


class Tracing:
    """One process's tracer provider, exporter and the node spans being run.

    Spans are built as the SDK's finished `ReadableSpan`s straight from the trace
    events and handed to the batch processor (its `on_end`): a span never lives open
    (each is made once what it covers ended), so the SDK's live-span machinery (its
    Tracer, id generator, attribute validation, context lookups) would only cost a
    node its CPU (bench/bench_tracing.py). The provider is kept for the standard
    `OTEL_*` settings: its sampler and its batch processor's shutdown.
    """

    def __init__(self) -> None:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
        from opentelemetry.sdk.util.instrumentation import InstrumentationScope

        # The exporter logs each failed try (three lines a batch while the receiver is
        # down); the spans that never got through are counted in one line at exit.
        logging.getLogger("opentelemetry.exporter.otlp.proto.http").setLevel(logging.ERROR)
        self.resource = Resource.create({"service.name": os.environ.get("OTEL_SERVICE_NAME")
                                         or "wfrun"})
        self.provider = TracerProvider(resource=self.resource, shutdown_on_exit=False)
        exporter = OTLPSpanExporter()
        self.sent = _Sent(str(getattr(exporter, "_endpoint", "the OTLP endpoint")))
        # The spans are encoded by _otlp.py (a fifth of the official encoder's CPU) and
        # sent by the official exporter's own HTTP client.
        self.processor = BatchSpanProcessor(_counting(_otlp.exporter(exporter), self.sent))
        self.provider.add_span_processor(self.processor)
        from opentelemetry.sdk.trace import ReadableSpan
        from opentelemetry.trace import SpanContext, Status, StatusCode, TraceFlags

        # Looked up once: a span is a few object constructions on the run's thread.
        self._span_class, self._context_class = ReadableSpan, SpanContext
        self._flags = TraceFlags(TraceFlags.SAMPLED)
        self._statuses = (Status(StatusCode.UNSET), Status(StatusCode.ERROR))
        self.scope = InstrumentationScope("wfrun")
        self.sampler = self.provider.sampler  # OTEL_TRACES_SAMPLER(_ARG), the SDK's reading
        self._lock = threading.Lock()
        self._nodes: dict[str, tuple[str, int]] = {}  # run id -> its running node, span id
        self._sampled: dict[str, bool] = {}  # run id -> the sampler's decision (bounded)
        self.made = 0  # spans ended (handed to the batch processor)
        import atexit

        atexit.register(self.close)

    def observer(self, inner: Observer | None) -> Observer:
        def observe(event: dict[str, Any], state: RunState) -> None:
            try:
                self.event(event, state)
            except Exception:  # a span never costs a run anything
                log.debug("wfrun: cannot make a span of %s", event.get("type"), exc_info=True)
            if inner is not None:
                inner(event, state)

        return observe

    def environment(self, run_id: str) -> dict[str, str]:
        with self._lock:
            running = self._nodes.get(run_id)
        if running is None:
            return {}
        return {"TRACEPARENT": traceparent(run_ids(run_id)[0], running[1],
                                           self.sampled(run_id))}

    def sampled(self, run_id: str) -> bool:
        """The sampler's decision for the run's trace, made once, at its first event,
        for the run span and every node span alike (a ParentBased or TraceIdRatio
        sampler decides by the trace id, which the run id fixes: every process that
        runs a part of the run decides the same)."""
        with self._lock:
            known = self._sampled.get(run_id)
        if known is not None:
            return known
        from opentelemetry.sdk.trace.sampling import Decision
        from opentelemetry.trace import SpanKind

        trace_id = run_ids(run_id)[0]
        decision = self.sampler.should_sample(None, trace_id, "run", SpanKind.INTERNAL)
        sampled = decision.decision is Decision.RECORD_AND_SAMPLE
        with self._lock:
            if len(self._sampled) >= _SAMPLED_KEPT:
                self._sampled.clear()  # a host's finished runs: decided again if seen
            self._sampled[run_id] = sampled
        return sampled

    def event(self, event: dict[str, Any], state: RunState) -> None:
        kind = event["type"]
        if kind == "node_started":
            with self._lock:
                self._nodes[state.run_id] = (str(event.get("node")),
                                             random.getrandbits(64) or 1)
        elif kind in NODE_ENDS:
            self._node_span(event, state)
        elif kind in RUN_ENDS:
            self._run_span(event, state, RUN_ENDS[kind])

    def _node_span(self, event: dict[str, Any], state: RunState) -> None:
        node = str(event.get("node"))
        with self._lock:
            running = self._nodes.get(state.run_id)
            if running is not None and running[0] == node:
                del self._nodes[state.run_id]
            else:
                running = None
        if not self.sampled(state.run_id):
            return  # nothing built for a span the sampler dropped
        payload = event.get("payload") or {}
        end = _nanos(event.get("at"))
        millis = payload.get("duration_ms")
        start = end - int(millis * 1_000_000) if end is not None and isinstance(
            millis, int | float) else end
        outcome = str(payload.get("outcome") or ("ok" if event["type"] == "node_finished"
                                                 else "failed"))
        attributes: dict[str, Any] = {
            "wfrun.workflow": state.workflow, "wfrun.run_id": state.run_id,
            "wfrun.node": node, "wfrun.node.kind": str(payload.get("kind") or ""),
            "wfrun.attempt": int(payload.get("retry") or 0) + 1, "wfrun.outcome": outcome}
        error = payload.get("error")
        if isinstance(error, dict) and error.get("code"):
            attributes["wfrun.error.code"] = str(error["code"])  # the code, never the message
        if payload.get("will_retry"):
            attributes["wfrun.will_retry"] = True
        trace_id, run_span = run_ids(state.run_id)
        span_id = running[1] if running is not None else random.getrandbits(64) or 1
        self._end(f"node {node}", trace_id, span_id, run_span, attributes, (),
                  outcome != "ok", start, end)

    def _run_span(self, event: dict[str, Any], state: RunState, status: str) -> None:
        if not self.sampled(state.run_id):
            return
        from opentelemetry.trace import Link, SpanContext, TraceFlags

        attributes: dict[str, Any] = {"wfrun.workflow": state.workflow,
                                      "wfrun.run_id": state.run_id, "wfrun.outcome": status}
        code = (state.error or {}).get("code")
        if code:
            attributes["wfrun.error.code"] = str(code)
        links = []
        if state.parent_run_id:
            attributes["wfrun.parent_run_id"] = state.parent_run_id
            parent_trace, parent_span = run_ids(state.parent_run_id)
            links.append(Link(SpanContext(parent_trace, parent_span, is_remote=True,
                                          trace_flags=TraceFlags(TraceFlags.SAMPLED))))
        trace_id, span_id = run_ids(state.run_id)
        self._end(f"run {state.workflow}", trace_id, span_id, None, attributes, links,
                  status not in ("completed", "waiting"), _nanos(state.started_at),
                  _nanos(event.get("at")))

    def _end(self, name: str, trace_id: int, span_id: int, parent: int | None,
             attributes: dict[str, Any], links: Any, error: bool, start: int | None,
             end: int | None) -> None:
        """Hand a finished span to the batch processor (a bounded queue; its own
        thread encodes and sends)."""
        context, flags = self._context_class, self._flags
        span = self._span_class(
            name, context=context(trace_id, span_id, False, flags),
            parent=None if parent is None else context(trace_id, parent, False, flags),
            resource=self.resource, attributes=attributes, links=links,
            status=self._statuses[error], start_time=start,
            end_time=end if end is not None else start, instrumentation_scope=self.scope)
        self.processor.on_end(span)
        with self._lock:
            self.made += 1

    def close(self) -> None:
        """Send what is queued, waiting `EXIT_WAIT` seconds at most (a receiver that
        is down must not hold a process's exit)."""
        done = threading.Thread(target=self.provider.shutdown, daemon=True,
                                name="wfrun-otel-shutdown")
        done.start()
        done.join(EXIT_WAIT)
        lost = self.sent.unsent(self.made)
        if lost:
            log.warning("wfrun: %d of %d trace span(s) were not sent to %s (the receiver "
                        "did not take them in time, or the queue was full)", lost, self.made,
                        self.sent.endpoint)


class _Sent:
    """How many spans the receiver took (the exporter's successes): the rest were dropped."""

    def __init__(self, endpoint: str) -> None:
        self.endpoint = endpoint
        self.count = 0
        self._lock = threading.Lock()

    def add(self, n: int) -> None:
        with self._lock:
            self.count += n

    def unsent(self, made: int) -> int:
        with self._lock:
            return max(made - self.count, 0)


def _counting(inner: Any, sent: _Sent) -> Any:
    """`inner`, an exporter, counting into `sent` the spans it exported."""
    from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

    class Counting(SpanExporter):
        def export(self, spans: Any) -> SpanExportResult:
            result: SpanExportResult = inner.export(spans)
            if result == SpanExportResult.SUCCESS:
                sent.add(len(spans))
            return result

        def shutdown(self) -> None:
            inner.shutdown()

        def force_flush(self, timeout_millis: int = 30_000) -> bool:
            return bool(inner.force_flush(timeout_millis))

    return Counting()
