"""`triggers:` in a workflow file (DESIGN §10): the specs and their shape checks.

A trigger starts runs: on a schedule (`cron`, `every`), on a signed HTTP delivery
(`webhook`) or on file changes (`files`). The compiler checks every key with
positioned diagnostics; the host's trigger loop (runner/launch/_triggers.py) fires
them. Triggers are not part of the definition digest: when a run starts does not
change what it does, so editing a schedule never refuses a queued run.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ._diagnostics import DiagnosticSink, KeyPath, did_you_mean
from ._durations import DurationError, parse_duration

TRIGGER_KINDS = ("cron", "every", "webhook", "files")
SCHEDULE_KEYS = ("timezone", "missed", "catch_up_window", "overlap")
TRIGGER_KEYS = (*TRIGGER_KINDS, *SCHEDULE_KEYS, "input", "description")
#: A controller's trigger enqueues the resource `key` it renders instead of a run.
CONTROLLER_TRIGGER_KEYS = (*TRIGGER_KINDS, *SCHEDULE_KEYS, "key", "description")
WEBHOOK_KEYS = ("path", "secret", "signature_header", "delivery_header", "debounce")
FILES_KEYS = ("paths", "debounce")
MISSED = ("all", "last", "none")
OVERLAP = ("skip", "queue", "cancel_running", "allow")
DEFAULT_CATCH_UP_WINDOW = 86_400.0
#: The shortest `every`: a faster schedule is a busy loop, not a trigger.
MIN_EVERY = 1.0
SIGNATURE_HEADER = "X-Hub-Signature-256"
DELIVERY_HEADER = "X-GitHub-Delivery"
_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]*$")
_HEADER_RE = re.compile(r"^[A-Za-z0-9-]{1,64}$")
_ENV_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclass(frozen=True)
class WebhookSpec:
    path: str
    secret: str | None  # the environment variable holding the HMAC key
    signature_header: str = SIGNATURE_HEADER
    delivery_header: str = DELIVERY_HEADER
    debounce: float | None = None


@dataclass(frozen=True)
class FilesSpec:
    paths: tuple[str, ...]
    debounce: float | None = None


@dataclass(frozen=True)
class TriggerSpec:
    """One named trigger; exactly one of cron/every/webhook/files is set."""

    name: str
    cron: str | None = None
    every: float | None = None
    webhook: WebhookSpec | None = None
    files: FilesSpec | None = None
    timezone: str = "UTC"
    missed: str = "last"
    catch_up_window: float = DEFAULT_CATCH_UP_WINDOW
    overlap: str = "skip"  # "allow" for webhook and files triggers unless written
    input: Any = None  # a template tree over `trigger` and `event`; None: no input
    description: str | None = None
    key: str | None = None  # a controller's trigger: the resource key template

    @property
    def kind(self) -> str:
        if self.cron is not None:
            return "cron"
        if self.every is not None:
            return "every"
        return "webhook" if self.webhook is not None else "files"

    @property
    def scheduled(self) -> bool:
        return self.cron is not None or self.every is not None

    def schedule_text(self) -> str:
        if self.cron is not None:
            return f"cron '{self.cron}' ({self.timezone})"
        if self.every is not None:
            return f"every {self.every:g}s"
        if self.webhook is not None:
            return f"webhook {self.webhook.path}"
        return "files " + ", ".join(self.files.paths if self.files else ())

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "kind": self.kind,
                               "missed": self.missed, "overlap": self.overlap,
                               "catch_up_window": self.catch_up_window}
        if self.cron is not None:
            out.update(cron=self.cron, timezone=self.timezone)
        if self.every is not None:
            out["every"] = self.every
        if self.webhook is not None:
            out["webhook"] = {"path": self.webhook.path,
                              "signature_header": self.webhook.signature_header,
                              "delivery_header": self.webhook.delivery_header}
        if self.files is not None:
            out["files"] = {"paths": list(self.files.paths)}
        return out


def cron_problem(expr: str) -> str | None:
    """Why `expr` is not a 5- or 6-field cron expression (cronsim's reading), or None."""
    from datetime import UTC, datetime

    from cronsim import CronSim, CronSimError

    fields = len(expr.split())
    if fields not in (5, 6):
        return (f"a cron expression has 5 fields (minute hour day month weekday) or 6 "
                f"with seconds first, not {fields}")
    try:
        CronSim(expr, datetime(2000, 1, 1, tzinfo=UTC))
    except CronSimError as exc:
        return str(exc) or "not a cron expression"
    return None


def timezone_problem(name: str) -> str | None:
    # Here: the model imports this module, and a run of a workflow without a
    # scheduled trigger must not load the zone database's finder (cold start).
    from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

    try:
        ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        return f"unknown time zone '{name}'; write an IANA name such as Europe/Berlin or UTC"
    return None


def parse_triggers(value: Any, sink: DiagnosticSink, *,
                   controller: bool = False) -> tuple[TriggerSpec, ...]:
    """Check `triggers:` (name -> spec); every mistake is reported at its key.
    `controller`: a controller's triggers, each with a resource `key:` template."""
    kp: KeyPath = ("triggers",)
    if not isinstance(value, dict):
        sink.error("wrong-type", "triggers must be a mapping of name -> trigger", kp)
        return ()
    found: list[TriggerSpec] = []
    for name, spec in value.items():
        where = (*kp, name)
        if not isinstance(name, str) or not _NAME_RE.match(name):
            sink.error("invalid-id", f"trigger name '{name}' must match "
                       "[A-Za-z_][A-Za-z0-9_-]*", where, at_key=True)
            continue
        trigger = _trigger(name, spec, where, sink, controller)
        if trigger is not None:
            found.append(trigger)
    return tuple(found)


def _trigger(name: str, spec: Any, kp: KeyPath, sink: DiagnosticSink,
             controller: bool = False) -> TriggerSpec | None:
    if not isinstance(spec, dict):
        sink.error("wrong-type", f"trigger '{name}' must be a mapping with one of: "
                   f"{', '.join(TRIGGER_KINDS)}", kp)
        return None
    ok = _keys(spec, CONTROLLER_TRIGGER_KEYS if controller else TRIGGER_KEYS, kp,
               f"trigger '{name}'", sink)
    if controller and "key" not in spec:
        sink.error("missing-key", f"trigger '{name}' of a controller needs 'key': the "
                   "resource key to reconcile, like '{{ event.body.number }}'", kp,
                   at_key=True)
        ok = False
    kinds = [k for k in TRIGGER_KINDS if k in spec]
    if len(kinds) != 1:
        sink.error("missing-key" if not kinds else "ambiguous-trigger",
                   f"trigger '{name}' needs exactly one of: {', '.join(TRIGGER_KINDS)}"
                   + (f" (it has {', '.join(kinds)})" if kinds else ""), kp, at_key=True)
        return None
    kind = kinds[0]
    values: dict[str, Any] = {}
    if kind == "cron":
        cron = spec["cron"]
        if not isinstance(cron, str):
            sink.error("wrong-type", "cron must be a string like \"0 3 * * *\"", (*kp, "cron"))
            ok = False
        elif (problem := cron_problem(cron)) is not None:
            sink.error("invalid-cron", f"cron '{cron}': {problem}", (*kp, "cron"))
            ok = False
        values["cron"] = cron
    elif kind == "every":
        every = _duration(spec["every"], (*kp, "every"), "every", sink)
        if every is not None and every < MIN_EVERY:
            sink.error("out-of-range", f"every must be at least {MIN_EVERY:g}s", (*kp, "every"))
            every = None
        ok = ok and every is not None
        values["every"] = every
    elif kind == "webhook":
        webhook = _webhook(spec["webhook"], (*kp, "webhook"), sink)
        ok = ok and webhook is not None
        values["webhook"] = webhook
    else:
        files = _files(spec["files"], (*kp, "files"), sink)
        ok = ok and files is not None
        values["files"] = files
    schedule_only = [k for k in SCHEDULE_KEYS if k in spec and k != "overlap"]
    if kind not in ("cron", "every") and schedule_only:
        sink.error("unknown-key", f"'{schedule_only[0]}' applies to cron and every "
                   f"triggers, not to a {kind} trigger", (*kp, schedule_only[0]), at_key=True)
        ok = False
    if "timezone" in spec:
        zone = spec["timezone"]
        if kind == "every":
            sink.error("unknown-key", "'timezone' applies to cron triggers only",
                       (*kp, "timezone"), at_key=True)
            ok = False
        elif (problem := timezone_problem(zone) if isinstance(zone, str) else
              "timezone must be a string such as Europe/Berlin") is not None:
            sink.error("invalid-timezone", problem, (*kp, "timezone"))
            ok = False
        else:
            values["timezone"] = zone
    if kind in ("webhook", "files") or controller:
        # Each event is work of its own: none is dropped because another runs (a
        # `concurrency:` key limits how many run at once).
        values["overlap"] = "allow"
    for key, choices in (("missed", MISSED), ("overlap", OVERLAP)):
        if key in spec:
            chosen = spec[key]
            if chosen not in choices:
                hint = did_you_mean(str(chosen), choices)
                sink.error("invalid-value", f"{key} must be one of: {', '.join(choices)}",
                           (*kp, key), hint=hint)
                ok = False
            else:
                values[key] = chosen
    if "catch_up_window" in spec:
        window = _duration(spec["catch_up_window"], (*kp, "catch_up_window"),
                           "catch_up_window", sink)
        ok = ok and window is not None
        if window is not None:
            values["catch_up_window"] = window
    if "input" in spec and not controller:
        ok = _templates(spec["input"], (*kp, "input"), sink) and ok
        values["input"] = spec["input"]
    if controller and "key" in spec:
        if not isinstance(spec["key"], str) or not spec["key"].strip():
            sink.error("wrong-type", "key must be a template string", (*kp, "key"))
            ok = False
        else:
            ok = _templates(spec["key"], (*kp, "key"), sink) and ok
            values["key"] = spec["key"]
    if "description" in spec:
        if not isinstance(spec["description"], str):
            sink.error("wrong-type", "description must be a string", (*kp, "description"))
            ok = False
        else:
            values["description"] = spec["description"]
    return TriggerSpec(name=name, **values) if ok else None


def _keys(m: Mapping[Any, Any], allowed: tuple[str, ...], kp: KeyPath, what: str,
          sink: DiagnosticSink) -> bool:
    ok = True
    for k in m:
        if not isinstance(k, str) or k not in allowed:
            sink.error("unknown-key", f"unknown key '{k}' in {what}", (*kp, k), at_key=True,
                       hint=did_you_mean(str(k), allowed)
                       or f"expected one of: {', '.join(allowed)}")
            ok = False
    return ok


def _duration(value: Any, kp: KeyPath, what: str, sink: DiagnosticSink) -> float | None:
    try:
        seconds = parse_duration(value)
    except DurationError as exc:
        sink.error("invalid-duration", f"{what}: {exc}", kp)
        return None
    if seconds is None:
        sink.error("invalid-duration", f"{what} needs a duration like 30s, 15m or 1d", kp)
    return seconds


def _templates(value: Any, kp: KeyPath, sink: DiagnosticSink) -> bool:
    """Syntax and budget of every string in an input tree (its names are `trigger` and
    `event`, checked when it renders: the reference checks know a run's names only)."""
    if isinstance(value, str):
        from ._template_checks import check_budget, check_syntax

        problem = check_syntax(value)
        if problem is not None:
            sink.error("template-syntax", f"template syntax error: {problem[1]}", kp)
            return False
        over = check_budget(value)
        if over is not None:
            sink.error("template-budget", f"template over its budget: {over[1]}", kp)
            return False
        return True
    if isinstance(value, dict):
        return all([_templates(v, (*kp, k), sink) for k, v in value.items()])
    if isinstance(value, list):
        return all([_templates(v, (*kp, i), sink) for i, v in enumerate(value)])
    return True


def _webhook(value: Any, kp: KeyPath, sink: DiagnosticSink) -> WebhookSpec | None:
    if not isinstance(value, dict):
        sink.error("wrong-type", "webhook must be a mapping like {path: /hooks/push, "
                   "secret: PUSH_SECRET}", kp)
        return None
    ok = _keys(value, WEBHOOK_KEYS, kp, "webhook", sink)
    path = value.get("path")
    if not isinstance(path, str) or not re.fullmatch(r"/[A-Za-z0-9._~/-]{0,200}", path):
        sink.error("invalid-value" if "path" in value else "missing-key",
                   "webhook needs a 'path' starting with / (letters, digits, . _ ~ - /)",
                   (*kp, "path") if "path" in value else kp, at_key="path" not in value)
        ok = False
    secret = value.get("secret")
    if secret is not None and (not isinstance(secret, str) or not _ENV_RE.match(secret)):
        sink.error("invalid-value", "webhook secret names an environment variable "
                   "(like PUSH_SECRET), never the secret itself", (*kp, "secret"))
        ok = False
    headers = {}
    for key in ("signature_header", "delivery_header"):
        if key in value:
            if not isinstance(value[key], str) or not _HEADER_RE.match(value[key]):
                sink.error("invalid-value", f"{key} must be an HTTP header name", (*kp, key))
                ok = False
            else:
                headers[key] = value[key]
    debounce = None
    if "debounce" in value:
        debounce = _duration(value["debounce"], (*kp, "debounce"), "debounce", sink)
        ok = ok and debounce is not None
    if not ok:
        return None
    return WebhookSpec(path=str(path), secret=secret, debounce=debounce, **headers)


def _files(value: Any, kp: KeyPath, sink: DiagnosticSink) -> FilesSpec | None:
    if not isinstance(value, dict):
        sink.error("wrong-type", "files must be a mapping like {paths: [\"src/**/*.py\"]}", kp)
        return None
    ok = _keys(value, FILES_KEYS, kp, "files", sink)
    paths = value.get("paths")
    if (not isinstance(paths, list) or not paths
            or not all(isinstance(p, str) and p.strip() for p in paths)):
        sink.error("invalid-value" if "paths" in value else "missing-key",
                   "files needs 'paths': a list of glob patterns relative to the project",
                   (*kp, "paths") if "paths" in value else kp, at_key="paths" not in value)
        return None
    if any(p.startswith("/") or ".." in p.split("/") for p in paths):
        sink.error("invalid-value", "files paths are relative to the project and stay "
                   "inside it", (*kp, "paths"))
        return None
    debounce = None
    if "debounce" in value:
        debounce = _duration(value["debounce"], (*kp, "debounce"), "debounce", sink)
        ok = ok and debounce is not None
    return FilesSpec(paths=tuple(paths), debounce=debounce) if ok else None
