"""Sending spans over OTLP/HTTP: a bounded queue and one thread that posts batches
(issue 40; the standard `OTEL_EXPORTER_OTLP_*` and `OTEL_BSP_*` settings).

Why not the official exporter: it takes the SDK's span objects and re-encodes them
with the official encoder (most of tracing's cost, bench/bench_tracing.py), and the
only way around that was its private HTTP client. This module is the batch span
processor and the exporter in one, over a small HTTP/1.1 client of its own
(runner/engine/_otlphttp.py: `http.client` imported `email.*` and `ssl` for one POST
a batch):

- `add` (the run's thread) appends a record to a deque and returns: no lock, no
  encoding, no I/O. A full queue (`OTEL_BSP_MAX_QUEUE_SIZE`) drops the record and
  counts it; the run never waits.
- The exporter's thread wakes every `OTEL_BSP_SCHEDULE_DELAY` ms, or as soon as a
  batch (`OTEL_BSP_MAX_EXPORT_BATCH_SIZE`) is queued, encodes the records (the
  caller's `encode`) and POSTs them on one kept-alive connection; 429, 502, 503,
  504 and connection errors are tried again with backoff until the export timeout.
- `close` sends what is queued and waits a bounded time (a receiver that is down
  must not hold a process's exit); `unsent` counts every record the receiver did not
  take, dropped or failed.

Only the standard library and runner's policy modules: nothing of OpenTelemetry.
"""

from __future__ import annotations

import collections
import logging
import os
import threading
import urllib.parse
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from runner._backoff import backoff_delay
from runner.clock import Clock, SystemClock

from ._otlphttp import Connection

__all__ = ["Exporter", "Settings"]

log = logging.getLogger(__name__)

R = TypeVar("R")
RETRIED = frozenset({429, 502, 503, 504})  # the OTLP/HTTP spec's retryable answers
_PATH = "v1/traces"


def _number(environ: Mapping[str, str], name: str, default: float, *, unit: str) -> float:
    raw = environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not value > 0 or value == float("inf"):
        raise ValueError(f"{name} must be a positive number of {unit}, not {raw!r}")
    return value


def _first(environ: Mapping[str, str], *names: str) -> tuple[str, str]:
    """The first of `names` set (not blank), and its value: ('', '') for none."""
    for name in names:
        value = environ.get(name, "").strip()
        if value:
            return name, value
    return "", ""


def _headers(name: str, raw: str) -> dict[str, str]:
    """`key=value,key2=value2`, values percent-encoded (the OTLP exporter spec)."""
    headers: dict[str, str] = {}
    for item in raw.split(","):
        if not item.strip():
            continue
        key, sep, value = item.partition("=")
        key = urllib.parse.unquote(key).strip().lower()
        if not sep or not key:
            raise ValueError(f"{name} must be KEY=VALUE pairs separated by commas, "
                             f"not {item.strip()!r}")
        value = urllib.parse.unquote(value).strip()
        if any(c in key + value for c in "\r\n\0") or any(c in key for c in " :\t"):
            raise ValueError(f"{name}: {item.strip()!r} is not a valid HTTP header")
        headers[key] = value
    return headers


