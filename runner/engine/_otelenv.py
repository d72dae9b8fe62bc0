"""The standard `OTEL_*` settings of a tracer besides the exporter's: the sampler
(`OTEL_TRACES_SAMPLER`, `OTEL_TRACES_SAMPLER_ARG`) and the resource (`OTEL_SERVICE_NAME`,
`OTEL_RESOURCE_ATTRIBUTES`), read as opentelemetry-sdk reads them, without importing it.

Why not ask the SDK: its trace package, which `TracerProvider` and `Resource` come
with, is ~100 modules and ~9,000 objects, 60-70 ms of CPU in every traced process
(a `wfrun run` is ~300 ms), and every full collection walks the objects after
(issue 40, bench/bench_tracing.py). wfrun's spans need the sampler's decision for a
root span and a dict of resource attributes, a page of code.
tests/unit/engine/test_otel_env.py holds both to the SDK's own answers.

A resource made by other detectors (`OTEL_EXPERIMENTAL_RESOURCE_DETECTORS`) is left
to the SDK: `sdk_resource` imports it only then.
"""

from __future__ import annotations

import logging
import os
import urllib.parse
from collections.abc import Mapping
from typing import Any

__all__ = ["RATIO_SAMPLERS", "SAMPLERS", "TRACE_ID_LIMIT", "resource", "sampling_bound",
           "sdk_resource", "wants_detectors"]

log = logging.getLogger(__name__)

TRACE_ID_LIMIT = 1 << 64  # the ratio samplers read a trace id's low 64 bits
RATIO_SAMPLERS = ("traceidratio", "parentbased_traceidratio")
# Every name the SDK knows. wfrun's run span is a root span (it has no parent), so a
# `parentbased_` sampler decides as the sampler it falls back to for roots.
SAMPLERS = ("always_on", "always_off", "parentbased_always_on", "parentbased_always_off",
            *RATIO_SAMPLERS)
DEFAULT_SAMPLER = "parentbased_always_on"
SERVICE = "wfrun"  # service.name when neither variable names one


def sampling_bound(environ: Mapping[str, str] = os.environ) -> int:
    """The sampler as a bound: a trace is sampled when its id's low 64 bits are below
    it (0: none is, TRACE_ID_LIMIT: every one is). What the SDK does with a bad value,
    wfrun does too: an unknown sampler is the default, a ratio that is not a number
    from 0 to 1 is 1 (each said in a warning)."""
    name = environ.get("OTEL_TRACES_SAMPLER", DEFAULT_SAMPLER).lower()
    if name not in SAMPLERS:
        log.warning("wfrun: OTEL_TRACES_SAMPLER=%s is not a sampler (%s): traces are "
                    "sampled as %s", name, ", ".join(SAMPLERS), DEFAULT_SAMPLER)
        name = DEFAULT_SAMPLER
    if name in RATIO_SAMPLERS:
        raw = environ.get("OTEL_TRACES_SAMPLER_ARG", "")
        try:
            rate = float(raw)
        except ValueError:
            rate = -1.0
        if not 0.0 <= rate <= 1.0:  # NaN too
            log.warning("wfrun: OTEL_TRACES_SAMPLER_ARG=%r is not a ratio from 0 to 1: "
                        "every trace is sampled", raw)
            rate = 1.0
        return round(rate * TRACE_ID_LIMIT)  # the SDK's TraceIdRatioBased bound
    return 0 if name.endswith("always_off") else TRACE_ID_LIMIT


def wants_detectors(environ: Mapping[str, str] = os.environ) -> bool:
    """Whether the resource is to come from detectors besides the standard variables."""
    return bool(environ.get("OTEL_EXPERIMENTAL_RESOURCE_DETECTORS", "").strip())


def resource(sdk_version: str, environ: Mapping[str, str] = os.environ) -> dict[str, Any]:
    """The resource `Resource.create` makes with its default detectors: the SDK's
    name and version, a random `service.instance.id` for this process, then
    `OTEL_RESOURCE_ATTRIBUTES` (values percent-decoded), then `OTEL_SERVICE_NAME`;
    `service.name` is `wfrun` when neither variable names one."""
    attributes: dict[str, Any] = {
        "telemetry.sdk.language": "python", "telemetry.sdk.name": "opentelemetry",
        "telemetry.sdk.version": sdk_version, "service.instance.id": _uuid4()}
    for item in environ.get("OTEL_RESOURCE_ATTRIBUTES", "").split(","):
        if not item.strip():
            continue
        key, sep, value = item.partition("=")
        if not sep:
            log.warning("wfrun: OTEL_RESOURCE_ATTRIBUTES: %r is not KEY=VALUE (left out)",
                        item.strip())
            continue
        attributes[key.strip()] = urllib.parse.unquote(value.strip())
    attributes["service.name"] = (environ.get("OTEL_SERVICE_NAME")
                                  or attributes.get("service.name") or SERVICE)
    return attributes


def sdk_resource() -> tuple[dict[str, Any], str]:
    """The resource's attributes and schema URL as the SDK's detectors make them
    (`OTEL_EXPERIMENTAL_RESOURCE_DETECTORS`), with wfrun's default service name."""
    from opentelemetry.sdk.resources import Resource

    made = Resource.create()
    attributes = dict(made.attributes)
    if str(attributes.get("service.name", "")).startswith("unknown_service"):
        attributes["service.name"] = SERVICE
    return attributes, made.schema_url or ""


def _uuid4() -> str:
    """A random (version 4) UUID, as the SDK's `service.instance.id` is: formatted here
    because the uuid module's import costs ~20 modules."""
    raw = bytearray(os.urandom(16))
    raw[6] = raw[6] & 0x0F | 0x40
    raw[8] = raw[8] & 0x3F | 0x80
    h = raw.hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"
