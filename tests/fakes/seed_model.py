"""The seed's 8-step scenario as a script for the fake OpenAI server (openai_server.py).

It reads the chat-completions conversation the way a model would: the newest
user message is the turn's input, the tool messages after it are this turn's
results (plain text, as `AgentSession.call_tool` returns them).

1. "please ..." → `workflow start review`;
2. the reply names the queued run → `on_queued(run_id)` (the test changes the
   source here, inside the initiating turn) → text;
5. the follow-up "Workflow review failed to start ..." → `status` of the failed
   run and a corrected `start`, as two calls in one message (clients run them in
   parallel);
7. the new run's step contract → `submit`.
Everything it saw is kept in `seen` for the test's assertions.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from fakes.openai_server import Answer, Messages, Reply, last_user_text

from runner.engine._agent import CONTRACT_RE

QUEUED_RE = re.compile(r"Workflow review queued \(run (?P<run>review-[\w]+-[0-9a-f]{8})\)\.")
FAILED_RE = re.compile(
    r"Workflow review failed to start \(run (?P<run>review-[\w]+-[0-9a-f]{8})\): (?P<reason>.+)"
    r"\. Inspect the error and call workflow start again only after you correct the cause\.")
START = {"action": "start", "workflow": "review", "input": {"task": "the change"}}


def turn_results(messages: Messages) -> list[str]:
    """The tool results after the newest user message, as text."""
    out: list[str] = []
    for message in reversed(messages):
        if message.get("role") == "user":
            break
        if message.get("role") == "tool":
            content = message.get("content")
            if isinstance(content, list):  # content parts
                content = "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
            out.insert(0, str(content))
    return out


class SeedModel:
    def __init__(self, on_queued: Callable[[str], None]) -> None:
        self.on_queued = on_queued
        self.seen: dict[str, Any] = {"inputs": []}

    def __call__(self, messages: Messages) -> Reply:
        text = last_user_text(messages)
        results = turn_results(messages)
        if not results:
            self.seen["inputs"].append(text)
        if text.startswith("please"):
            if not results:
                return Answer(calls=[("workflow", START)])
            queued = QUEUED_RE.search(results[-1])
            assert queued, results
            if "first" not in self.seen:
                self.seen["first"] = queued.group("run")
                self.on_queued(queued.group("run"))
            return Answer(text=f"I queued run {queued.group('run')}.")
        failed = FAILED_RE.search(text)
        if failed:
            if not results:
                self.seen.setdefault("followups", []).append(failed.groupdict())
                return Answer(calls=[("workflow", {"action": "status",
                                                   "runId": failed.group("run")}),
                                     ("workflow", START)])
            self.seen["retry_results"] = results
            return Answer(text="Started it again.")
        contract = CONTRACT_RE.search(text)
        if contract:
            if not results:
                self.seen["step_text"] = text
                return Answer(calls=[("workflow", {
                    "action": "submit", "step": contract.group("step"),
                    "attempt": contract.group("attempt"), "output": {"summary": "planned"}})])
            self.seen["submit_results"] = results
            return Answer(text="Submitted.")
        return Answer(text="Nothing to do.")
