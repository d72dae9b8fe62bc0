"""`concurrency:` and `rate_limit:` (DESIGN §10, flow control): the specs and checks.

Both are launch policy, like triggers: they decide when a run may start, not what
it does, so they stay out of the definition digest. The key templates see the
run's `input` and `workflow` (its name) and are rendered when the run is queued.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ._diagnostics import DiagnosticSink, KeyPath, did_you_mean
from ._durations import DurationError, parse_duration

CONCURRENCY_KEYS = ("key", "limit", "strategy")
RATE_LIMIT_KEYS = ("key", "limit", "per")
STRATEGIES = ("queue", "cancel_newest", "cancel_running")


@dataclass(frozen=True)
class ConcurrencySpec:
    key: str  # a template; its rendering names the group of runs
    limit: int = 1
    strategy: str = "queue"


@dataclass(frozen=True)
class RateLimitSpec:
    key: str
    limit: int
    per: float  # seconds


def parse_concurrency(value: Any, sink: DiagnosticSink) -> ConcurrencySpec | None:
    kp: KeyPath = ("concurrency",)
    m = _mapping(value, kp, "concurrency", "{key: \"{{ input.repo }}\", limit: 1}", sink)
    if m is None or not _keys(m, CONCURRENCY_KEYS, kp, "concurrency", ("key",), sink):
        return None
    key = _key(m["key"], (*kp, "key"), sink)
    limit = _limit(m.get("limit", 1), (*kp, "limit"), sink)
    strategy = m.get("strategy", "queue")
    if strategy not in STRATEGIES:
        sink.error("invalid-value", f"strategy must be one of: {', '.join(STRATEGIES)}",
                   (*kp, "strategy"), hint=did_you_mean(str(strategy), STRATEGIES))
        return None
    if key is None or limit is None:
        return None
    return ConcurrencySpec(key=key, limit=limit, strategy=strategy)


def parse_rate_limit(value: Any, sink: DiagnosticSink) -> RateLimitSpec | None:
    kp: KeyPath = ("rate_limit",)
    m = _mapping(value, kp, "rate_limit", "{key: \"{{ input.provider }}\", limit: 10, per: 1m}",
                 sink)
    if m is None or not _keys(m, RATE_LIMIT_KEYS, kp, "rate_limit", RATE_LIMIT_KEYS, sink):
        return None
    key = _key(m["key"], (*kp, "key"), sink)
    limit = _limit(m["limit"], (*kp, "limit"), sink)
    try:
        per = parse_duration(m["per"])
    except DurationError as exc:
        sink.error("invalid-duration", f"per: {exc}", (*kp, "per"))
        return None
    if per is None:
        sink.error("invalid-duration", "per needs a duration like 1s, 1m or 1h", (*kp, "per"))
        return None
    if key is None or limit is None:
        return None
    return RateLimitSpec(key=key, limit=limit, per=per)


def _mapping(value: Any, kp: KeyPath, what: str, example: str,
             sink: DiagnosticSink) -> dict[str, Any] | None:
    if isinstance(value, dict):
        return value
    sink.error("wrong-type", f"{what} must be a mapping like {example}", kp)
    return None


def _keys(m: dict[str, Any], allowed: tuple[str, ...], kp: KeyPath, what: str,
          required: tuple[str, ...], sink: DiagnosticSink) -> bool:
    ok = True
    for k in m:
        if k not in allowed:
            sink.error("unknown-key", f"unknown key '{k}' in {what}", (*kp, k), at_key=True,
                       hint=did_you_mean(str(k), allowed)
                       or f"expected one of: {', '.join(allowed)}")
            ok = False
    for k in required:
        if k not in m:
            sink.error("missing-key", f"{what} needs '{k}'", kp, at_key=True)
            ok = False
    return ok


def _key(value: Any, kp: KeyPath, sink: DiagnosticSink) -> str | None:
    if not isinstance(value, str) or not value.strip():
        sink.error("wrong-type", "key must be a template string like \"{{ input.repo }}\"", kp)
        return None
    from ._template_checks import check_budget, check_syntax

    problem = check_syntax(value) or check_budget(value)
    if problem is not None:
        sink.error("template-syntax", f"template error: {problem[1]}", kp)
        return None
    return value


def _limit(value: Any, kp: KeyPath, sink: DiagnosticSink) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 100_000:
        sink.error("out-of-range", "limit must be an integer between 1 and 100000", kp)
        return None
    return value
