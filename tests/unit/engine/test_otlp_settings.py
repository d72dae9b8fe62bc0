"""The exporter's settings from the standard OTEL_EXPORTER_OTLP_* and OTEL_BSP_* variables
(runner/engine/_otlpexport.py), as the OpenTelemetry specification reads them, and a
one-line error naming the variable for a bad value."""

from __future__ import annotations

import pytest

from runner.engine._otlpexport import Settings


def test_defaults_and_the_general_endpoint_as_a_base() -> None:
    settings = Settings.from_environ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318/"})
    assert settings == Settings("http://collector:4318/v1/traces")
    assert (settings.timeout, settings.delay, settings.max_queue, settings.batch) == \
        (10.0, 5.0, 2048, 512)


def test_the_traces_variables_win_and_the_traces_endpoint_is_used_as_it_is() -> None:
    settings = Settings.from_environ({
        "OTEL_EXPORTER_OTLP_ENDPOINT": "http://general:4318",
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "https://traces:443/custom/path",
        "OTEL_EXPORTER_OTLP_HEADERS": "a=1",
        "OTEL_EXPORTER_OTLP_TRACES_HEADERS": "B=2,c=x%3Dy",
        "OTEL_EXPORTER_OTLP_TIMEOUT": "1000",
        "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT": "2500",
        "OTEL_EXPORTER_OTLP_COMPRESSION": "GZIP",
        "OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE": "/etc/ca.pem",
        "OTEL_BSP_SCHEDULE_DELAY": "20",
        "OTEL_BSP_MAX_QUEUE_SIZE": "100",
        "OTEL_BSP_MAX_EXPORT_BATCH_SIZE": "512",
        "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf"})
    assert settings == Settings(
        "https://traces:443/custom/path", headers={"b": "2", "c": "x=y"}, timeout=2.5,
        compression="gzip", certificate="/etc/ca.pem", max_queue=100, batch=100,
        delay=0.02)


@pytest.mark.parametrize(("environ", "message"), [
    ({"OTEL_EXPORTER_OTLP_ENDPOINT": "collector:4318"},
     "OTEL_EXPORTER_OTLP_ENDPOINT must be an http:// or https:// URL"),
    ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "grpc://c:4317"},
     "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT must be an http:// or https:// URL"),
    ({"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"},
     "OTEL_EXPORTER_OTLP_PROTOCOL=grpc: wfrun sends traces as http/protobuf only"),
    ({"OTEL_EXPORTER_OTLP_TRACES_HEADERS": "novalue"},
     "OTEL_EXPORTER_OTLP_TRACES_HEADERS must be KEY=VALUE pairs"),
    ({"OTEL_EXPORTER_OTLP_HEADERS": "x-evil=a%0D%0Ainjected: 1"},
     "OTEL_EXPORTER_OTLP_HEADERS: 'x-evil=a%0D%0Ainjected: 1' is not a valid HTTP header"),
    ({"OTEL_EXPORTER_OTLP_COMPRESSION": "zstd"},
     "OTEL_EXPORTER_OTLP_COMPRESSION must be gzip, deflate or none"),
    ({"OTEL_EXPORTER_OTLP_TIMEOUT": "soon"},
     "OTEL_EXPORTER_OTLP_TIMEOUT must be a positive number of milliseconds"),
    ({"OTEL_BSP_MAX_QUEUE_SIZE": "0"},
     "OTEL_BSP_MAX_QUEUE_SIZE must be a positive number of spans"),
])
def test_a_bad_value_names_its_variable(environ: dict[str, str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Settings.from_environ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", **environ})
