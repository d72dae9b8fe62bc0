"""The `command` executor: an external agent CLI, one process per turn (DESIGN §4).

Each turn runs the CLI with the turn's message on stdin, in its own process
group, and reads what it prints. The CLI can answer in three ways, tried in
this order:

1. lines starting with `WFRUN_STEP_SUBMISSION ` followed by a `workflow` tool
   call as JSON (`{"action": "submit"|"update", "step", "attempt", ...}`);
   several lines are several calls, in order (an update, then a submit);
2. stdout that parses (tolerantly) to one such tool call object;
3. anything else: the whole stdout is the step's output, as if submitted.

Everything reaches the step through `handle_tool_call` or `accept`, so schema
checks and stale-attempt refusals are the engine's, not ours. A CLI that
exits non-zero, prints nothing, cannot be started or is stopped (cancel, park,
deadline) ends the turn without a submission; the reason, redacted and
bounded, is kept in `last_error` for whoever reports the failure.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from runner import _jsonin as jsonin
from runner._safety import safe_message, secret_env_values, without_secrets
from runner.clock import Clock, SystemClock
from runner.engine._agent import AgentStep, ToolResult, TurnKind, parse_tolerant
from runner.engine._procs import KILL_GRACE, GroupResult, run_group

SUBMISSION_PREFIX = "WFRUN_STEP_SUBMISSION "
STDOUT_CAP = 1_000_000
STDERR_CAP = 16_384
ERROR_CAP = 2_000
TOOL_ACTIONS = ("submit", "update")


class CommandExecutor:
    """Runs `argv` once per turn; the CLI reads the message on stdin and prints its answer."""

    name = "command"

    def __init__(
        self,
        argv: Sequence[str],
        cwd: str | Path | None = None,
        env: Mapping[str, str] | None = None,
        clock: Clock | None = None,
        *,
        kill_grace: float = KILL_GRACE,
        pass_env: Sequence[str] = (),
    ) -> None:
        if not argv or not all(isinstance(a, str) for a in argv):
            raise ValueError("CommandExecutor needs a non-empty argv list of strings")
        self.argv = list(argv)
        self.cwd = str(cwd) if cwd is not None else None
        # None inherits our environment; a mapping replaces it (the caller decides).
        self.env = dict(env) if env is not None else None
        # Secret variables the user lets through (`WFRUN_AGENT_ENV`): the CLI's own key.
        self.pass_env = tuple(pass_env)
        self.clock: Clock = clock or SystemClock()
        self.kill_grace = kill_grace
        self.last_error: str | None = None
        self.last_results: list[ToolResult] = []
        self.last_seconds: float | None = None

    # -- the AgentStepExecutor protocol ------------------------------------------
    def run_turn(self, step: AgentStep, message: str, kind: TurnKind) -> None:
        self.last_error = None
        self.last_results = []
        started = self.clock.monotonic()
        try:
            self._turn(step, message, kind)
        finally:
            self.last_seconds = self.clock.monotonic() - started

    def _turn(self, step: AgentStep, message: str, kind: TurnKind) -> None:
        if step.should_stop():
            self._fail("the step was stopped before the command started")
            return
        env = self._child_env(step, kind)
        live = step.open_live(STDOUT_CAP) if step.open_live is not None else None
        try:
            result = run_group(self.argv, stdin=self._stdin(step, message, kind),
                               cwd=self.cwd, env=env, should_stop=step.should_stop,
                               stdout_cap=STDOUT_CAP, stderr_cap=STDERR_CAP,
                               grace=self.kill_grace, clock=self.clock,
                               sinks=live.sinks if live is not None else None)
        except (OSError, ValueError) as exc:
            if live is not None:
                live.remove()
            if isinstance(exc, OSError):
                self._give_up(step, self._start_error(exc))
            else:  # Popen refuses a NUL byte in argv, env or cwd
                self._give_up(step, "the agent command, its environment or working "
                              "directory contains a NUL byte")
            return
        if live is not None:
            live.close()
        step.log(result.stdout, result.stderr, result.stdout_truncated, False,
                 result.returncode)
        if live is not None:
            live.remove()  # the turn is recorded: followers read its event now
        self._settle(step, result)

    # -- helpers ---------------------------------------------------------------
    @staticmethod
    def _stdin(step: AgentStep, message: str, kind: TurnKind) -> str:
        # The CLI remembers nothing between processes, so a reminder alone would
        # lose the task; send the step prompt with the reminder after it.
        if kind == "reminder" and message != step.prompt:
            return step.prompt + "\n\n" + message
        return message

    def _child_env(self, step: AgentStep, kind: TurnKind) -> dict[str, str]:
        # A model drives this process (and any shell it opens): it inherits no secret,
        # by the one policy, unless the user named the variable in `pass_env`.
        env = without_secrets(os.environ if self.env is None else self.env,
                              step.secret_values, keep=self.pass_env)
        # Lets a wrapper script find the contract without parsing the prompt.
        env.update({
            "WFRUN_RUN_ID": step.contract.run_id,
            "WFRUN_WORKFLOW": step.contract.workflow,
            "WFRUN_STEP": step.contract.step,
            "WFRUN_ATTEMPT": step.contract.attempt,
            "WFRUN_TURN_KIND": kind,
        })
        if step.traceparent:  # when traced
            env["TRACEPARENT"] = step.traceparent
        return env

    def _secrets(self) -> list[str]:
        return secret_env_values(dict(os.environ) if self.env is None else self.env)

    def _fail(self, reason: str) -> None:
        self.last_error = safe_message(reason, self._secrets(), ERROR_CAP)

    def _give_up(self, step: AgentStep, reason: str) -> None:
        """A failure no reminder can fix (cannot start, non-zero exit): the step fails."""
        self._fail(reason)
        assert self.last_error is not None
        step.give_up(self.last_error)

    def _start_error(self, exc: OSError) -> str:
        program = self.argv[0]
        if isinstance(exc, FileNotFoundError):
            if self.cwd is not None and exc.filename == self.cwd:
                return f"working directory not found: {self.cwd}"
            return f"agent command not found: {program}"
        if isinstance(exc, PermissionError):
            return f"agent command is not executable: {program}"
        return f"cannot start agent command {program}: {exc.strerror or type(exc).__name__}"

    def _settle(self, step: AgentStep, result: GroupResult) -> None:
        if result.stopped:
            self._fail(f"stopped after {result.seconds:.1f}s ({self._stop_cause(step)}); "
                       "the command's process group was killed")
            return
        if result.returncode != 0:
            code = result.returncode
            how = f"was killed by signal {-code}" if code is not None and code < 0 \
                else f"exited with status {code}"
            # The end of stderr says why; the whole of it is in `wfrun logs`.
            tail = " | ".join(result.stderr.strip().splitlines()[-5:])
            self._give_up(step, f"agent command {self.argv[0]} {how}"
                          + (f"; stderr: {tail}" if tail else ""))
            return
        if not result.stdout.strip():
            self._fail("agent command printed nothing on stdout")
            return
        self._interpret(step, result.stdout, result.stdout_truncated)

    @staticmethod
    def _stop_cause(step: AgentStep) -> str:
        reason = step.control.stop_reason
        return reason if reason is not None else "deadline"

    def _interpret(self, step: AgentStep, stdout: str, truncated: bool) -> None:
        calls = submission_lines(stdout)
        if calls is None:
            parsed = parse_tolerant(stdout)
            calls = [parsed] if is_tool_call(parsed) else None
        if calls is not None:
            for call in calls:
                if not isinstance(call, dict):
                    self.last_results.append(ToolResult(
                        False, "a WFRUN_STEP_SUBMISSION line must hold a JSON object"))
                    continue
                self.last_results.append(step.handle_tool_call(call))
        else:
            self.last_results.append(step.accept(stdout))
        if not step.accepted:
            refusals = [r.message for r in self.last_results if not r.ok]
            note = " (stdout was cut at 1,000,000 characters)" if truncated else ""
            if refusals:
                self._fail("no accepted submission: " + refusals[-1] + note)
            else:
                self._fail("the command made no submit call" + note)


def is_tool_call(value: Any) -> bool:
    return isinstance(value, dict) and value.get("action") in TOOL_ACTIONS


def submission_lines(stdout: str) -> list[Any] | None:
    """The calls on `WFRUN_STEP_SUBMISSION ` lines, or None when there are none.

    A line whose JSON does not parse becomes its raw text, which the caller
    reports as a refused call instead of silently skipping it.
    """
    calls: list[Any] = []
    for line in stdout.splitlines():
        if not line.startswith(SUBMISSION_PREFIX):
            continue
        payload = line[len(SUBMISSION_PREFIX):].strip()
        try:
            calls.append(jsonin.loads(payload))
        except ValueError:
            calls.append(payload)
    return calls or None
