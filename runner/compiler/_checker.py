"""The shape checker the parser and every node kind's body parser share.

Small typed accessors that report one positioned diagnostic and return None, so
a parser reads as the format it accepts. Nothing raises for a user's mistake.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from ._budget import DEFAULT_BUDGET
from ._diagnostics import DiagnosticSink, KeyPath, did_you_mean
from ._durations import DurationError, parse_duration
from ._jsonschemas import schema_problem_at
from ._model import HookRef, Node
from ._registry import STEP_GROUP, registered_steps
from ._sources import sha256_hex
from ._values import case_key, type_name

__all__ = ["Checker", "case_key", "type_name"]

ID_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]*$")
MODULE_HOOK_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*:[A-Za-z_]\w*$")
# A bare name: a step registered under the entry-point group `wfrun.steps`.
STEP_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]*$")
FILE_HOOK_RE = re.compile(r"^(\.{1,2}/[^:]+\.py):([A-Za-z_]\w*)$")


class Checker:
    """Walks one document; small typed accessors that report and return None.

    `shapes_checked`: the document's shape was checked from its JSON Schema already
    (a workflow, docshape.py), so the accessors convert and say nothing about shape
    (`shape_error` is silent); their format and cross-field checks still report."""

    def __init__(self, sink: DiagnosticSink, base_dir: Path, *,
                 shapes_checked: bool = False) -> None:
        self.sink = sink
        self.base_dir = base_dir
        self.shapes_checked = shapes_checked
        self.hooks: list[HookRef] = []
        self.budget = DEFAULT_BUDGET  # what constant template parts are tried against
        self.templates: list[tuple[KeyPath, str]] = []
        self.channels: list[tuple[KeyPath, str]] = []  # notify channel names (parse.py)
        # Parses a node nested in another (a fan-out body: compiler/_fanout.py) with the
        # file's defaults; the parser sets it before it parses nodes.
        self.body_node: Callable[[str, Any, KeyPath], Node | None] | None = None

    # -- shapes -----------------------------------------------------------------
    def shape_error(self, code: str, message: str, kp: KeyPath, *, at_key: bool = False,
                    hint: str | None = None) -> None:
        if not self.shapes_checked:
            self.sink.error(code, message, kp, at_key=at_key, hint=hint)

    def mapping(self, value: Any, kp: KeyPath, what: str,
                hint: str | None = None) -> dict[str, Any] | None:
        if isinstance(value, dict):
            return value
        self.shape_error("wrong-type", f"{what} must be a mapping, not {type_name(value)}", kp,
                         hint=hint)
        return None

    def keys(self, m: Mapping[Any, Any], allowed: tuple[str, ...], kp: KeyPath,
             what: str, required: tuple[str, ...] = ()) -> None:
        if self.sink.stopped or self.shapes_checked:  # past the cap: skip 'did you mean'
            return
        for k in m:
            if not isinstance(k, str) or k not in allowed:
                hint = did_you_mean(str(k), allowed)
                self.sink.error("unknown-key", f"unknown key '{k}' in {what}", (*kp, k),
                                at_key=True,
                                hint=hint or f"expected one of: {', '.join(allowed)}")
        for k in required:
            if k not in m:
                self.sink.error("missing-key", f"{what} needs '{k}'", kp, at_key=bool(kp))

    def string(self, value: Any, kp: KeyPath, what: str, *, template: bool = False,
               non_empty: bool = True) -> str | None:
        if not isinstance(value, str):
            self.shape_error("wrong-type", f"{what} must be a string, not {type_name(value)}",
                             kp)
            return None
        if non_empty and not value.strip():
            self.sink.error("empty-value", f"{what} must not be empty", kp)
            return None
        if template:
            self.template(value, kp)
        return value

    def template(self, text: str, kp: KeyPath) -> None:
        # Jinja2 loads with the first template: a controller file has none.
        from ._template_checks import check_budget, check_syntax

        self.templates.append((kp, text))
        problem = check_syntax(text)
        if problem is not None:
            _, message = problem
            self.sink.error("template-syntax", f"template syntax error: {message}", kp)
            return
        over = check_budget(text, self.budget)
        if over is not None:
            self.sink.error("template-budget", f"template over its budget: {over[1]}", kp)

    def templates_in(self, value: Any, kp: KeyPath) -> None:
        """Check every string inside an input mapping or list as a template."""
        if isinstance(value, str):
            self.template(value, kp)
        elif isinstance(value, dict):
            for k, v in value.items():
                self.templates_in(v, (*kp, k))
        elif isinstance(value, list):
            for i, v in enumerate(value):
                self.templates_in(v, (*kp, i))

    def boolean(self, value: Any, kp: KeyPath, what: str) -> bool | None:
        if isinstance(value, bool):
            return value
        self.shape_error("wrong-type", f"{what} must be true or false, not "
                         f"{type_name(value)}", kp)
        return None

    def integer(self, value: Any, kp: KeyPath, what: str, lo: int, hi: int) -> int | None:
        if isinstance(value, bool) or not isinstance(value, int):
            self.shape_error("wrong-type", f"{what} must be an integer, not "
                             f"{type_name(value)}", kp)
            return None
        if not lo <= value <= hi:
            self.shape_error("out-of-range", f"{what} must be between {lo} and {hi}", kp)
            return None
        return value

    def duration(self, value: Any, kp: KeyPath, what: str) -> tuple[bool, float | None]:
        try:
            return True, parse_duration(value)
        except DurationError as exc:
            self.sink.error("invalid-duration", f"{what}: {exc}", kp)
            return False, None

    def ident(self, value: Any, kp: KeyPath, what: str, *, at_key: bool = False) -> str | None:
        if not isinstance(value, str) or not ID_RE.match(value):
            self.sink.error("invalid-id", f"{what} '{value}' must match [A-Za-z_][A-Za-z0-9_-]*",
                            kp, at_key=at_key)
            return None
        return value

    def schema(self, value: Any, kp: KeyPath, what: str) -> dict[str, Any] | None:
        if not isinstance(value, dict):
            self.shape_error("wrong-type", f"{what} must be a JSON Schema mapping, not "
                             f"{type_name(value)}", kp)
            return None
        found = schema_problem_at(value)
        if found is not None:
            problem, inner = found  # placed on the offending key, not on `input:`/`output:`
            self.sink.error("invalid-schema", f"{what} is not a valid JSON Schema: {problem}",
                            (*kp, *inner))
            return None
        return value

    def hook(self, value: Any, kp: KeyPath) -> HookRef | None:
        if not isinstance(value, str):
            self.shape_error("wrong-type", f"a hook must be a string like 'module:function' "
                             f"or './file.py:function', not {type_name(value)}", kp)
            return None
        ref = value.strip()
        if STEP_NAME_RE.match(ref):
            return self.step(ref, kp)
        if MODULE_HOOK_RE.match(ref):
            module, function = ref.split(":")
            hook = HookRef(ref=ref, module=module, function=function)
        else:
            match = FILE_HOOK_RE.match(ref)
            if match and "\0" in ref:
                self.sink.error("invalid-hook", "a hook's file path cannot contain a NUL "
                                "byte", kp)
                return None
            if not match:
                self.sink.error("invalid-hook", f"'{value}' is not a hook; write "
                                "'package.module:function', './file.py:function' or the name "
                                "of a registered step", kp)
                return None
            try:
                file = (self.base_dir / match.group(1)).resolve()
                # A FIFO or device would block the read, a directory cannot be one.
                if not file.is_file():
                    raise FileNotFoundError(match.group(1))
                data = file.read_bytes()
            except (OSError, RuntimeError):  # RuntimeError: a symlink loop (Python < 3.13)
                self.sink.error("hook-not-found", f"hook file '{match.group(1)}' does not exist "
                                f"next to this workflow (or is not a readable file)", kp)
                return None
            hook = HookRef(ref=ref, file=str(file), function=match.group(2),
                           sha256=sha256_hex(data))
        self.hooks.append(hook)
        return hook

    def step(self, name: str, kp: KeyPath) -> HookRef | None:
        names = sorted(registered_steps())
        if name not in names:
            self.sink.error("unknown-step", f"no step named '{name}' is registered (entry-point "
                            f"group {STEP_GROUP}); a hook in a module is written "
                            "'module:function'", kp,
                            hint=did_you_mean(name, names) or (
                                "registered steps: " + ", ".join(names) if names else None))
            return None
        hook = HookRef(ref=name, step=name)
        self.hooks.append(hook)
        return hook
