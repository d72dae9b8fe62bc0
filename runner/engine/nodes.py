"""Executing one attempt of one node, per kind; the run loop lives in `runner.py`.

Each function returns a `NodeResult` and never raises for a workflow author's
or an agent's mistake: those become `failed` results with a stable code.
"""

from __future__ import annotations

import json
import os
import secrets
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from runner.compiler import (
    ActionSpec,
    AgentSpec,
    CheckpointSpec,
    ComputeSpec,
    FailSpec,
    Node,
    NotifySpec,
)
from runner.compiler.templates import (
    TemplateError,
    TemplateStopped,
    TemplateTimedOut,
    render_native,
    render_text,
)
from runner.safety import mask, mask_values, redact, secret_env_values

from . import tracing
from .agent import AgentStep, StepContract, TurnKind, reminder_text
from .hooks import HookError, load_hook, run_bounded
from .livelog import LiveLog
from .procs import run_shell
from .secrets import check_no_nul

if TYPE_CHECKING:
    from .runner import RunDriver

Outcome = Literal["ok", "failed", "timed_out", "cancelled", "parked"]


@dataclass
class NodeResult:
    outcome: Outcome
    output: Any = None
    error: dict[str, Any] | None = None
    extra: dict[str, Any] = field(default_factory=dict)  # goes into $result (e.g. exit_code)


def _fail(code: str, message: str, **extra: Any) -> NodeResult:
    return NodeResult("failed", error={"code": code, "message": message[:2000]}, extra=extra)


def _stopped(driver: RunDriver) -> NodeResult:
    reason = driver.control.stop_reason
    if reason == "park":
        return NodeResult("parked")
    return NodeResult("cancelled", error={"code": "cancelled",
                                          "message": driver.control.reason or "cancelled"})


_PLAIN = frozenset({str, int, bool, type(None)})  # a JSON round trip returns them as is


def _json_value(value: Any, what: str) -> tuple[Any, NodeResult | None]:
    if type(value) in _PLAIN:
        return value, None
    try:
        return json.loads(json.dumps(value, allow_nan=False)), None
    except (TypeError, ValueError):
        return None, _fail("not_json", f"{what} returned a value that is not JSON "
                           f"({type(value).__name__})")


@dataclass
class HookContext:
    """What a Python hook receives: read-only views plus progress publishing."""

    input: Any
    outputs: dict[str, Any]
    results: dict[str, Any]
    run: dict[str, Any]
    project: dict[str, Any]
    publish_update: Callable[[str, str, Any], None]
    secrets: dict[str, str] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)


def pure(node: Node) -> bool:
    """A node with no effect outside its run: a compute expression (a sandboxed
    template). Running it twice is invisible, so its end needs no flush of its own."""
    spec = node.spec
    return isinstance(spec, ComputeSpec) and spec.call is None


def execute(driver: RunDriver, node: Node, attempt: str, deadline: float | None,
            ctx: dict[str, Any]) -> NodeResult:
    spec = node.spec
    try:
        if isinstance(spec, ComputeSpec):
            return _compute(driver, spec, deadline, ctx)
        if isinstance(spec, ActionSpec):
            return _action(driver, node, attempt, spec, deadline, ctx)
        if isinstance(spec, AgentSpec):
            return _agent(driver, node, spec, attempt, deadline, ctx)
        if isinstance(spec, NotifySpec):
            return _notify(driver, node, spec, attempt, ctx)
        if isinstance(spec, CheckpointSpec):
            summary = render_text(spec.summary, ctx) if spec.summary else None
            return NodeResult("ok", {"summary": summary})
        if isinstance(spec, FailSpec):
            # A failure on purpose: the run loop ends the run with this error.
            return _fail(spec.code, render_text(spec.message, ctx))
    except TemplateStopped:
        return _stopped(driver)
    except TemplateTimedOut as exc:
        return NodeResult("timed_out", error={"code": "timed_out", "message": str(exc)})
    except TemplateError as exc:
        return _fail("template_error", f"template failed: {exc}")
    return _fail("unsupported", f"node kind '{node.kind}' cannot run here")


def _hook_context(driver: RunDriver, ctx: dict[str, Any]) -> HookContext:
    # Copies: the context's outputs/results are the driver's live per-scope views
    # (engine/context.py), which user code must not be able to change.
    return HookContext(input=ctx["input"], outputs=dict(ctx["outputs"]),
                       results=dict(ctx["results"]),
                       run=ctx["run"], project=ctx["project"],
                       publish_update=driver.publish_update,
                       secrets=dict(ctx.get("secrets") or {}), env=dict(ctx.get("env") or {}))


