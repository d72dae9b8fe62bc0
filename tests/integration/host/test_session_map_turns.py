"""A session-owned map of agent items: each item's step reaches the session only once
the item before it has ended in the store (issue 37, DESIGN §10 "Sessions").

All three items are claimed at once (`max_concurrency: 3`); the session holds one step
at a time, so they reach it one by one, in item order. An item keeps its turn until
the run loop has written its ending, so when the next step arrives the store (and
`workflow status`) already calls the one before it `ok`. Before that, an item gave its
turn up as its step was submitted and its ending was written with the run loop's next
claim, so the next step could arrive while the store still said `running`.
The scripted model reads the store at the moment each step reaches it; the run loop
is held just before it writes endings (the `before_items_settled` point) until the
next step has reached the model or a second has passed, so a step that arrives
before its predecessor's ending is written is caught every time, not by luck.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable

import pytest
from harness import Scripted, Session, on_user, start_call

from runner.engine._agent import CONTRACT_RE
from runner.host.session._reference import ModelReply, ModelView, ToolCall
from runner.store.domain._fanout import ItemKey

pytestmark = pytest.mark.timeout(60)
Make = Callable[..., Session]

MAP_WF = """
    start: files
    nodes:
      files:
        map:
          over: "{{ ['a.py', 'b.py', 'c.py'] }}"
          as: file
          max_concurrency: 3
          do:
            agent:
              prompt: "Review {{ file }} (item {{ index }})."
              output:
                type: object
                required: [summary]
                properties: {summary: {type: string}}
"""
ITEM_RE = re.compile(r"Review (?P<file>[\w.]+) \(item (?P<index>\d)\)\.")


#: How long the run loop is held before writing endings, waiting for a step that must
#: not come (the fixed code: the full hold, three times a run).
HOLD = 1.0


def test_each_agent_item_reaches_the_session_after_the_one_before_it_ended_in_the_store(
        session: Make) -> None:
    states_at_step: list[tuple[str, list[str]]] = []
    holder: dict[str, Session] = {}
    arrived = threading.Condition()

    def hold_the_settle(point: str) -> None:
        if point != "before_items_settled":
            return
        with arrived:  # the next step, if it comes before the endings are written
            seen = len(states_at_step)
            arrived.wait_for(lambda: len(states_at_step) > seen, timeout=HOLD)

    def submit_and_look(view: ModelView) -> ModelReply | None:
        if view.last_tool_reply is not None:
            return None
        found = list(CONTRACT_RE.finditer(view.last_user_text))
        item = ITEM_RE.search(view.last_user_text)
        if not found or item is None:
            return None
        s = holder["s"]
        (run,) = [r.run_id for r in s.launches()]
        states = [i.state for i in s.store.fanout.items(ItemKey(run, "files", 1))]
        with arrived:
            states_at_step.append((item.group("file"), states))
            arrived.notify_all()
        m = found[-1]
        return ToolCall("workflow", {"action": "submit", "step": m.group("step"),
                                     "attempt": m.group("attempt"),
                                     "output": {"summary": f"ok {item.group('file')}"}})

    model = Scripted(on_user("^go$", start_call("triage", None)), submit_and_look)
    s = session(model, {"triage": MAP_WF})
    s.options.crash_point = hold_the_settle  # the engine's seam (EngineOptions)
    holder["s"] = s
    s.host.prompt("go")
    s.settle()
    (run,) = [r.run_id for r in s.launches()]
    assert s.launch(run).status == "done"
    assert [f for f, _ in states_at_step] == ["a.py", "b.py", "c.py"]
    for k, (_, states) in enumerate(states_at_step):
        assert states == ["ok"] * k + ["running"] * (3 - k), states_at_step
