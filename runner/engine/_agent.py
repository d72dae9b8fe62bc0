"""The agent-step contract (DESIGN §4).

The engine renders a node's prompt, appends a step contract naming the exact
call to make, and hands an `AgentStep` to an `AgentStepExecutor` for one turn
at a time. Output enters only through `AgentStep.submit`/`accept`, which parse
JSON tolerantly, validate it against the node's output schema and refuse stale
or closed attempts. A turn that ends without an accepted submission gets a
reminder (2 by default), then the step fails.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from runner import _jsonin as jsonin
from runner.compiler._jsonschemas import validation_errors

from ._control import RunControl
from ._livelog import LiveLog

TurnKind = Literal["step", "reminder", "resume"]
CONTRACT_RE = re.compile(
    r"Workflow step contract \(workflow: (?P<workflow>[^,]+), step: (?P<step>[^,]+), "
    r"attempt: (?P<attempt>[^)]+)\)")
DEFAULT_EXPECTED = "a JSON object with your result"
UPDATE_TYPE_RE = re.compile(r"^[a-z][a-z0-9.-]{0,63}$")
UPDATE_KEY_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:/-]{0,127}$")
MAX_UPDATE_BYTES = 64 * 1024

# The tool a headless agent sees: the `workflow` tool restricted to update/submit.
STEP_TOOL_SCHEMA: dict[str, Any] = {
    "name": "workflow",
    "description": "Submit the result of the current workflow step, or publish progress.",
    "parameters": {
        "type": "object",
        "additionalProperties": False,
        "properties": {
            "action": {"type": "string", "enum": ["submit", "update"]},
            "step": {"type": "string", "description": "The step id from the step contract."},
            "attempt": {"type": "string", "description": "The attempt id from the contract."},
            "output": {"description": "The step's result (submit)."},
            "update": {"type": "object", "description": "{type, key, data} (update)."},
        },
        "required": ["action", "step", "attempt"],
    },
}


@dataclass(frozen=True)
class ToolResult:
    ok: bool
    message: str

    def to_json(self) -> dict[str, Any]:
        return {"ok": self.ok, "message": self.message}


@dataclass(frozen=True)
class StepContract:
    run_id: str
    workflow: str
    step: str  # the qualified node id
    attempt: str
    output_schema: dict[str, Any] | None

    @property
    def expected(self) -> str:
        if self.output_schema is None:
            return DEFAULT_EXPECTED
        return "JSON matching this JSON Schema: " + json.dumps(self.output_schema,
                                                               sort_keys=True)

    def render(self) -> str:
        call = json.dumps({"action": "submit", "step": self.step, "attempt": self.attempt})
        call = call[:-1] + ', "output": <your result>}'
        update = json.dumps({"action": "update", "step": self.step, "attempt": self.attempt,
                             "update": {"type": "progress", "key": "main",
                                        "data": {"completed": 1, "total": 3}}})
        return (
            "\n\n---\n"
            f"Workflow step contract (workflow: {self.workflow}, step: {self.step}, "
            f"attempt: {self.attempt})\n"
            "When you have the result, call the `workflow` tool once with:\n"
            f"{call}\n"
            f"Expected output: {self.expected}\n"
            f"To report progress without finishing, you may call: {update}\n"
            "If you cannot call tools, reply with only the JSON output."
        )


def parse_tolerant(value: Any) -> Any:
    """Parse agent output: direct JSON, a fenced block, or the first balanced value."""
    if not isinstance(value, str):
        return value
    text = value.strip()
    try:
        return jsonin.loads(text)
    except ValueError:
        pass
    fence = re.search(r"```(?:json|JSON)?\s*\n(.*?)```", text, re.S)
    if fence:
        try:
            return jsonin.loads(fence.group(1).strip())
        except ValueError:
            pass
    embedded = _first_balanced(text)
    if embedded is not None:
        return embedded
    return value


def _first_balanced(text: str) -> Any:
    decoder = json.JSONDecoder()
    for i, ch in enumerate(text):
        if ch in "{[":
            try:
                value, _ = decoder.raw_decode(text, i)
            except ValueError:
                continue
            return value
    return None


def _json_round_trip(value: Any) -> Any:
    return json.loads(json.dumps(value, allow_nan=False))


UpdateSink = Callable[[str, str, Any], None]
# What a process-running executor saw: stdout, stderr, whether each was cut, exit code.
LogSink = Callable[[str, str, bool, bool, "int | None"], None]


@dataclass
class AgentStep:
    """One open attempt of an agent node; executors talk to it, never to the engine."""

    contract: StepContract
    prompt: str  # the rendered prompt with the contract appended
    control: RunControl
    deadline: float | None  # on the engine clock's monotonic scale
    monotonic: Callable[[], float]
    on_update: UpdateSink | None = None
    on_log: LogSink | None = None  # the step's logs (`wfrun logs`), when an executor has some
    # A process-running executor's live log for one turn (`logs --follow`): open it
    # before the process starts, `remove` it once `log` has recorded the turn.
    open_live: Callable[[int], LiveLog] | None = None
    decision_field: str | None = None
    choices: tuple[str, ...] = ()
    # The run's known secret values: a process-running executor keeps every variable
    # holding one out of the agent's environment (no model ever sees a secret).
    secret_values: tuple[str, ...] = ()
    traceparent: str | None = None  # the attempt's span, for a process's TRACEPARENT
    _output: Any = None
    _accepted: bool = False
    _closed: bool = False
    _lock: threading.Lock = field(default_factory=threading.Lock)
    rejections: list[str] = field(default_factory=list)
    # Set by an executor that cannot reach its agent at all (program not found, exit
    # status, connection refused): a reminder cannot help, so the step fails at once.
    unavailable: str | None = None

    # -- for executors ----------------------------------------------------------
    @property
    def accepted(self) -> bool:
        return self._accepted

    @property
    def output(self) -> Any:
        return self._output

    def log(self, stdout: str, stderr: str, stdout_cut: bool = False, stderr_cut: bool = False,
            exit_code: int | None = None) -> None:
        """Record what the executor's process printed (masked and kept by the engine)."""
        if self.on_log is not None:
            self.on_log(stdout, stderr, stdout_cut, stderr_cut, exit_code)

    def should_stop(self) -> bool:
        """True when the executor must end the turn now (cancel, park, timeout)."""
        if self.control.stopping:
            return True
        return self.deadline is not None and self.monotonic() >= self.deadline

    def remaining(self) -> float | None:
        if self.deadline is None:
            return None
        return max(self.deadline - self.monotonic(), 0.0)

    def give_up(self, reason: str) -> None:
        """The agent cannot be reached (a setup problem): fail the step now, with `reason`
        (already redacted and bounded by the executor)."""
        self.unavailable = reason

    def handle_tool_call(self, args: dict[str, Any]) -> ToolResult:
        """Dispatch a `workflow` tool call made during this step."""
        action = args.get("action")
        if action == "submit":
            return self.submit(args)
        if action == "update":
            return self.update(args)
        return ToolResult(False, f"action '{action}' is not available during a workflow step; "
                          "use submit or update")

    def submit(self, call: dict[str, Any]) -> ToolResult:
        refusal = self._check_identity(call)
        if refusal:
            return refusal
        if "output" not in call:
            return ToolResult(False, "submit needs 'output'")
        return self.accept(call["output"])

    def update(self, call: dict[str, Any]) -> ToolResult:
        refusal = self._check_identity(call)
        if refusal:
            return refusal
        upd = call.get("update")
        if not isinstance(upd, dict):
            return ToolResult(False, "update needs an 'update' object {type, key, data}")
        kind, key, data = upd.get("type"), upd.get("key", "main"), upd.get("data")
        if not isinstance(kind, str) or not UPDATE_TYPE_RE.match(kind):
            return ToolResult(False, "update type must match [a-z][a-z0-9.-]{0,63}")
        if not isinstance(key, str) or not UPDATE_KEY_RE.match(key):
            return ToolResult(False, "update key must match [A-Za-z0-9][A-Za-z0-9._:/-]{0,127}")
        try:
            size = len(json.dumps(data, allow_nan=False).encode())
        except (TypeError, ValueError):
            return ToolResult(False, "update data must be JSON")
        if size > MAX_UPDATE_BYTES:
            return ToolResult(False, f"update data is {size} bytes; the limit is 64 KiB")
        if self.on_update is not None:
            self.on_update(kind, key, data)
        return ToolResult(True, "update recorded; continue the step")

    def accept(self, output: Any) -> ToolResult:
        """Parse, validate and accept `output`; the step stays open on rejection."""
        with self._lock:
            if self._closed:
                return ToolResult(False, f"attempt {self.contract.attempt} is closed; nothing is "
                                  "pending for it")
            if self._accepted:
                return ToolResult(False, "this step already has an accepted output")
            value = parse_tolerant(output)
            try:
                value = _json_round_trip(value)
            except (TypeError, ValueError):
                return self._reject("output must be JSON (no NaN or Infinity)")
            schema = self.contract.output_schema
            if schema is not None:
                errors = validation_errors(schema, value)
                if errors:
                    return self._reject("output does not match the expected schema: "
                                        + "; ".join(errors))
            self._output = value
            self._accepted = True
        return ToolResult(True, "Output accepted. End your turn now; do not call more tools.")

    def _reject(self, message: str) -> ToolResult:
        self.rejections.append(message)
        return ToolResult(False, message + ". Fix the output and call submit again.")

    def _check_identity(self, call: dict[str, Any]) -> ToolResult | None:
        step, attempt = call.get("step"), call.get("attempt")
        if step != self.contract.step:
            return ToolResult(False, f"step '{step}' is not the current step "
                              f"('{self.contract.step}')")
        if attempt != self.contract.attempt:
            return ToolResult(False, f"attempt '{attempt}' is stale; the current attempt is "
                              f"'{self.contract.attempt}'")
        if self._closed:
            return ToolResult(False, f"attempt {attempt} is closed")
        return None

    # -- for the engine -----------------------------------------------------------
    def close(self) -> None:
        with self._lock:
            self._closed = True


class AgentStepExecutor(Protocol):
    """Drives one agent turn for a step; returns when the turn has settled."""

    name: str

    def run_turn(self, step: AgentStep, message: str, kind: TurnKind) -> None: ...


def reminder_text(step: AgentStep, remaining: int) -> str:
    last = f" The last submission was rejected: {step.rejections[-1]}" if step.rejections else ""
    return (f"Reminder: workflow step '{step.contract.step}' (attempt {step.contract.attempt}) "
            f"is still open and your turn ended without an accepted submit.{last} Call the "
            f"`workflow` tool with action 'submit' as the contract shows. "
            f"{remaining} reminder{'s' if remaining != 1 else ''} left before the step fails."
            + step.contract.render())
