"""The scripted executor: canned outputs per node, for demos and tests.

The script is a YAML or JSON mapping from node id (qualified like `fix/plan`,
or local like `plan`) to either a bare value (the output on every visit) or
a mapping with exactly one of:

- `output: X` — submit X on every visit;
- `outputs: [X1, X2, ...]` — submit X1 on the first visit, X2 on the second,
  and the last one from then on;
- `raw: "text"` — reply with this text instead of a tool call (tests tolerant
  parsing and rejections);
- `silent: true` — end the turn without submitting (tests reminders).

It reads the step contract from the prompt exactly as a model would.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from runner.engine._agent import CONTRACT_RE, AgentStep, TurnKind
from runner.errors import InputError

_FORMS = ("output", "outputs", "raw", "silent")


class ScriptedExecutor:
    name = "scripted"

    def __init__(self, script: dict[str, Any]) -> None:
        if not isinstance(script, dict):
            raise InputError("an agent script must be a mapping of node id to output")
        self.script = script
        self._visits: dict[str, list[str]] = {}  # step -> attempts seen, in order
        self.turns: list[tuple[str, str, TurnKind]] = []  # (step, attempt, kind) for tests

    @classmethod
    def from_file(cls, path: Path) -> ScriptedExecutor:
        from runner.compiler._yamlio import YamlProblem, load

        try:
            text = path.read_text()
        except OSError as exc:
            raise InputError(f"cannot read agent script '{path}': {exc.strerror}") from None
        try:
            data = load(text, str(path))
        except YamlProblem as problem:
            d = problem.diagnostic
            raise InputError(f"agent script {path}:{d.line}:{d.column}: {d.message}") from None
        return cls(data or {})

    def _entry(self, step: str) -> Any:
        if step in self.script:
            return self.script[step]
        local = step.rsplit("/", 1)[-1]
        if local in self.script:
            return self.script[local]
        return None

    def run_turn(self, step: AgentStep, message: str, kind: TurnKind) -> None:
        matches = list(CONTRACT_RE.finditer(message))
        if not matches:
            return
        match = matches[-1]  # the last contract in the message is the live one
        step_id, attempt = match.group("step"), match.group("attempt")
        seen = self._visits.setdefault(step_id, [])
        if attempt not in seen:
            seen.append(attempt)
        self.turns.append((step_id, attempt, kind))
        entry = self._entry(step_id)
        if entry is None:
            return  # nothing scripted: the turn ends without a submission
        visit = len(seen)
        if isinstance(entry, dict) and len(entry) == 1 and next(iter(entry)) in _FORMS:
            form, value = next(iter(entry.items()))
            if form == "silent":
                return
            if form == "raw":
                step.accept(str(value))
                return
            if form == "outputs":
                values = value if isinstance(value, list) and value else [None]
                value = values[min(visit, len(values)) - 1]
        else:
            value = entry
        step.handle_tool_call({"action": "submit", "step": step_id, "attempt": attempt,
                               "output": value})
