"""Continuation runs: `answer` continues a waiting run as a new linked run, once."""

from __future__ import annotations

from typing import Any

import pytest

from runner.errors import ClaimLost, InputError

WF = """
    start: count
    max_steps: MAX
    nodes:
      count: {compute: "{{ input.n * 2 }}"}
      ask: {checkpoint: {summary: "Approve {{ outputs.count }}?"}}
      after:
        compute: "{{ {'answer': outputs.ask.answer, 'count': outputs.count, 'n': input.n} }}"
    edges:
      - {from: count, to: ask}
      - {from: ask, to: after}
"""


def test_answer_continues_as_a_linked_run_with_carried_outputs(env: Any) -> None:
    d = env.workflow(WF.replace("MAX", "10"))
    engine = env.engine()
    parent = engine.start(d, {"n": 21})
    assert parent.status == "waiting"
    child = engine.answer(parent.run_id, {"approved": True}, env.resolver())
    assert child.run_id != parent.run_id
    assert child.status == "completed", child.error
    assert child.final_output == {"answer": {"approved": True}, "count": 42, "n": 21}
    assert child.state.parent_run_id == parent.run_id
    assert env.manifest(child.run_id)["parent_run_id"] == parent.run_id
    started = env.events(child.run_id, "run_started")[0]["payload"]
    assert started["continued_from"] == parent.run_id
    assert started["checkpoint"] == "ask"
    assert started["carried_steps"] == 2
    # Carried steps count: count and ask in the parent, after in the child.
    assert child.state.steps == 3
    assert child.state.carried_steps == 2
    assert [e["node"] for e in env.events(child.run_id, "node_started")] == ["after"]
    # The parent stays a sealed, waiting record.
    assert env.manifest(parent.run_id)["status"] == "waiting"


def test_carried_steps_count_toward_max_steps(env: Any) -> None:
    d = env.workflow(WF.replace("MAX", "2"))
    engine = env.engine()
    parent = engine.start(d, {"n": 1})
    child = engine.answer(parent.run_id, "yes", env.resolver())
    assert child.status == "failed"
    assert child.error is not None
    assert child.error["code"] == "max_steps"


def test_a_waiting_run_continues_only_once(env: Any) -> None:
    d = env.workflow(WF.replace("MAX", "10"))
    engine = env.engine()
    parent = engine.start(d, {"n": 1})
    engine.answer(parent.run_id, "first", env.resolver())
    with pytest.raises(InputError, match="already answered"):
        engine.answer(parent.run_id, "second", env.resolver())
    runs = [p.name for p in env.runs.iterdir() if not p.name.startswith(".")]
    assert len(runs) == 2


def test_answering_a_run_that_is_not_waiting_is_refused(env: Any) -> None:
    d = env.workflow("""
        start: a
        nodes:
          a: {compute: "{{ 1 }}"}
    """)
    engine = env.engine()
    done = engine.start(d)
    with pytest.raises(InputError, match="not waiting"):
        engine.answer(done.run_id, "x", env.resolver())


def test_a_checkpoint_without_an_edge_completes_on_answer(env: Any) -> None:
    d = env.workflow("""
        start: ask
        nodes:
          ask: {checkpoint: "Go?"}
    """)
    engine = env.engine()
    parent = engine.start(d)
    child = engine.answer(parent.run_id, "go", env.resolver())
    assert child.status == "completed"
    assert child.final_output == {"summary": "Go?", "answer": "go"}


def test_long_values_survive_the_continuation(env: Any) -> None:
    d = env.workflow("""
        start: big
        nodes:
          big: {compute: "{{ {'text': input.text ~ '!', 'odd': {'$artifact': 'mine'}} }}"}
          ask: {checkpoint: "ok?"}
          after:
            compute: >-
              {{ {'out': outputs.big.text | length, 'in': input.text | length,
                  'odd': outputs.big.odd, 'answer': outputs.ask.answer | length} }}
        edges:
          - {from: big, to: ask}
          - {from: ask, to: after}
    """)
    engine = env.engine()
    parent = engine.start(d, {"text": "t" * 5000})
    child = engine.answer(parent.run_id, "a" * 6000, env.resolver())
    assert child.status == "completed", child.error
    assert child.final_output == {"out": 5001, "in": 5000, "odd": {"$artifact": "mine"},
                                  "answer": 6000}
    # The child's bundle holds its own copies: no reference into the parent's folder.
    child_root = env.runs / child.run_id
    assert len(list((child_root / "artifacts").iterdir())) >= 3


def test_an_answer_that_could_not_start_can_be_given_again(env: Any) -> None:
    d = env.workflow(WF.replace("MAX", "10"))
    parent = env.engine().start(d, {"n": 2})
    with pytest.raises(ClaimLost):
        env.engine(fence=lambda: False).answer(parent.run_id, "lost", env.resolver())
    child = env.engine().answer(parent.run_id, "kept", env.resolver())
    assert child.status == "completed"
    assert child.final_output["answer"] == "kept"


@pytest.mark.parametrize("last", ["after", None])
def test_a_continuation_killed_before_its_first_node_resumes_after_the_checkpoint(
        env: Any, last: str | None) -> None:
    # Before issue 39 it resumed at the workflow's start: the parent's nodes ran again
    # and the run stopped at the checkpoint a second time.
    flow = WF.replace("MAX", "10")
    if last is None:  # the checkpoint is the last node: resuming ends the run
        flow = flow.replace("      - {from: ask, to: after}\n", "")
        flow = flow.replace("      after:\n        compute: \"{{ {'answer': outputs.ask.answer, "
                            "'count': outputs.count, 'n': input.n} }}\"\n", "")
    d = env.workflow(flow)
    engine = env.engine()
    parent = engine.start(d, {"n": 21})
    driver, checkpoint = engine.prepare_answer(parent.run_id, "yes", env.resolver())
    assert checkpoint == "ask"
    driver.bundle.close()  # its runner died here: run_started is durable, no node ran
    resumed = engine.resume(driver.run_id, env.resolver())
    assert resumed.status == "completed", resumed.error
    assert [e["node"] for e in env.events(driver.run_id, "node_started")] == (
        ["after"] if last else [])
    if last is None:
        assert resumed.final_output == {"summary": "Approve 42?", "answer": "yes"}
