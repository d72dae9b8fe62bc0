"""Python hooks (`module:function`, `./file.py:function` or a registered step) and
calling them bounded, with their `with:` parameters rendered.

A hook runs on a worker thread so a timeout, cancel or park can abandon it:
Python cannot kill a thread, so a hung hook is left behind (daemon) and its
result ignored, the same policy as non-cooperative callbacks upstream, and the
same helper as the controller manager's reconcile calls (`runner._deadline`).
"""

from __future__ import annotations

import importlib
import importlib.util
import logging
import re
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from runner._deadline import run_with_deadline
from runner.compiler import HookRef
from runner.compiler._registry import registered_steps
from runner.compiler._templates import render_native
from runner.errors import OperationFailed
from runner.steps import HookContext, StepFailed, StepTimedOut

from . import _tracing as tracing
from ._control import RunControl
from ._nodecontext import NodeContext, NodeResult, fail, json_value, stopped

_lock = threading.Lock()
_CODE_RE = re.compile(r"^[A-Za-z][A-Za-z0-9_]{0,63}$")  # an error code a switch can name
# A raising hook's traceback goes only here (never into the trace: DESIGN §9); the CLI
# prints this logger on stderr with --debug.
TRACEBACKS = logging.getLogger("runner.hooks")


class HookError(OperationFailed):
    """A hook could not be loaded."""


def load_hook(hook: HookRef) -> Callable[..., Any]:
    if hook.step is not None:
        return _load_step(hook.step)
    with _lock:
        if hook.module:
            try:
                module = importlib.import_module(hook.module)
            except (Exception, SystemExit) as exc:  # user code at import: exit() included
                raise HookError(f"cannot import hook module '{hook.module}': "
                                f"{type(exc).__name__}: {exc}") from None
        else:
            assert hook.file is not None
            name = f"wfrun_hook_{(hook.sha256 or '')[:16]}_{abs(hash(hook.file)) % 10**8}"
            module = sys.modules.get(name)  # type: ignore[assignment]
            if module is None:
                spec = importlib.util.spec_from_file_location(name, hook.file)
                if spec is None or spec.loader is None:
                    raise HookError(f"cannot load hook file '{hook.file}'")
                module = importlib.util.module_from_spec(spec)
                try:
                    spec.loader.exec_module(module)
                except (Exception, SystemExit) as exc:  # exit() at import stops no host
                    raise HookError(f"hook file '{hook.file}' failed to load: "
                                    f"{type(exc).__name__}: {exc}") from None
                sys.modules[name] = module
    fn = getattr(module, hook.function, None)
    if not callable(fn):
        raise HookError(f"hook '{hook.ref}': '{hook.function}' is not a function in the module")
    return fn  # type: ignore[no-any-return]


def _load_step(name: str) -> Callable[..., Any]:
    ep = registered_steps().get(name)
    if ep is None:  # uninstalled since the workflow was compiled
        raise HookError(f"no step named '{name}' is registered (entry-point group "
                        "wfrun.steps); install the package that provides it")
    try:
        fn = ep.load()
    except (Exception, SystemExit) as exc:
        raise HookError(f"step '{name}' ({ep.value}) failed to load: "
                        f"{type(exc).__name__}: {exc}") from None
    if not callable(fn):
        raise HookError(f"step '{name}' ({ep.value}) is not a function")
    return fn  # type: ignore[no-any-return]


@dataclass(frozen=True)
class HookOutcome:
    ending: str  # returned | raised | timed_out | stopped
    value: Any = None
    error: str | None = None
    exception: BaseException | None = None  # what it raised (classified by `call_hook`)


def run_bounded(fn: Callable[[], Any], deadline: float | None, control: RunControl,
                monotonic: Callable[[], float]) -> HookOutcome:
    """Run a hook with `runner._deadline` (a pooled thread, abandoned on a stop or at
    `deadline` on the run's clock)."""
    call = run_with_deadline(fn, deadline=deadline, monotonic=monotonic,
                             stop=lambda: control.stopping)
    if call.ending == "raised":
        exc = call.error
        if exc is not None and TRACEBACKS.isEnabledFor(logging.DEBUG):
            TRACEBACKS.debug("a hook raised %s", type(exc).__name__,
                             exc_info=(type(exc), exc, exc.__traceback__))
        return HookOutcome("raised", error=f"{type(exc).__name__}: {exc}"[:2000], exception=exc)
    if call.ending == "returned":
        return HookOutcome("returned", value=call.value)
    return HookOutcome(call.ending)


def hook_context(ctx: NodeContext, params: dict[str, Any]) -> HookContext:
    values = ctx.values
    # Copies: the context's outputs/results are the driver's live per-scope views
    # (ScopedValues, engine/_state.py), which user code must not be able to change.
    return HookContext(input=values["input"], outputs=dict(values["outputs"]),
                       results=dict(values["results"]), run=values["run"],
                       project=values["project"], publish_update=ctx.updates.publish,
                       secrets=dict(values.get("secrets") or {}),
                       env=dict(values.get("env") or {}), params=params,
                       remaining=ctx.remaining, stopping=lambda: ctx.control.stopping,
                       traceparent=tracing.step_environment(ctx).get("TRACEPARENT"))


def call_hook(ctx: NodeContext, hook: HookRef, with_: Any) -> NodeResult:
    """One attempt of a `call:` node: `with:` rendered natively in the node's scope
    (template errors end the node like any template's), the hook run bounded, what it
    raised classified: `StepFailed` keeps its code, `StepTimedOut` is `timed_out`."""
    params = render_native(with_, ctx.values) if with_ is not None else {}
    try:
        fn = load_hook(hook)
    except HookError as exc:
        return fail("hook_error", exc.message)
    hctx = hook_context(ctx, dict(params))
    out = run_bounded(lambda: fn(hctx), ctx.deadline, ctx.control, ctx.clock.monotonic)
    if out.ending == "stopped" or (out.ending == "raised" and ctx.control.stopping):
        # A hook that gave up because the run stopped (the `http` step shuts its request
        # down) may raise before the wait above saw the stop: the stop is the ending.
        return stopped(ctx.control)
    if out.ending == "timed_out":
        return NodeResult("timed_out", error={"code": "timed_out",
                                              "message": f"hook {hook.ref} did not return in time"})
    if out.ending == "raised":
        raised = out.exception
        if isinstance(raised, StepFailed):
            code = raised.code if _CODE_RE.match(str(raised.code)) else "step_failed"
            return fail(code, str(raised.message))
        if isinstance(raised, StepTimedOut):
            return NodeResult("timed_out", error={"code": "timed_out",
                                                  "message": str(raised)[:2000]})
        return fail("hook_raised", f"hook {hook.ref} raised {out.error}")
    value, bad = json_value(out.value, f"hook {hook.ref}")
    return bad or NodeResult("ok", value)
