"""What a Python hook or a registered step sees, and how it says what went wrong.

A hook is a function `(ctx: HookContext) -> JSON value`. It is named in a
workflow as `module:function`, `./file.py:function`, or by the name an installed
package registers under the entry-point group `wfrun.steps`:

    [project.entry-points."wfrun.steps"]
    slack = "my_pkg.steps:slack"

`action: {call: REF, with: {...}}` renders each `with` value as a template
(natively: `"{{ outputs.count }}"` is a number) and hands the mapping over as
`ctx.params`. A step may declare the JSON Schema of its `with:` as the attribute
`with_schema` on its function; the compiler then checks the written keys and
constant values, positioned, with a 'did you mean'.

A hook ends its node `failed` by raising `StepFailed(code, message)` (the code is
what `$result.error.code` and a `retry` see), `timed_out` by raising
`StepTimedOut`; anything else it raises is `hook_raised`. It runs on a worker
thread that is abandoned at the node's deadline or on a cancel: a well-behaved
step bounds its own waits by `ctx.remaining()` and checks `ctx.stopping()`.

This package imports nothing from wfrun's layers; wfrun's own `http` step
(`runner.steps.http`) is written against this API only, as a plugin would be.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


def _never() -> bool:
    return False


def _unbounded() -> float | None:
    return None


def _drop(_kind: str, _key: str, _data: Any) -> None:
    return None


@dataclass
class HookContext:
    """What a hook receives: read-only copies of the run's values, its `with:`
    parameters, and the node's deadline and stop request."""

    input: Any
    outputs: dict[str, Any]
    results: dict[str, Any]
    run: dict[str, Any]
    project: dict[str, Any]
    publish_update: Callable[[str, str, Any], None] = _drop
    secrets: dict[str, str] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)
    params: dict[str, Any] = field(default_factory=dict)  # `with:`, rendered
    # Seconds left before the node's deadline (None: no deadline), on the run's clock.
    remaining: Callable[[], float | None] = _unbounded
    stopping: Callable[[], bool] = _never  # the run was cancelled or parked
    # W3C `traceparent` naming this node attempt's span when tracing is on (else None):
    # a step that calls out passes it on (the `http` step sends it as a header).
    traceparent: str | None = None


class StepFailed(Exception):
    """Ends the node `failed` with a stable error code and a one-line message."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class StepTimedOut(Exception):
    """Ends the node `timed_out` (its own bounded wait ran out)."""


__all__ = ["HookContext", "StepFailed", "StepTimedOut"]
