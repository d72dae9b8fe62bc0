"""Python hooks (`module:function` or `./file.py:function`) and running them bounded.

A hook runs on a worker thread so a timeout, cancel or park can abandon it:
Python cannot kill a thread, so a hung hook is left behind (daemon) and its
result ignored, the same policy as non-cooperative callbacks upstream, and the
same helper as the controller manager's reconcile calls (`runner.deadline`).
"""

from __future__ import annotations

import importlib
import importlib.util
import logging
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from runner.compiler import HookRef
from runner.deadline import run_with_deadline
from runner.errors import OperationFailed

from .control import RunControl

_lock = threading.Lock()
# A raising hook's traceback goes only here (never into the trace: DESIGN §9); the CLI
# prints this logger on stderr with --debug.
TRACEBACKS = logging.getLogger("runner.hooks")


class HookError(OperationFailed):
    """A hook could not be loaded."""


def load_hook(hook: HookRef) -> Callable[..., Any]:
    with _lock:
        if hook.module:
            try:
                module = importlib.import_module(hook.module)
            except Exception as exc:
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
                except Exception as exc:
                    raise HookError(f"hook file '{hook.file}' failed to load: "
                                    f"{type(exc).__name__}: {exc}") from None
                sys.modules[name] = module
    fn = getattr(module, hook.function, None)
    if not callable(fn):
        raise HookError(f"hook '{hook.ref}': '{hook.function}' is not a function in the module")
    return fn  # type: ignore[no-any-return]


@dataclass(frozen=True)
class HookOutcome:
    ending: str  # returned | raised | timed_out | stopped
    value: Any = None
    error: str | None = None


def run_bounded(fn: Callable[[], Any], deadline: float | None, control: RunControl,
                monotonic: Callable[[], float]) -> HookOutcome:
    """Run a hook with `runner.deadline` (a pooled thread, abandoned on a stop or at
    `deadline` on the run's clock)."""
    call = run_with_deadline(fn, deadline=deadline, monotonic=monotonic,
                             stop=lambda: control.stopping)
    if call.ending == "raised":
        exc = call.error
        if exc is not None and TRACEBACKS.isEnabledFor(logging.DEBUG):
            TRACEBACKS.debug("a hook raised %s", type(exc).__name__,
                             exc_info=(type(exc), exc, exc.__traceback__))
        return HookOutcome("raised", error=f"{type(exc).__name__}: {exc}"[:2000])
    if call.ending == "returned":
        return HookOutcome("returned", value=call.value)
    return HookOutcome(call.ending)
