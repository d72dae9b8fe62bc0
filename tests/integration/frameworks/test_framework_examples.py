"""docs/examples/*.py, executed: openai-agents and pydantic-ai pass the seed's scenario.

Each example drives `runner.AgentSession` with the real framework against the
fake OpenAI-dialect server on 127.0.0.1 (tests/fakes/openai_server.py: SSE
streaming, chunked tool-call arguments) scripted with the seed's 8 steps
(tests/fakes/seed_model.py). The test changes the workflow source from inside
the model's reply to the queued run, i.e. before the initiating turn settles.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from fakes.openai_server import FakeOpenAI
from fakes.seed_model import FAILED_RE, SeedModel
from fakes.seed_workflow import AGENT_WF

from runner import AgentSession
from runner.launch._intents import AGENT_STEP_TYPE, DEFERRED_TURN_TYPE
from runner.store import SqliteStore

pytestmark = pytest.mark.timeout(60)
EXAMPLES = Path(__file__).resolve().parents[3] / "docs" / "examples"


def load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"example_{name}", EXAMPLES / f"{name}.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def server() -> Iterator[FakeOpenAI]:
    fake = FakeOpenAI().start()
    try:
        yield fake
    finally:
        fake.stop()
    assert not fake.script_errors, fake.script_errors


@pytest.mark.parametrize(("example", "session_id", "streams"), [
    ("openai_agents_session", "openai-agents", True),
    ("pydantic_ai_session", "pydantic-ai", False),
])
def test_framework_example_passes_the_seed_scenario(
        example: str, session_id: str, streams: bool, server: FakeOpenAI,
        tmp_path: Path) -> None:
    root = tmp_path / "proj"
    workflow = root / ".wfrun" / "workflows" / "review.yaml"
    workflow.parent.mkdir(parents=True)
    workflow.write_text(textwrap.dedent(AGENT_WF).lstrip())
    store_file = root / ".wfrun" / "state" / "store.sqlite3"
    at_reply: dict[str, str] = {}

    def on_queued(run_id: str) -> None:
        with SqliteStore(store_file) as store:  # 2. durable before the model read it
            record = store.launches.get(run_id)
            at_reply["status"] = record.status if record else "missing"
        workflow.write_text(textwrap.dedent(AGENT_WF.replace("Plan", "Review")).lstrip())  # 3.

    model = SeedModel(on_queued)
    server.script = model
    finals = load(example).main(str(root), "please start the review workflow",
                                base_url=server.base_url, api_key="sk-test")

    assert finals[0].startswith("I queued run ")
    assert all(r.body.get("stream", False) is streams for r in server.requests)
    first = model.seen["first"]
    assert at_reply["status"] == "queued"
    with AgentSession.open(root, session_id=session_id, start=False) as session:
        failed = session.status(first)
        assert failed["status"] == "failed"  # 4.
        assert failed["error"]["code"] == "source_changed"
        (follow,) = session.messages(DEFERRED_TURN_TYPE)  # 5. exactly one follow-up
        assert follow.details is not None
        assert follow.details["runId"] == first
        assert FAILED_RE.fullmatch(str(follow.content))
        assert model.seen["followups"] == [{"run": first,
                                            "reason": failed["error"]["message"]}]
        assert [t for t in model.seen["inputs"] if FAILED_RE.search(t)] == [follow.content]
        # 6. the corrected start (run in parallel with a status call) got a new id
        status_text, start_text = sorted(model.seen["retry_results"],
                                         key=lambda t: not t.startswith("Run "))
        assert status_text == (f"Run {first}: failed (source_changed: "
                               f"{failed['error']['message']})")
        second = start_text.split("(run ")[1].rstrip(").")
        assert second != first
        # 7. the new run reached its first step (and the model finished it)
        (step,) = session.messages(AGENT_STEP_TYPE)
        assert step.details is not None
        assert step.details["runId"] == second
        assert step.details["step"] == "plan"
        assert str(step.content).startswith("Review the change.")
        assert model.seen["step_text"] == step.content
        assert session.status(second)["status"] == "completed"
    # 8. the failed run stays inspectable by id, from the CLI too
    done = subprocess.run([sys.executable, "-m", "runner", "--project", str(root), "status",
                           "--json", first], capture_output=True, text=True, timeout=30)
    view: dict[str, Any] = json.loads(done.stdout)
    assert view["status"] == "failed"
    assert view["error"]["code"] == "source_changed"
