"""Issue 37: a map of agent items in a session-owned run, through the real Pi CLI
(`--mode rpc`), the wfrun extension and a fake model server.

The model starts a workflow whose map has three agent items, all allowed at once
(`max_concurrency: 3`). A session holds one step at a time, so the items reach it one
at a time, in item order, each with its own contract: the model sees item 0's step,
submits it, then item 1's, then item 2's. The run then completes and the session
hears its outcome exactly once (one presentation, one follow-up turn).
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from fakes.openai_server import Answer, Messages, Reply, call, contract_of
from fakes.pi_model import last, text_of
from fakes.seed_workflow import RUN_RE
from pi_rpc import custom_messages
from pi_world import World
from waiting import wait_until

from runner.engine import RunReader
from runner.launch._intents import AGENT_STEP_TYPE, DEFERRED_TURN_TYPE, PRESENTATION_TYPE
from runner.store.domain._fanout import ItemKey

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]
PROMPT = "please review the three files"
FILES = ["a.py", "b.py", "c.py"]
MAP_WF = """
    presentation: "triage done: {{ outputs.summary }}"
    start: files
    nodes:
      files:
        map:
          over: "{{ ['a.py', 'b.py', 'c.py'] }}"
          as: file
          max_concurrency: 3
          do:
            agent:
              prompt: "Review the file {{ file }} (item {{ index }})."
              output:
                type: object
                required: [verdict]
                properties: {verdict: {type: string}}
      summary:
        compute: "{{ outputs.files | map(attribute='verdict') | join(',') }}"
    edges:
      - {from: files, to: summary}
"""
def _item_states(world: World, run: str) -> list[str]:
    store = world.store()
    try:
        return [i.state for i in store.fanout.items(ItemKey(run, "files", 1))]
    finally:
        store.close()


FILE_RE = re.compile(r"Review the file (?P<file>[\w.]+) \(item (?P<index>\d)\)\.")


def test_a_map_of_agent_items_reaches_the_session_one_at_a_time_then_one_presentation(
        world: World) -> None:
    world.write("triage", MAP_WF)
    seen: dict[str, Any] = {"steps": [], "outcome_turns": 0}

    def rule(messages: Messages) -> Reply | None:
        end = last(messages)
        text = text_of(end)
        if end.get("role") == "user":
            if text == PROMPT:
                return Answer(calls=[("workflow", {"action": "start", "workflow": "triage"})])
            contract = contract_of([{"role": "user", "content": text}])
            found = FILE_RE.search(text)
            if contract and found:
                # What the store says of the map's items as this step arrives.
                seen["steps"].append((found.group("file"), contract["step"],
                                      contract["attempt"], _item_states(world, seen["run"])))
                return Answer(calls=[call("submit", contract,
                                          output={"verdict": f"ok-{found.group('file')}"})])
            if text.startswith("triage done:"):
                seen["outcome_turns"] += 1
                return Answer(text="All three reviewed.")
            return Answer(text="Nothing to do.")
        queued = RUN_RE.search(text)
        if end.get("role") == "tool" and queued and "run" not in seen:
            seen["run"] = queued.group("run")
            return Answer(text=f"Queued {seen['run']}.")
        return Answer(text="Submitted.")

    world.model.rules.append(rule)
    pi = world.pi()
    pi.prompt(PROMPT)
    run = wait_until(lambda: seen.get("run"), what="the queued run")
    wait_until(lambda: world.launch(run).status == "done",
               what=lambda: f"run {run} done (now {world.launch(run).status}); "
                            f"steps so far {seen['steps']}")
    wait_until(lambda: seen["outcome_turns"] >= 1, what=lambda: "the session to hear the "
               f"outcome; user turns: {[text_of(m[-1])[:300] for m in world.model.seen]}")
    # One item at a time, in item order, each its own step and attempt.
    assert [s[0] for s in seen["steps"]] == FILES
    assert [s[1] for s in seen["steps"]] == ["files[0]", "files[1]", "files[2]"]
    assert len({s[2] for s in seen["steps"]}) == 3
    # All three were claimed at once (max_concurrency 3), yet each step reached the
    # session only once the one before it had ended in the store: an item keeps its
    # turn until the run loop has written its ending (engine/_fanout.py), so the store
    # and `workflow status` never call an item running once its step was submitted.
    states = [s[3] for s in seen["steps"]]
    for k, at_step in enumerate(states):
        assert at_step == ["ok"] * k + ["running"] * (3 - k), states
    turns = [text_of(m[-1]) for m in world.model.seen]  # steps and the submit's replies
    order = [t.split(" (item")[0] if t.startswith("Review") else "accepted" for t in turns
             if t.startswith(("Review the file", "Output accepted"))]
    assert order == ["Review the file a.py", "accepted", "Review the file b.py", "accepted",
                     "Review the file c.py", "accepted"]
    session = pi.session_file()
    steps = custom_messages(session, AGENT_STEP_TYPE)
    assert [m["details"]["step"] for m in steps] == ["files[0]", "files[1]", "files[2]"]
    assert all(m["details"]["runId"] == run for m in steps)
    # The run completed with every item's output, in item order.
    reader = RunReader(world.project / ".wfrun" / "runs")
    assert reader.status(run) == "completed"
    assert reader.final_output(run) == "ok-a.py,ok-b.py,ok-c.py"
    # One presentation: exactly one follow-up turn carried the outcome.
    told = [m for m in custom_messages(session, PRESENTATION_TYPE)
            + custom_messages(session, DEFERRED_TURN_TYPE) if m["details"]["runId"] == run]
    assert len(told) == 1, told
    assert told[0]["content"] == "triage done: ok-a.py,ok-b.py,ok-c.py"
    turn_inputs = [text_of(m[-1]) for m in world.model.seen if m[-1].get("role") == "user"]
    assert turn_inputs.count(told[0]["content"]) == 1
    assert seen["outcome_turns"] == 1
    assert pi.count(lambda r: r.get("type") == "extension_error") == 0
    assert pi.close() == 0