@dataclass(frozen=True)
class Settings:
    """Where and how spans are sent, read from the standard environment variables
    (the `_TRACES_` ones win over the general ones, as the spec says)."""

    endpoint: str
    headers: Mapping[str, str] = field(default_factory=dict)
    timeout: float = 10.0  # seconds a batch may take, its retries included
    compression: str = "none"  # none, gzip or deflate
    certificate: str | None = None
    client_key: str | None = None
    client_certificate: str | None = None
    max_queue: int = 2048
    batch: int = 512
    delay: float = 5.0  # seconds between two exports (at most)

    @classmethod
    def from_environ(cls, environ: Mapping[str, str] = os.environ) -> Settings:
        """ValueError, saying which variable and what it must be, for a bad value."""
        def signal(name: str) -> tuple[str, str]:
            return _first(environ, f"OTEL_EXPORTER_OTLP_TRACES_{name}",
                          f"OTEL_EXPORTER_OTLP_{name}")

        protocol_name, protocol = signal("PROTOCOL")
        if protocol and protocol != "http/protobuf":
            raise ValueError(f"{protocol_name}={protocol}: wfrun sends traces as "
                             "http/protobuf only (unset it, or set it to http/protobuf)")
        endpoint = environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "").strip()
        name = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
        if not endpoint:  # the general endpoint is a base: the signal's path is added
            name = "OTEL_EXPORTER_OTLP_ENDPOINT"
            base = environ.get(name, "").strip() or "http://localhost:4318"
            endpoint = f"{base.rstrip('/')}/{_PATH}"
        parts = urllib.parse.urlsplit(endpoint)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"{name} must be an http:// or https:// URL, not {endpoint!r}")
        header_name, raw_headers = signal("HEADERS")
        compression_name, compression = signal("COMPRESSION")
        compression = compression.lower() or "none"
        if compression not in ("none", "gzip", "deflate"):
            raise ValueError(f"{compression_name} must be gzip, deflate or none, "
                             f"not {compression!r}")
        timeout_name = signal("TIMEOUT")[0] or "OTEL_EXPORTER_OTLP_TIMEOUT"
        batch = int(_number(environ, "OTEL_BSP_MAX_EXPORT_BATCH_SIZE", 512, unit="spans"))
        queue = int(_number(environ, "OTEL_BSP_MAX_QUEUE_SIZE", 2048, unit="spans"))
        return cls(
            endpoint=endpoint, headers=_headers(header_name, raw_headers),
            # Milliseconds, as the OTLP exporter spec has it.
            timeout=_number(environ, timeout_name, 10_000, unit="milliseconds") / 1000,
            compression=compression, certificate=signal("CERTIFICATE")[1] or None,
            client_key=signal("CLIENT_KEY")[1] or None,
            client_certificate=signal("CLIENT_CERTIFICATE")[1] or None,
            max_queue=queue, batch=min(batch, queue),
            delay=_number(environ, "OTEL_BSP_SCHEDULE_DELAY", 5000, unit="milliseconds") / 1000)


def _connect(settings: Settings) -> Connection:
    headers = {"Content-Type": "application/x-protobuf", "User-Agent": "wfrun",
               **settings.headers}
    if settings.compression != "none":
        headers["Content-Encoding"] = settings.compression
    return Connection(settings.endpoint, headers, certificate=settings.certificate,
                      client_certificate=settings.client_certificate,
                      client_key=settings.client_key)


