"""Fixtures for `wfrun bridge` tests: a project, a real bridge subprocess, a client loop.

`Agent` is the client-side agent runtime in miniature: a user prompt or a
triggered follow-up starts a turn (`turn/started`), a scripted model answers
with tool calls (sent as one message's parallel calls) or text, and the turn
ends with `turn/settled`; while the settle says `turnRequested`, the newest
custom messages become the next turn's input, like Pi's follow-up delivery.
"""

from __future__ import annotations

import textwrap
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from fakes.bridge_client import BridgeClient, SessionLog
from fakes.seed_workflow import AGENT_WF

from runner.store import SqliteStore

#: model(input text, tool replies so far this turn) -> tool-call argument objects or text
Model = Callable[[str, list[dict[str, Any]]], "list[dict[str, Any]] | str"]


@dataclass
class Agent:
    client: BridgeClient
    model: Model
    inputs: list[str] = field(default_factory=list)  # every turn's input, in order
    settles: list[dict[str, Any]] = field(default_factory=list)
    _seen: int = 0  # custom messages already consumed as turn input

    def prompt(self, text: str, max_turns: int = 10) -> None:
        self.client.log.append(type="message", role="user", content=text)
        self._seen = len(self.client.log.custom())
        more = self.turn(text)
        for _ in range(max_turns):
            if not more:
                return
            fresh = self.client.log.custom()[self._seen:]
            self._seen += len(fresh)
            more = self.turn("\n\n".join(str(e["content"]) for e in fresh))
        raise AssertionError("the session never settled")

    def turn(self, text: str) -> bool:
        self.inputs.append(text)
        self.client.turn_requested.clear()
        self.client.request("turn/started")
        replies: list[dict[str, Any]] = []
        for _ in range(8):
            answer = self.model(text, replies)
            if isinstance(answer, str):
                self.client.log.append(type="message", role="assistant", content=answer)
                break
            replies.extend(self.client.request_many(
                [("tool/call", {"callId": f"c{i}", "name": "workflow", "arguments": a})
                 for i, a in enumerate(answer)]))
        settled: dict[str, Any] = self.client.request("turn/settled", {"aborted": False})
        self.settles.append(settled)
        return bool(settled["turnRequested"])


@dataclass
class Project:
    root: Path
    clients: list[BridgeClient] = field(default_factory=list)

    @property
    def workflows(self) -> Path:
        return self.root / ".wfrun" / "workflows"

    def write(self, name: str, text: str) -> None:
        (self.workflows / f"{name}.yaml").write_text(textwrap.dedent(text).lstrip("\n"))

    def bridge(self, log: str = "session.jsonl", env: dict[str, str] | None = None,
               session_id: str = "session-1", initialize: bool = True) -> BridgeClient:
        client = BridgeClient(self.root, SessionLog(self.root / log), env=env).start()
        self.clients.append(client)
        if initialize:
            client.initialize(session_id)
        return client

    def store(self) -> SqliteStore:
        return SqliteStore(self.root / ".wfrun" / "state" / "store.sqlite3")


@pytest.fixture
def project(tmp_path: Path) -> Iterator[Project]:
    root = tmp_path / "proj"
    (root / ".wfrun" / "workflows").mkdir(parents=True)
    proj = Project(root)
    proj.write("review", AGENT_WF)
    yield proj
    for client in proj.clients:
        client.kill()
