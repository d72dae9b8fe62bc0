"""Reading the conversation Pi sends to the fake OpenAI server, and rule-based scripts.

Pi (openai-completions dialect) sends the whole conversation on every request:
user prompts and wfrun's custom messages arrive as `user` messages (text or a
list of text parts), tool results as `tool` messages. A script here is a list of
rules, each a function of the request's messages returning a reply or None; the
first rule that answers wins (see `tests/fakes/openai_server.py` for replies).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from fakes.openai_server import Answer, Messages, Reply

Rule = Callable[[Messages], Reply | None]


def text_of(message: dict[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return ""


def last(messages: Messages) -> dict[str, Any]:
    return messages[-1] if messages else {}


def last_user(messages: Messages) -> str:
    for message in reversed(messages):
        if message.get("role") == "user":
            return text_of(message)
    return ""


def tool_texts_since_user(messages: Messages) -> list[str]:
    """The tool results answered since the last user message, oldest first."""
    out: list[str] = []
    for message in reversed(messages):
        if message.get("role") == "user":
            break
        if message.get("role") == "tool":
            out.insert(0, text_of(message))
    return out


def user_texts(messages: Messages) -> list[str]:
    return [text_of(m) for m in messages if m.get("role") == "user"]


class RuleModel:
    """The fake model: rules tried in order; every request's messages are kept."""

    def __init__(self, *rules: Rule, default: str = "Nothing more to do.") -> None:
        self.rules = list(rules)
        self.default = default
        self.seen: list[Messages] = []
        self._lock = threading.Lock()

    def __call__(self, messages: Messages) -> Reply:
        with self._lock:
            self.seen.append(messages)
            for rule in self.rules:
                reply = rule(messages)
                if reply is not None:
                    return reply
        return Answer(text=self.default)
