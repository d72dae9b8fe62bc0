"""Fixtures for the real-Pi tests: a project, a fake OpenAI server, Pi in RPC mode.

`world.pi()` starts Pi with the wfrun extension (the file shipped in the wheel) in
the project; every Pi started is SIGKILLed with its process group at teardown.
"""

from __future__ import annotations

import re
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from fakes.openai_server import FakeOpenAI
from fakes.pi_model import RuleModel
from fakes.seed_workflow import AGENT_WF
from pi_rpc import EXTENSION, PiRpc, write_agent_dir

from runner.store import LaunchRecord, SqliteStore

FAILED_RE = re.compile(
    r"^Workflow (?P<wf>\w+) failed to start \(run (?P<run>[\w-]+)\): (?P<reason>.+)\. "
    r"Inspect the error and call workflow start again only after you correct the cause\.$",
    re.S)


@dataclass
class World:
    root: Path
    server: FakeOpenAI
    model: RuleModel = field(default_factory=RuleModel)
    pis: list[PiRpc] = field(default_factory=list)

    @property
    def project(self) -> Path:
        return self.root / "proj"

    @property
    def sessions(self) -> Path:
        return self.root / "sessions"

    def write(self, name: str, text: str) -> Path:
        path = self.project / ".wfrun" / "workflows" / f"{name}.yaml"
        path.write_text(textwrap.dedent(text).lstrip("\n"))
        return path

    def pi(self, *, retry: bool = False, session_file: Path | None = None,
           env: dict[str, str] | None = None, legacy: bool = False,
           installed: bool = False) -> PiRpc:
        """`installed`: no `-e`; Pi loads what `wfrun integrate pi` put in the
        (trusted) project."""
        agent = write_agent_dir(self.root / "agent", self.server.base_url, retry=retry,
                                trust=installed)
        pi = PiRpc.start(self.project, agent, self.sessions, session_file=session_file,
                         env=env, legacy=legacy, extension=None if installed else EXTENSION)
        self.pis.append(pi)
        return pi

    def store(self) -> SqliteStore:
        return SqliteStore(self.project / ".wfrun" / "state" / "store.sqlite3")

    def launch(self, run_id: str) -> LaunchRecord:
        store = self.store()
        try:
            record = store.launches.get(run_id)
        finally:
            store.close()
        assert record is not None, run_id
        return record

    def intent(self, intent_id: str) -> Any:
        store = self.store()
        try:
            return store.turn_intents.get(intent_id)
        finally:
            store.close()


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    model = RuleModel()
    server = FakeOpenAI(model).start()
    w = World(tmp_path, server, model)
    (w.project / ".wfrun" / "workflows").mkdir(parents=True)
    w.write("review", AGENT_WF)
    try:
        yield w
    finally:
        for pi in w.pis:
            pi.kill()
        server.stop()
    assert not server.script_errors, server.script_errors
