"""The span exporter (runner/engine/_otlpexport.py) against the real OTLP/HTTP receiver on
127.0.0.1 (tests/fakes/otlp_receiver.py): adding never waits on the receiver, a full
queue drops the newest spans and counts them, retryable answers are tried again, a
refused batch is counted, and the standard variables' headers and compression reach
the receiver."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest
from fakes.otlp_receiver import OtlpReceiver
from waiting import DEADLINE, wait_until

from runner.engine._otlp import Encoder, Span
from runner.engine._otlpexport import Exporter, Settings

ENCODER = Encoder({"service.name": "wfrun-test"})


@pytest.fixture
def receiver() -> Iterator[OtlpReceiver]:
    receiver = OtlpReceiver().start()
    yield receiver
    receiver.stop()


def span(n: int) -> Span:
    return Span(f"s{n}", 7, n + 1, None, {"n": n}, (), False, 1, 2)


def exporter(settings: Settings) -> Exporter[Span]:
    return Exporter(settings, ENCODER.encode)


def names(receiver: OtlpReceiver) -> list[str]:
    return [s.name for s in receiver.received()]


def test_adding_never_waits_and_a_full_queue_drops_the_newest_counted(
        receiver: OtlpReceiver) -> None:
    receiver.gate = threading.Event()  # the receiver holds its answers
    spans = exporter(Settings(f"{receiver.endpoint}/v1/traces", max_queue=8, batch=4,
                              delay=DEADLINE * 2))
    for n in range(4):  # a whole batch: the exporter's thread takes it at once
        spans.add(span(n))
    wait_until(lambda: receiver.arrived == 1, what="the first batch at the receiver")
    for n in range(4, 15):  # 8 fit in the queue; adding returns while the receiver holds
        spans.add(span(n))
    assert (spans.made, spans.dropped) == (15, 3)
    receiver.gate.set()
    spans.close(DEADLINE)
    assert sorted(names(receiver), key=lambda name: int(name[1:])) == \
        [f"s{n}" for n in range(12)]
    assert (spans.sent, spans.unsent()) == (12, 3)
    spans.add(span(99))  # closed: counted, never queued
    assert (spans.made, spans.unsent()) == (16, 4)


def test_retryable_answers_are_tried_again(receiver: OtlpReceiver) -> None:
    receiver.answers = [(503, {"Retry-After": "0"}), (429, {"Retry-After": "0"})]
    spans = exporter(Settings(f"{receiver.endpoint}/v1/traces", delay=DEADLINE * 2))
    for n in range(3):
        spans.add(span(n))
    spans.flush()
    assert sorted(names(receiver)) == ["s0", "s1", "s2"]
    assert receiver.arrived == 3  # two refusals, then the batch
    assert (spans.sent, spans.unsent()) == (3, 0)
    spans.close(DEADLINE)


def test_a_refused_batch_is_not_tried_again_and_is_counted(receiver: OtlpReceiver) -> None:
    receiver.answers = [(400, {})]
    spans = exporter(Settings(f"{receiver.endpoint}/v1/traces", delay=DEADLINE * 2))
    spans.add(span(0))
    spans.add(span(1))
    spans.flush()
    assert receiver.arrived == 1
    assert receiver.received() == []
    spans.add(span(2))  # the next batch goes on as usual
    spans.close(DEADLINE)
    assert names(receiver) == ["s2"]
    assert (spans.made, spans.sent, spans.unsent()) == (3, 1, 2)


@pytest.mark.parametrize("compression", ["gzip", "deflate"])
def test_the_standard_headers_and_compression_reach_the_receiver(
        receiver: OtlpReceiver, compression: str) -> None:
    settings = Settings.from_environ({
        "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint + "/",
        "OTEL_EXPORTER_OTLP_HEADERS": "authorization=Bearer%20abc, x-tenant=blue",
        "OTEL_EXPORTER_OTLP_TRACES_COMPRESSION": compression})
    spans = exporter(settings)
    spans.add(span(0))
    spans.close(DEADLINE)
    assert names(receiver) == ["s0"]
    [headers] = receiver.headers
    assert headers["authorization"] == "Bearer abc"
    assert headers["x-tenant"] == "blue"
    assert headers["content-encoding"] == compression
    assert headers["content-type"] == "application/x-protobuf"
