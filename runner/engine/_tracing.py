"""OpenTelemetry spans for runs and node attempts (issue 40, DESIGN §10; extra `wfrun[otel]`).

On when the standard `OTEL_EXPORTER_OTLP_ENDPOINT` (or `..._TRACES_ENDPOINT`) is set
and `OTEL_SDK_DISABLED` is not `true`; the other standard `OTEL_*` variables are read
as the specification has them (the sampler and the resource as the SDK reads them,
by runner/engine/_otelenv.py; the exporter's headers, timeout, compression,
certificates and `OTEL_BSP_*` batching by runner/engine/_otlpexport.py). Off, this
module imports nothing of OpenTelemetry and `observer` hands the engine's observer
back unchanged. On, it imports only the SDK's version (the `wfrun[otel]` extra is
what makes the spans' `telemetry.sdk.*`): not its trace package, ~100 modules.

Why spans are made from the run's trace events, each once it ended: a span is built
from facts the trace holds (a node attempt's start and duration, the run's start and
end), so nothing stays open across a crash. A run's trace id and its run span's id are
derived from the run id, which the bundle keeps: a run resumed by another process,
after a SIGKILL, continues the same trace, and its node spans find their parent; the
run span itself is sent when the run ends (completed, failed, timed out, cancelled,
or waiting at a checkpoint). A child run's span (a continuation, a controller's
child) links to its parent run's span. A node attempt's span id is its attempt id
(random, 64 bits, in the trace's events): a step's `TRACEPARENT` names it from the
attempt alone (a parallel node's branches each their own), and a run's thread keeps
no note of a node's start.

The sampler (`OTEL_TRACES_SAMPLER`) decides once per run, by its trace id, and the
decision covers the run span and its node spans alike: a dropped run costs no span
object at all, and its `TRACEPARENT` says "not sampled" (flags 00).

Exporting never blocks or fails a run, nor costs it much (bench/bench_tracing.py): the
run's thread queues a plain tuple per span (a bounded queue; a full one drops
records, counted), the exporter's own thread makes the spans, encodes them
(runner/engine/_otlp.py) and sends them, a problem making one is logged at debug
level, and a process exits after at most `EXIT_WAIT` seconds of sending, whether or
not the receiver answers, saying in one warning how many spans were not sent.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import os
import random
import threading
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, NamedTuple

from . import _otelenv, _otlp
from ._state import RunState

if TYPE_CHECKING:
    from ._nodecontext import NodeContext

log = logging.getLogger(__name__)

ENDPOINTS = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
# A run waiting at a checkpoint has ended too: `wfrun answer` continues it as a new run
# (its own trace, its span linked to this one).
RUN_ENDS = {"run_completed": "completed", "run_failed": "failed",
            "run_timed_out": "timed_out", "run_cancelled": "cancelled",
            "run_waiting": "waiting"}
NODE_ENDS = ("node_finished", "node_failed")
_TRACED = frozenset({*NODE_ENDS, *RUN_ENDS})
_LOW64 = _otelenv.TRACE_ID_LIMIT - 1
EXIT_WAIT = 3.0  # seconds a process waits at exit for its last spans to be sent
_SAMPLED_KEPT = 4096  # sampling decisions kept: the runs in flight in a host, and then some
_PIECES_KEPT = 4096  # encoded pieces a batch hands on to the next (runs, attempts, values)

Observer = Callable[[dict[str, Any], RunState], None]
_NUMBER = (int, float)  # a duration (a tuple: isinstance on a union is slower)

# Public: the run loop reads them (no call) to skip `observer` in a process that has
# decided tracing is off, which is every run of a host without OTEL_* set.
decided = False
current: Tracing | None = None
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
    global decided, current
    if decided:
        return current
    with _lock:
        if not decided:
            if wanted():
                try:
                    current = Tracing()
                except ImportError:
                    log.warning("wfrun: OTEL_EXPORTER_OTLP_ENDPOINT is set but the "
                                "OpenTelemetry SDK is not installed (pip install "
                                "'wfrun[otel]'): no traces are sent")
                except Exception as exc:  # a bad OTEL_* value: the runs go on untraced
                    log.warning("wfrun: cannot set up OpenTelemetry (%s): no traces are sent",
                                exc)
            decided = True
    return current


def flush() -> None:
    """Send what this process's tracing holds (bounded, as at exit): for a process that
    ends with os._exit, which runs no atexit handler (a host's worker process)."""
    if current is not None:
        current.close()


def observer(inner: Observer | None) -> Observer | None:
    """The engine observer with tracing, or `inner` itself when tracing is off (decided
    once per process: every run after the first reads the decision)."""
    tracing = current if decided else active()
    return inner if tracing is None else tracing.observer(inner)


def environment(run_id: str, attempt: str) -> dict[str, str]:
    """`TRACEPARENT` for a step of `run_id`'s node attempt `attempt` (its id), empty
    when tracing is off or there is no attempt."""
    tracing = current
    return {} if tracing is None or not attempt else tracing.environment(run_id, attempt)


def step_environment(ctx: NodeContext) -> dict[str, str]:
    """`environment` for the step of a node attempt (`ctx.span`: a fan-out item's)."""
    return environment(ctx.run_id, ctx.attempt if ctx.span is None else ctx.span)


@functools.lru_cache(maxsize=1024)  # the runs in flight in a host, and then some
def run_ids(run_id: str) -> tuple[int, int]:
    """The trace id of `run_id` and the span id of its run span (never zero)."""
    digest = hashlib.sha256(b"wfrun run " + run_id.encode()).digest()
    return (int.from_bytes(digest[:16], "big") or 1), (int.from_bytes(digest[16:24], "big") or 1)


def traceparent(trace_id: int, span_id: int, sampled: bool = True) -> str:
    return f"00-{trace_id:032x}-{span_id:016x}-{'01' if sampled else '00'}"


def span_id(attempt: Any) -> int:
    """A node attempt's span id: its attempt id (16 hex digits, runner/engine/_nodes.py
    `new_attempt_id`) read as a number; a random one for an attempt without a usable
    id (a trace from elsewhere), and never zero."""
    if type(attempt) is str and len(attempt) == 16:
        try:
            return int(attempt, 16) or 1
        except ValueError:
            pass
    return random.getrandbits(64) or 1


class _NodeEnd(NamedTuple):
    """A node attempt that ended, as the run's thread saw it: the payload's values its
    span needs, as they are (the payload itself is not kept: an output may be large;
    the exporter's thread makes them the attributes)."""

    run_id: str
    workflow: str
    node: Any
    attempt_id: Any  # the attempt's id: its span id (`span_id`)
    ended: str  # node_finished or node_failed
    kind: Any
    retry: Any
    outcome: Any
    error_code: Any
    will_retry: Any
    at: str | None
    duration_ms: Any

    def attempt(self) -> tuple[str, str, int, str]:
        """Node, kind, attempt (1 = the first try) and outcome, as attributes say them."""
        return _attempt(self.node, self.kind, self.retry, self.outcome, self.ended)

    def times(self) -> tuple[int, int]:
        end = _nanos(self.at)
        millis = self.duration_ms
        if end and isinstance(millis, _NUMBER):
            return end - int(millis * 1_000_000), end
        return end, end

    def span(self) -> _otlp.Span:
        node, kind, attempt, outcome = self.attempt()
        attributes: dict[str, Any] = {
            "wfrun.workflow": self.workflow, "wfrun.run_id": self.run_id, "wfrun.node": node,
            "wfrun.node.kind": kind, "wfrun.attempt": attempt, "wfrun.outcome": outcome}
        if self.error_code:  # the code, never the message
            attributes["wfrun.error.code"] = str(self.error_code)
        if self.will_retry:
            attributes["wfrun.will_retry"] = True
        trace_id, run_span = run_ids(self.run_id)
        start, end = self.times()
        return _otlp.Span(f"node {node}", trace_id, span_id(self.attempt_id), run_span,
                          attributes, (), outcome != "ok", start, end)

    def write(self, batch: _otlp.Batch) -> None:
        """The span `span()` makes, written without making it (`_write_node`)."""
        _write_node(self, batch)


def _attempt(node: Any, kind: Any, retry: Any, outcome: Any,
             ended: str) -> tuple[str, str, int, str]:
    outcome = outcome or ("ok" if ended == "node_finished" else "failed")
    return str(node), str(kind or ""), int(retry or 0) + 1, str(outcome)


def _write_node(record: tuple[Any, ...], batch: _otlp.Batch) -> None:
    """A node attempt's span, from its record (a `_NodeEnd`, or the plain tuple of its
    fields the run's thread queues); tests/unit/engine/test_otlp_encoding.py requires
    the message `_NodeEnd.span` makes."""
    _write_records((record,), batch)


_ZERO_ID = bytes(8)
_SECONDS: dict[str, int] = {}  # `2026-12-05T12:51:02` -> its nanoseconds (bounded)


def _write_records(records: Iterable[tuple[Any, ...]], batch: _otlp.Batch) -> None:
    """A batch's spans, from its records: the exporter's thread, once per request.

    One loop with its lookups in locals, as it runs once per node attempt: a run's
    fields (trace id, parent, workflow, run id) and an attempt's (name, node, kind,
    attempt, outcome) are encoded once a batch; a span id is its attempt id's 8 bytes
    as they are (`span_id` for any other); an event time of runner.clock.iso's shape
    is read from its second's cached value and its milliseconds (`_nanos` for any
    other); the span is then one pack (`Batch.timed_id`)."""
    pieces, seconds, timed, fromhex = batch.pieces, _SECONDS, batch.timed_id, bytes.fromhex
    for record in records:
        if type(record) is _RunEnd:
            record.write(batch)
            continue
        (run_id, workflow, node, attempt_id, ended, kind, retry, outcome, error_code,
         will_retry, at, millis) = record
        run = pieces.get(run_id)
        if run is None:  # the trace id, the run span as parent, the run's attributes
            trace_id, run_span = run_ids(run_id)
            run = pieces[run_id] = (
                batch.trace(trace_id) + batch.parent(run_span)
                + batch.attribute("wfrun.workflow", workflow)
                + batch.attribute("wfrun.run_id", run_id))
        marker = (node, kind, retry, outcome, ended)
        known = pieces.get(marker)
        if known is None:  # the name, the attempt's attributes, whether it failed
            name, kind_, attempt, said = _attempt(node, kind, retry, outcome, ended)
            known = pieces[marker] = (
                batch.name(f"node {name}") + batch.attribute("wfrun.node", name)
                + batch.attribute("wfrun.node.kind", kind_)
                + batch.attribute("wfrun.attempt", attempt)
                + batch.attribute("wfrun.outcome", said), said != "ok")
        fields, failed = known
        if error_code:
            fields += batch.attribute("wfrun.error.code", str(error_code))
        if will_retry:
            fields += batch.attribute("wfrun.will_retry", True)
        end = 0
        if type(at) is str and len(at) == 24 and at[23] == "Z" and at[19] == ".":
            base = seconds.get(at[:19])
            if base is None:
                base = _second(at[:19])
            fraction = at[20:23]
            if base and fraction.isdigit():
                end = base + int(fraction) * 1_000_000
        if not end:
            end = _nanos(at)
        start = end - int(millis * 1_000_000) if end and isinstance(millis, _NUMBER) else end
        if type(attempt_id) is str and len(attempt_id) == 16:
            try:
                sid = fromhex(attempt_id)
            except ValueError:  # not hex: `span_id` below
                sid = b""
        else:
            sid = b""
        if len(sid) != 8 or sid == _ZERO_ID:
            sid = span_id(attempt_id).to_bytes(8, "big")
        if start > 0:  # both known: the common case's short path
            timed(run, fields, sid, start, end, failed)
        else:
            batch.write(run + fields, int.from_bytes(sid, "big"), start, end, (), failed)


def _second(second: str) -> int:
    """`_SECONDS`'s value for `second` (0: not a time), kept for the next spans."""
    value = _seconds(second) or 0
    if len(_SECONDS) >= 64:
        _SECONDS.clear()  # a day's seconds would grow it: the recent ones are the ones used
    _SECONDS[second] = value
    return value


class _RunEnd(NamedTuple):
    """A run that ended (or waits at a checkpoint)."""

    run_id: str
    workflow: str
    outcome: str
    error_code: str | None
    parent_run_id: str | None
    started_at: str | None
    at: str | None

    def span(self) -> _otlp.Span:
        attributes: dict[str, Any] = {"wfrun.workflow": self.workflow,
                                      "wfrun.run_id": self.run_id, "wfrun.outcome": self.outcome}
        if self.error_code:
            attributes["wfrun.error.code"] = self.error_code
        links: tuple[tuple[int, int], ...] = ()
        if self.parent_run_id:
            attributes["wfrun.parent_run_id"] = self.parent_run_id
            links = (run_ids(self.parent_run_id),)
        trace_id, run_span = run_ids(self.run_id)
        start = _nanos(self.started_at)
        return _otlp.Span(f"run {self.workflow}", trace_id, run_span, None, attributes, links,
                          self.outcome not in ("completed", "waiting"), start,
                          _nanos(self.at) or start)

    def write(self, batch: _otlp.Batch) -> None:
        """The span `span()` makes, written without making it (one a run: its fields
        are encoded straight, its workflow's attribute shared in the batch)."""
        trace_id, run_span = run_ids(self.run_id)
        fields = (batch.trace(trace_id) + batch.name(f"run {self.workflow}")
                  + batch.attribute("wfrun.workflow", self.workflow)
                  + _otlp.key_value(9, "wfrun.run_id", self.run_id)
                  + batch.attribute("wfrun.outcome", self.outcome))
        if self.error_code:
            fields += batch.attribute("wfrun.error.code", self.error_code)
        links: tuple[tuple[int, int], ...] = ()
        if self.parent_run_id:
            fields += _otlp.key_value(9, "wfrun.parent_run_id", self.parent_run_id)
            links = (run_ids(self.parent_run_id),)
        start = _nanos(self.started_at)
        batch.write(fields, run_span, start, _nanos(self.at) or start, links,
                    self.outcome not in ("completed", "waiting"))


class Tracing:
    """One process's spans: the sampler's decisions and the exporter
    (runner/engine/_otlpexport.py) the spans' records go to.

    The run's thread does as little as it can: at a node attempt's end, and at the
    run's, it queues a plain tuple of what the span needs. The exporter's thread makes
    the spans of a batch (ids, times, attributes) and encodes them
    (runner/engine/_otlp.py). The sampler and the resource are read from the standard
    variables once (runner/engine/_otelenv.py).
    """

    def __init__(self) -> None:
        # The SDK's version only (three small modules): ImportError without the extra.
        from opentelemetry.sdk.version import __version__ as sdk_version

        from ._otlpexport import Exporter, Settings

        settings = Settings.from_environ()  # a bad value: ValueError, untraced
        self._bound = _otelenv.sampling_bound()  # OTEL_TRACES_SAMPLER(_ARG)
        if _otelenv.wants_detectors():
            attributes, schema_url = _otelenv.sdk_resource()
        else:
            attributes, schema_url = _otelenv.resource(sdk_version), ""
        self.encoder = _otlp.Encoder(attributes, schema_url)
        # Records: `_RunEnd`s, and node ends as plain tuples of `_NodeEnd`'s fields.
        self.exporter: Exporter[tuple[Any, ...]] = Exporter(settings, self._encode)
        self._sampled: dict[str, bool] = {}  # run id -> the sampler's decision (bounded)
        self._last: _otlp.Batch | None = None  # the exporter's thread's last batch
        self._closed = False
        import atexit

        atexit.register(self.close)

    @property
    def made(self) -> int:
        """Spans ended (handed to the exporter)."""
        return self.exporter.made

    def observer(self, inner: Observer | None) -> Observer:
        # What runs per event is kept short and local: it is on the run's thread, a
        # few times per node (bench/bench_tracing.py).
        decided, add, sampled_now = self._sampled, self.exporter.add, self.sampled

        def observe(event: dict[str, Any], state: RunState) -> None:
            kind = event["type"]
            if kind in _TRACED:
                try:
                    run_id = state.run_id
                    if kind in RUN_ENDS:
                        self._run_end(kind, event, state)
                    else:
                        sampled = decided.get(run_id)
                        if sampled or (sampled is None and sampled_now(run_id)):
                            payload = event.get("payload") or {}
                            error = payload.get("error")
                            # A plain tuple of atomic values, not a `_NodeEnd`: the
                            # garbage collector stops tracking it at its first pass, where
                            # a tuple subclass stays tracked into the oldest generation
                            # while it waits in the queue (more full collections). The
                            # span id is made from the attempt's id on the exporter's side.
                            add((
                                run_id, state.workflow, event.get("node"),
                                event.get("attempt"), kind,
                                payload.get("kind"), payload.get("retry"),
                                payload.get("outcome"),
                                error.get("code") if type(error) is dict else None,
                                payload.get("will_retry"), event.get("at"),
                                payload.get("duration_ms")))
                except Exception:  # a span never costs a run anything
                    log.debug("wfrun: cannot make a span of %s", kind, exc_info=True)
            if inner is not None:
                inner(event, state)

        return observe

    def environment(self, run_id: str, attempt: str) -> dict[str, str]:
        return {"TRACEPARENT": traceparent(run_ids(run_id)[0], span_id(attempt),
                                           self.sampled(run_id))}

    def sampled(self, run_id: str) -> bool:
        """The sampler's decision for the run's trace, made once, at its first span or
        step, for the run span and every node span alike (a ratio sampler decides by
        the trace id, which the run id fixes: every process that runs a part of the
        run decides the same)."""
        known = self._sampled.get(run_id)
        if known is not None:
            return known
        sampled = run_ids(run_id)[0] & _LOW64 < self._bound
        if len(self._sampled) >= _SAMPLED_KEPT:
            self._sampled.clear()  # a host's finished runs: decided again if seen
        self._sampled[run_id] = sampled
        return sampled

    def _run_end(self, kind: str, event: dict[str, Any], state: RunState) -> None:
        run_id = state.run_id
        if self.sampled(run_id):
            code = (state.error or {}).get("code")
            self.exporter.add(_RunEnd(run_id, state.workflow, RUN_ENDS[kind],
                                      str(code) if code else None, state.parent_run_id,
                                      state.started_at, event.get("at")))

    def _encode(self, records: list[tuple[Any, ...]]) -> bytes:
        """The exporter's thread: a batch of records, as one OTLP request."""
        # The pieces of the last batch are kept for the next (its runs' and node
        # attempts' fields), up to a bound: a long-lived host's workflows are few.
        last = self._last
        batch = _otlp.Batch(last if last is not None and last.kept() < _PIECES_KEPT else None)
        _write_records(records, batch)
        self._last = batch
        return self.encoder.request(batch)

    def flush(self) -> None:
        """Send what is queued now (this thread waits for it)."""
        self.exporter.flush()

    def close(self) -> None:
        """Send what is queued, waiting `EXIT_WAIT` seconds at most (a receiver that
        is down must not hold a process's exit), and say once what was not sent."""
        if self._closed:
            return
        self._closed = True
        exporter = self.exporter
        exporter.close(EXIT_WAIT)
        lost, made = exporter.unsent(), exporter.made
        if lost:
            why = []
            if exporter.dropped:
                why.append(f"{exporter.dropped} dropped from a full queue "
                           "(OTEL_BSP_MAX_QUEUE_SIZE)")
            if lost > exporter.dropped:
                why.append(f"{lost - exporter.dropped} the receiver did not take in time")
            log.warning("wfrun: %d of %d trace span(s) were not sent to %s (%s)", lost, made,
                        exporter.settings.endpoint, "; ".join(why))


@functools.lru_cache(maxsize=256)  # a node's end and the next one's often share a ms
def _nanos(at: str | None) -> int:
    """Nanoseconds since the epoch of a trace event's time (`2026-12-05T12:51:02.123Z`,
    runner.clock.iso), 0 when there is none. The date part is parsed once a second."""
    if not isinstance(at, str):
        return 0
    second, dot, fraction = at.partition(".")
    if dot and len(fraction) == 4 and fraction[3] == "Z" and fraction[:3].isdigit():
        base = _seconds(second)
        if base is not None:
            return base + int(fraction[:3]) * 1_000_000
    try:
        moment = datetime.fromisoformat(at)
    except ValueError:
        return 0
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    whole = int(moment.replace(microsecond=0).timestamp())
    return whole * 1_000_000_000 + moment.microsecond * 1000


@functools.lru_cache(maxsize=64)
def _seconds(second: str) -> int | None:
    """`2026-12-05T12:51:02` (UTC) in nanoseconds since the epoch."""
    try:
        moment = datetime.fromisoformat(second).replace(tzinfo=UTC)
    except ValueError:
        return None
    return int(moment.timestamp()) * 1_000_000_000