def _call(driver: RunDriver, hook: Any, deadline: float | None,
          ctx: dict[str, Any]) -> NodeResult:
    try:
        fn = load_hook(hook)
    except HookError as exc:
        return _fail("hook_error", exc.message)
    hctx = _hook_context(driver, ctx)
    out = run_bounded(lambda: fn(hctx), deadline, driver.control, driver.clock.monotonic)
    if out.ending == "stopped":
        return _stopped(driver)
    if out.ending == "timed_out":
        return NodeResult("timed_out", error={"code": "timed_out",
                                              "message": f"hook {hook.ref} did not return in time"})
    if out.ending == "raised":
        return _fail("hook_raised", f"hook {hook.ref} raised {out.error}")
    value, bad = _json_value(out.value, f"hook {hook.ref}")
    return bad or NodeResult("ok", value)


def _compute(driver: RunDriver, spec: ComputeSpec, deadline: float | None,
             ctx: dict[str, Any]) -> NodeResult:
    if spec.call is not None:
        return _call(driver, spec.call, deadline, ctx)
    assert spec.expr is not None
    value, bad = _json_value(render_native(spec.expr, ctx), "the expression")
    return bad or NodeResult("ok", value)


def _nul_problem(command: list[str] | str, cwd: str | None,
                env: dict[str, str]) -> str | None:
    """Popen refuses a NUL in argv, env or cwd; say which one holds it instead."""
    args = [command] if isinstance(command, str) else command
    for i, arg in enumerate(args):
        problem = check_no_nul("the command" if isinstance(command, str)
                               else f"argument {i} of the command", arg)
        if problem:
            return problem
    for name, value in env.items():
        problem = check_no_nul(f"environment variable {name}", name + value)
        if problem:
            return problem
    return check_no_nul("the working directory", cwd) if cwd is not None else None


def _action(driver: RunDriver, node: Node, attempt: str, spec: ActionSpec,
            deadline: float | None, ctx: dict[str, Any]) -> NodeResult:
    if spec.call is not None:
        return _call(driver, spec.call, deadline, ctx)
    command: list[str] | str
    if isinstance(spec.shell, str):
        command = render_text(spec.shell, ctx)
    else:
        command = [render_text(arg, ctx) for arg in spec.shell or ()]
    cwd = render_text(spec.cwd, ctx) if spec.cwd else None
    base = driver.work_dir
    if cwd is not None and not os.path.isabs(cwd):
        cwd = os.path.join(base, cwd)
    env = {**tracing.environment(driver.run_id),  # TRACEPARENT: this attempt's span
           **{k: render_text(v, ctx) for k, v in spec.env.items()}}
    stdin = render_text(spec.stdin, ctx) if spec.stdin is not None else None
    nul = _nul_problem(command, cwd, env)
    if nul is not None:
        return _fail("nul_byte", nul)
    # Values of secret-named variables this action sets are masked like run secrets.
    own = mask_values(secret_env_values(env))
    live = driver.live_log(node.id, attempt, own, spec.output_cap)
    try:
        res = run_shell(command, use_shell=spec.use_shell, cwd=cwd or base, env=env,
                        stdin=stdin, deadline=deadline, cap=spec.output_cap,
                        control=driver.control, clock=driver.clock,
                        registry=driver.processes, sinks=live.sinks)
    finally:
        live.close()
    # stderr is diagnostics: credential-shaped text in it (`OTHER_API_KEY=...` from a
    # config file) is redacted too. stdout is data, so only known values are masked.
    stdout, stderr = mask(res.stdout, own), redact(mask(res.stderr, own))
    # A parked node runs again on resume; its partial output is not a log of the step.
    parked = res.ending == "stopped" and driver.control.stop_reason == "park"
    if res.ending in ("exited", "timed_out", "stopped") and not parked:
        driver.record_log(node.id, attempt, stdout, stderr, res.stdout_truncated,
                          res.stderr_truncated, res.exit_code)
    live.remove()  # recorded (or re-run on resume): followers read the event now
    if res.ending == "stopped":
        return _stopped(driver)
    shown = first_line(command if isinstance(command, str) else " ".join(command))
    if res.ending in ("not_found", "error"):
        return _fail("command_not_found" if res.ending == "not_found" else "command_error",
                     res.error or "command failed to start")
    output = {
        "command": command,
        "exit_code": res.exit_code,
        "signal": res.signal,
        "stdout": stdout,
        "stderr": stderr,
        "duration_ms": res.duration_ms,
        "truncated": res.stdout_truncated or res.stderr_truncated,
    }
    extra = {"exit_code": res.exit_code}
    if res.ending == "timed_out":
        return NodeResult("timed_out", error={"code": "timed_out",
                                              "message": f"'{shown[:200]}' timed out"},
                          extra=extra)
    if res.exit_code != 0 and not spec.allow_nonzero_exit:
        tail = stderr.strip().splitlines()[-3:] if stderr.strip() else []
        detail = (": " + " | ".join(tail))[:500] if tail else ""
        code = res.exit_code if res.exit_code is not None else f"signal {res.signal}"
        return _fail("nonzero_exit", f"'{shown[:200]}' exited with {code}{detail}", **extra)
    if spec.parse is not None:
        pctx = dict(ctx, stdout=stdout, stderr=stderr, exit_code=res.exit_code)
        try:
            parsed = render_native(spec.parse, pctx)
        except (TemplateStopped, TemplateTimedOut):
            raise  # `execute` turns these into the node's cancelled or timed-out ending
        except TemplateError as exc:
            return _fail("parse_error", f"parse failed: {exc}", **extra)
        value, bad = _json_value(parsed, "parse")
        return bad or NodeResult("ok", value, extra=extra)
    return NodeResult("ok", output, extra=extra)


