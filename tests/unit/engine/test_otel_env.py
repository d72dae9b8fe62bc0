"""The sampler and the resource wfrun reads from the standard OTEL_* variables without
the SDK (runner/engine/_otelenv.py) are the SDK's own: the same decisions for the
same trace ids, the same resource attributes; and a traced process does not import
the SDK's trace package (its ~100 modules were most of tracing's start-up cost)."""

from __future__ import annotations

import random
import subprocess
import sys
from pathlib import Path

import pytest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import sampling
from opentelemetry.sdk.version import __version__ as sdk_version
from opentelemetry.trace import SpanKind

from runner.engine import _otelenv, _tracing

REPO = Path(_tracing.__file__).resolve().parents[2]
TRACE_IDS = [random.Random(7).getrandbits(128) for _ in range(2000)] + [
    0, 1, (1 << 64) - 1, 1 << 64, (1 << 63), (1 << 63) - 1, (1 << 128) - 1]


@pytest.mark.parametrize(("sampler", "arg"), [
    (None, None), ("always_on", None), ("always_off", None),
    ("parentbased_always_on", None), ("parentbased_always_off", None),
    ("traceidratio", "0.25"), ("parentbased_traceidratio", "0.5"),
    ("TraceIdRatio", "0.999"), ("traceidratio", "0"), ("traceidratio", "1"),
    ("traceidratio", "1.5"), ("traceidratio", "-0.1"), ("traceidratio", "nan"),
    ("traceidratio", "half"), ("traceidratio", None), ("nonesuch", None), ("", None)])
def test_the_sampler_decides_as_the_sdks_for_a_root_span(
        monkeypatch: pytest.MonkeyPatch, sampler: str | None, arg: str | None) -> None:
    for name, value in (("OTEL_TRACES_SAMPLER", sampler), ("OTEL_TRACES_SAMPLER_ARG", arg)):
        if value is None:
            monkeypatch.delenv(name, raising=False)
        else:
            monkeypatch.setenv(name, value)
    theirs = sampling._get_from_env_or_default()
    bound = _otelenv.sampling_bound()
    for trace_id in TRACE_IDS:
        expected = theirs.should_sample(None, trace_id, "run", SpanKind.INTERNAL).decision \
            is sampling.Decision.RECORD_AND_SAMPLE
        assert (trace_id & ((1 << 64) - 1) < bound) is expected, hex(trace_id)


def test_a_bad_sampler_or_ratio_is_said_in_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    assert _otelenv.sampling_bound({"OTEL_TRACES_SAMPLER": "sometimes"}) == \
        _otelenv.TRACE_ID_LIMIT
    assert _otelenv.sampling_bound({"OTEL_TRACES_SAMPLER": "traceidratio",
                                    "OTEL_TRACES_SAMPLER_ARG": "2"}) == _otelenv.TRACE_ID_LIMIT
    messages = [r.getMessage() for r in caplog.records]
    assert "OTEL_TRACES_SAMPLER=sometimes is not a sampler" in messages[0]
    assert "OTEL_TRACES_SAMPLER_ARG='2' is not a ratio from 0 to 1" in messages[1]


@pytest.mark.parametrize("environ", [
    {},
    {"OTEL_SERVICE_NAME": "billing"},
    {"OTEL_RESOURCE_ATTRIBUTES": "deployment.environment=ci, team = a%20b,,odd,x=1=2"},
    {"OTEL_RESOURCE_ATTRIBUTES": "service.name=from-attrs,k=v",
     "OTEL_SERVICE_NAME": "wins"},
])
def test_the_resource_is_the_sdks(monkeypatch: pytest.MonkeyPatch,
                                  environ: dict[str, str]) -> None:
    for name in ("OTEL_SERVICE_NAME", "OTEL_RESOURCE_ATTRIBUTES",
                 "OTEL_EXPERIMENTAL_RESOURCE_DETECTORS"):
        monkeypatch.delenv(name, raising=False)
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    theirs = dict(Resource.create().attributes)
    ours = _otelenv.resource(sdk_version, environ)
    # Per process, random in both (a version 4 UUID).
    instance = ours.pop("service.instance.id")
    theirs.pop("service.instance.id")
    assert len(instance) == 36
    assert instance[14] == "4"
    assert instance[19] in "89ab"
    # wfrun names its service when neither variable does (the SDK: unknown_service:...).
    if str(theirs["service.name"]).startswith("unknown_service"):
        theirs["service.name"] = "wfrun"
    assert ours == theirs


def test_resource_detectors_are_left_to_the_sdk(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_EXPERIMENTAL_RESOURCE_DETECTORS", "process")
    assert _otelenv.wants_detectors()
    attributes, _ = _otelenv.sdk_resource()
    assert attributes["process.pid"]  # the process detector's
    assert attributes["service.name"] == "wfrun"


def test_tracing_on_does_not_import_the_sdks_trace_package() -> None:
    probe = (
        "import os, sys\n"
        "os.environ['OTEL_EXPORTER_OTLP_ENDPOINT'] = 'http://127.0.0.1:9'\n"
        "from runner.engine import _tracing\n"
        "assert _tracing.active() is not None\n"
        "print(' '.join(sorted(m for m in sys.modules if m.startswith('opentelemetry'))))\n")
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO)}
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         env=env, check=False)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["opentelemetry", "opentelemetry.sdk",
                                  "opentelemetry.sdk.version"]


def test_a_node_span_is_named_by_its_attempt_id() -> None:
    assert _tracing.span_id("00000000000000a7") == 0xA7
    assert _tracing.span_id("0000000000000000") == 1  # never zero: an invalid span id
    assert 0 < _tracing.span_id(None) < 1 << 64  # a trace from elsewhere: a random one
    assert 0 < _tracing.span_id("not-hex-at-all!!") < 1 << 64
