"""Executing one attempt of one node, per kind; the run loop lives in `runner.py`.

`EXECUTORS` is the run half of the node-kind table (runner/compiler/_kinds.py):
one function per kind, registered with `@executes(kind)`, given a narrow
`NodeContext` (nodecontext.py) and returning a `NodeResult`. None raises for a
workflow author's or an agent's mistake: those become `failed` results with a
stable code.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, cast

from runner._safety import mask, mask_values, redact, secret_env_values
from runner.compiler import (
    ActionSpec,
    AgentSpec,
    CheckpointSpec,
    ComputeSpec,
    FailSpec,
    NotifySpec,
)
from runner.compiler._templates import (
    TemplateError,
    TemplateStopped,
    TemplateTimedOut,
    render_native,
    render_text,
)

from . import _tracing as tracing
from ._nodecontext import (
    PLAIN_JSON,
    Executor,
    NodeContext,
    NodeResult,
    fail,
    json_value,
    stopped,
)
from ._secrets import check_no_nul

if TYPE_CHECKING:
    from ._agent import AgentStep, TurnKind

#: kind name -> what runs one attempt of it (the node-kind table's run half:
#: runner/compiler/_kinds.py; include entries and exits are the run loop's own).
EXECUTORS: dict[str, Executor] = {}


def executes(kind: str) -> Callable[[Executor], Executor]:
    """Register the executor of a node kind."""
    def register(fn: Executor) -> Executor:
        if kind in EXECUTORS:
            raise ValueError(f"node kind '{kind}' already has an executor")
        EXECUTORS[kind] = fn
        return fn
    return register


def execute(ctx: NodeContext) -> NodeResult:
    run = EXECUTORS.get(ctx.node.kind)
    if run is None:
        return fail("unsupported", f"node kind '{ctx.node.kind}' cannot run here")
    try:
        return run(ctx)
    except TemplateStopped:
        return stopped(ctx.control)
    except TemplateTimedOut as exc:
        return NodeResult("timed_out", error={"code": "timed_out", "message": str(exc)})
    except TemplateError as exc:
        return fail("template_error", f"template failed: {exc}")


@executes("checkpoint")
def _checkpoint(ctx: NodeContext) -> NodeResult:
    spec = cast(CheckpointSpec, ctx.node.spec)
    summary = render_text(spec.summary, ctx.values) if spec.summary else None
    return NodeResult("ok", {"summary": summary})


@executes("fail")
def _fail_node(ctx: NodeContext) -> NodeResult:
    # A failure on purpose: the run loop ends the run with this error (KindDef.ends).
    spec = cast(FailSpec, ctx.node.spec)
    return fail(spec.code, render_text(spec.message, ctx.values))


@executes("compute")
def _compute(ctx: NodeContext) -> NodeResult:
    spec = cast(ComputeSpec, ctx.node.spec)
    if spec.call is not None:
        from ._hooks import call_hook  # a hook's machinery: not for an expression

        return call_hook(ctx, spec.call, None)
    assert spec.expr is not None
    value = render_native(spec.expr, ctx.values)
    if type(value) in PLAIN_JSON:  # most expressions: a scalar, JSON as it is
        return NodeResult("ok", value)
    value, bad = json_value(value, "the expression")
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


@executes("action")
def _action(ctx: NodeContext) -> NodeResult:
    spec = cast(ActionSpec, ctx.node.spec)
    if spec.call is not None:
        from ._hooks import call_hook

        return call_hook(ctx, spec.call, spec.params)
    # Here: a run without a shell action never loads the process supervisor (cold start).
    from ._procs import run_shell

    values = ctx.values
    command: list[str] | str
    if isinstance(spec.shell, str):
        command = render_text(spec.shell, values)
    else:
        command = [render_text(arg, values) for arg in spec.shell or ()]
    cwd = render_text(spec.cwd, values) if spec.cwd else None
    base = ctx.work_dir
    if cwd is not None and not os.path.isabs(cwd):
        cwd = os.path.join(base, cwd)
    env = {**tracing.step_environment(ctx),  # TRACEPARENT: the attempt's span
           **{k: render_text(v, values) for k, v in spec.env.items()}}
    stdin = render_text(spec.stdin, values) if spec.stdin is not None else None
    nul = _nul_problem(command, cwd, env)
    if nul is not None:
        return fail("nul_byte", nul)
    # Values of secret-named variables this action sets are masked like run secrets.
    own = mask_values(secret_env_values(env))
    live = ctx.logs.live(own, spec.output_cap)
    try:
        res = run_shell(command, use_shell=spec.use_shell, cwd=cwd or base, env=env,
                        stdin=stdin, deadline=ctx.deadline, cap=spec.output_cap,
                        control=ctx.control, clock=ctx.clock,
                        registry=ctx.processes, sinks=live.sinks)
    finally:
        live.close()
    # stderr is diagnostics: credential-shaped text in it (`OTHER_API_KEY=...` from a
    # config file) is redacted too. stdout is data, so only known values are masked.
    stdout, stderr = mask(res.stdout, own), redact(mask(res.stderr, own))
    # A parked node runs again on resume; its partial output is not a log of the step.
    parked = res.ending == "stopped" and ctx.control.stop_reason == "park"
    if res.ending in ("exited", "timed_out", "stopped") and not parked:
        ctx.logs.record(stdout, stderr, res.stdout_truncated, res.stderr_truncated,
                        res.exit_code)
    live.remove()  # recorded (or re-run on resume): followers read the event now
    if res.ending == "stopped":
        return stopped(ctx.control)
    shown = first_line(command if isinstance(command, str) else " ".join(command))
    if res.ending in ("not_found", "error"):
        return fail("command_not_found" if res.ending == "not_found" else "command_error",
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
        return fail("nonzero_exit", f"'{shown[:200]}' exited with {code}{detail}", **extra)
    if spec.parse is not None:
        pctx = dict(values, stdout=stdout, stderr=stderr, exit_code=res.exit_code)
        try:
            parsed = render_native(spec.parse, pctx)
        except (TemplateStopped, TemplateTimedOut):
            raise  # `execute` turns these into the node's cancelled or timed-out ending
        except TemplateError as exc:
            return fail("parse_error", f"parse failed: {exc}", **extra)
        value, bad = json_value(parsed, "parse")
        return bad or NodeResult("ok", value, extra=extra)
    return NodeResult("ok", output, extra=extra)


@executes("notify")
def _notify(ctx: NodeContext) -> NodeResult:
    spec = cast(NotifySpec, ctx.node.spec)
    message = render_text(spec.message, ctx.values)
    notification_id = f"{ctx.run_id}:{ctx.node.id}:{ctx.visit}"
    ctx.updates.notify(notification_id, spec.kind, message, spec.channels)
    return NodeResult("ok", {"notification_id": notification_id, "kind": spec.kind,
                             "message": message})


def first_line(text: str) -> str:
    """A multi-line script as its first non-empty line and an ellipsis (for messages)."""
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    if len(lines) <= 1:
        return text.strip()
    return lines[0].rstrip() + " …"


#: A new attempt's id: 16 hex digits (tracing reads one as a span id). The C function
#: with its argument bound: a call per attempt enters no Python frame.
new_attempt_id: Callable[[], str] = partial(secrets.token_hex, 8)


def _turn(ctx: NodeContext, step: AgentStep, message: str, kind: TurnKind) -> None:
    assert ctx.executor is not None
    try:
        ctx.executor.run_turn(step, message, kind)
    except Exception as exc:  # an executor bug ends the turn, never the run loop
        step.rejections.append(f"executor error: {type(exc).__name__}")


@executes("agent")
def _agent(ctx: NodeContext) -> NodeResult:
    spec = cast(AgentSpec, ctx.node.spec)
    executor = ctx.executor
    if executor is None:
        return fail("no_agent", "this node needs an agent; run with --agent "
                    "scripted:FILE, command:'CMD' or openai")
    # Loaded by the first agent node: a host that runs only shell items never pays for it.
    from ._agent import AgentStep, StepContract, reminder_text

    contract = StepContract(ctx.run_id, ctx.workflow, ctx.node.id, ctx.attempt,
                            dict(spec.output) if spec.output is not None else None)
    # A model never sees a secret: the prompt is masked before it leaves the engine.
    prompt = ctx.secrets.mask(render_text(spec.prompt, ctx.values)) + contract.render()
    step = AgentStep(contract=contract, prompt=prompt, control=ctx.control,
                     deadline=ctx.deadline, monotonic=ctx.clock.monotonic,
                     on_update=ctx.updates.publish, decision_field=spec.decision_field,
                     choices=spec.choices, on_log=ctx.logs.record,
                     open_live=lambda cap_chars: ctx.logs.live((), cap_chars),
                     secret_values=ctx.secrets.masked,
                     traceparent=tracing.step_environment(ctx).get("TRACEPARENT"))
    kind: TurnKind = "resume" if ctx.resuming else "step"
    ctx.updates.prompt_sent(kind, prompt)
    reminders = 0
    try:
        _turn(ctx, step, prompt, kind)
        while not step.accepted and not step.should_stop():
            if step.unavailable is not None:
                return fail("agent_unavailable", f"the agent could not run: {step.unavailable}")
            if reminders >= spec.reminders:
                last = f"; last rejection: {step.rejections[-1]}" if step.rejections else ""
                error = getattr(executor, "last_error", None)
                if not last and error:
                    last = f"; last turn: {error}"
                return fail("no_submission", f"the agent ended {reminders + 1} turns without "
                            f"an accepted submission{last}")
            reminders += 1
            text = ctx.secrets.mask(reminder_text(step, spec.reminders - reminders))
            ctx.updates.prompt_sent("reminder", text)
            _turn(ctx, step, text, "reminder")
    finally:
        step.close()
    if step.accepted:
        return NodeResult("ok", step.output)
    if ctx.control.stopping:
        return stopped(ctx.control)
    return NodeResult("timed_out", error={"code": "timed_out",
                                          "message": "the agent did not submit in time"})



@executes("map")
@executes("parallel")
def _fanout(ctx: NodeContext) -> NodeResult:
    # Items run through the run loop (engine/_fanout.py, through the port it hands in).
    if ctx.fanout is None:
        return fail("unsupported", f"node '{ctx.node.id}' fans out, which needs a run loop")
    return ctx.fanout.run(ctx)