def _notify(driver: RunDriver, node: Node, spec: NotifySpec, attempt: str,
            ctx: dict[str, Any]) -> NodeResult:
    message = render_text(spec.message, ctx)
    visit = driver.state.visits.get(node.id, 1)
    notification_id = f"{driver.run_id}:{node.id}:{visit}"
    driver.notify(node.id, attempt, notification_id, spec.kind, message)
    return NodeResult("ok", {"notification_id": notification_id, "kind": spec.kind,
                             "message": message})


def first_line(text: str) -> str:
    """A multi-line script as its first non-empty line and an ellipsis (for messages)."""
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    if len(lines) <= 1:
        return text.strip()
    return lines[0].rstrip() + " …"


def new_attempt_id() -> str:
    return secrets.token_hex(8)


def _agent(driver: RunDriver, node: Node, spec: AgentSpec, attempt: str,
           deadline: float | None, ctx: dict[str, Any]) -> NodeResult:
    executor = driver.executor
    if executor is None:
        return _fail("no_agent", "this node needs an agent; run with --agent "
                     "scripted:FILE, command:'CMD' or openai")
    contract = StepContract(driver.run_id, driver.definition.name, node.id, attempt,
                            dict(spec.output) if spec.output is not None else None)
    # A model never sees a secret: the prompt is masked before it leaves the engine.
    prompt = driver.secrets.mask(render_text(spec.prompt, ctx)) + contract.render()

    def log(stdout: str, stderr: str, out_cut: bool, err_cut: bool, code: int | None) -> None:
        driver.record_log(node.id, attempt, stdout, stderr, out_cut, err_cut, code)

    def open_live(cap_chars: int) -> LiveLog:
        return driver.live_log(node.id, attempt, (), cap_chars)

    step = AgentStep(contract=contract, prompt=prompt, control=driver.control,
                     deadline=deadline, monotonic=driver.clock.monotonic,
                     on_update=driver.publish_update, decision_field=spec.decision_field,
                     choices=spec.choices, on_log=log, open_live=open_live,
                     secret_values=driver.secrets.masked)
    kind: TurnKind = "resume" if driver.resuming_node == node.id else "step"
    driver.prompt_sent(node.id, attempt, kind, prompt)
    reminders = 0
    try:
        driver.turn(step, prompt, kind)
        while not step.accepted and not step.should_stop():
            if step.unavailable is not None:
                return _fail("agent_unavailable", f"the agent could not run: {step.unavailable}")
            if reminders >= spec.reminders:
                last = f"; last rejection: {step.rejections[-1]}" if step.rejections else ""
                error = getattr(executor, "last_error", None)
                if not last and error:
                    last = f"; last turn: {error}"
                return _fail("no_submission", f"the agent ended {reminders + 1} turns without an "
                             f"accepted submission{last}")
            reminders += 1
            text = driver.secrets.mask(reminder_text(step, spec.reminders - reminders))
            driver.prompt_sent(node.id, attempt, "reminder", text)
            driver.turn(step, text, "reminder")
    finally:
        step.close()
    if step.accepted:
        return NodeResult("ok", step.output)
    if driver.control.stopping:
        return _stopped(driver)
    return NodeResult("timed_out", error={"code": "timed_out",
                                          "message": "the agent did not submit in time"})