class Exporter(Generic[R]):
    """A bounded queue of records and the thread that encodes and sends them."""

    def __init__(self, settings: Settings, encode: Callable[[list[R]], bytes],
                 clock: Clock | None = None) -> None:
        self.settings = settings
        self._encode = encode
        self._clock = clock or SystemClock()
        self._connection = _connect(settings)
        self._queue: collections.deque[R] = collections.deque()
        self._max, self._batch = settings.max_queue, settings.batch
        self._wake = threading.Event()  # a batch is waiting, or closing
        self._closing = threading.Event()
        self._taking = True  # False once closing: `add` reads it, not the Event
        self._export_lock = threading.Lock()  # one sender at a time (flush vs the thread)
        self._count_lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self.dropped = 0  # queue full
        self.taken = 0  # records taken from the queue to be sent
        self.sent = 0  # records the receiver took
        if hasattr(os, "register_at_fork"):
            forked = weakref.WeakMethod(self._forked)  # the hook must not keep it alive
            os.register_at_fork(after_in_child=lambda: (method := forked()) and method())

    # -- the run's thread -------------------------------------------------------
    def add(self, record: R) -> None:
        """Queue `record` for sending; never blocks (a full queue drops it, counted).
        Once per span on the run's thread: plain attributes, no Event call but when
        a batch fills."""
        queue = self._queue
        if len(queue) < self._max and self._taking:
            queue.append(record)
            if self._thread is None:
                self._start()
            if len(queue) >= self._batch and not self._wake.is_set():
                self._wake.set()
            return
        with self._count_lock:
            self.dropped += 1

    @property
    def made(self) -> int:
        """Records handed to `add`: sent, failed, dropped or still queued."""
        with self._count_lock:
            return self.taken + len(self._queue) + self.dropped

    def unsent(self) -> int:
        with self._count_lock:
            return self.taken - self.sent + len(self._queue) + self.dropped

    # -- sending ----------------------------------------------------------------
    def flush(self) -> None:
        """Send everything queued now, on the calling thread."""
        self._send_all()

    def close(self, wait: float) -> None:
        """Send what is queued, waiting `wait` seconds at most; nothing is queued after."""
        self._taking = False
        self._closing.set()
        self._wake.set()
        thread = self._thread
        if thread is not None:  # None: nothing was ever queued
            thread.join(wait)

    def _start(self) -> None:
        with self._count_lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._work, daemon=True,
                                                name="wfrun-otlp-export")
                self._thread.start()

    def _forked(self) -> None:
        # The parent's thread is not in the child, nor is its connection's use: the
        # child sends its own spans from a thread of its own.
        self._queue.clear()
        self._thread = None
        self._wake, self._closing = threading.Event(), threading.Event()
        self._taking = True
        self._export_lock, self._count_lock = threading.Lock(), threading.Lock()
        self._connection = _connect(self.settings)
        self.dropped = self.taken = self.sent = 0

    def _work(self) -> None:
        while not self._closing.is_set():
            self._clock.sleep(self.settings.delay, self._wake)
            self._wake.clear()
            self._send_all()
        self._send_all()

    def _send_all(self) -> None:
        with self._export_lock:
            while self._queue:
                with self._count_lock:  # `made` never misses a record on its way
                    batch = [self._queue.popleft()
                             for _ in range(min(self._batch, len(self._queue)))]
                    self.taken += len(batch)
                try:
                    body = self._encode(batch)
                except Exception:  # a record it cannot write: that batch is lost, counted
                    log.debug("wfrun: cannot encode %d span(s)", len(batch), exc_info=True)
                    continue
                try:
                    sent = self._send(body)
                except Exception:  # the thread must live on: this batch is counted
                    log.debug("wfrun: cannot send %d span(s)", len(batch), exc_info=True)
                    sent = False
                if sent:
                    with self._count_lock:
                        self.sent += len(batch)

    def _send(self, body: bytes) -> bool:
        """POST one batch, tried again on a retryable answer until the timeout."""
        if self.settings.compression == "gzip":
            import gzip  # only when asked for: most receivers are local, uncompressed

            body = gzip.compress(body, mtime=0)
        elif self.settings.compression == "deflate":
            import zlib

            body = zlib.compress(body)
        clock = self._clock
        deadline = clock.monotonic() + self.settings.timeout
        attempt = 0
        while True:
            attempt += 1
            remaining = deadline - clock.monotonic()
            if remaining <= 0:
                return False
            try:
                status, wait = self._connection.post(body, remaining)
            except OSError as exc:  # no answer, or not HTTP (_otlphttp.BadAnswer)
                status, wait = 0, None
                log.debug("wfrun: cannot send spans to %s: %s", self.settings.endpoint, exc)
            if 200 <= status < 300:
                return True
            if status and status not in RETRIED:
                log.debug("wfrun: %s answered %d to the spans", self.settings.endpoint,
                          status)
                return False
            if self._closing.is_set():
                return False  # exiting: one try, the rest is counted
            delay = wait if wait is not None else backoff_delay(attempt, 1.0, 32.0)
            if clock.monotonic() + delay >= deadline or clock.sleep(delay, self._closing):
                return False
