"""engine/_rerun.py: what a rerun reuses, from which node, and what it refuses."""

from __future__ import annotations

from typing import Any

import pytest

from runner.engine import RunControl, RunReader
from runner.engine._rerun import changed_nodes, plan
from runner.errors import InputError

CHECK = """
    input: {type: object}
    start: prep
    nodes:
      prep: {compute: "{{ {'n': 1} }}"}
      run:
        action: {shell: [sh, -c, "exit 3"]}
      report:
        fail: {message: "check failed", code: check_failed}
    edges:
      - {from: prep, to: run}
      - {from: run, switch: {on: $result.outcome, cases: {failed: report}}}
"""
CHILD = """
    exits: {done: boom}
    start: inner
    nodes:
      inner: {compute: "{{ {'got': input.v} }}"}
      boom:
        action: {shell: [sh, -c, "exit 1"]}
    edges:
      - {from: inner, to: boom}
"""
PARENT = """
    start: first
    nodes:
      first: {compute: "{{ {'v': 7} }}"}
    includes:
      sub: {workflow: ./child.yaml, input: {v: "{{ outputs.first.v }}"}}
    edges:
      - {from: first, to: sub}
"""


def test_the_default_node_is_the_node_whose_failure_was_routed_to_a_fail_node(
        env: Any) -> None:
    d = env.workflow(CHECK)
    ended = env.engine().start(d, {})
    assert (ended.status, (ended.error or {}).get("node")) == ("failed", "report")
    p = plan(RunReader(env.runs), ended.run_id, d)
    assert p.from_node == "run"  # not the fail node: the node that failed
    assert p.reused == ("prep",)
    assert p.carried["steps"] == 1
    assert p.carried["outputs"] == {"prep": {"n": 1}}
    assert p.carried["results"]["prep"]["reused_from"] == ended.run_id


def test_a_rerun_from_inside_an_include_carries_the_include_input(env: Any) -> None:
    env.write("child.yaml", CHILD)
    d = env.workflow(PARENT)
    ended = env.engine().start(d, {})
    assert ended.status == "failed"
    p = plan(RunReader(env.runs), ended.run_id, d)
    assert p.from_node == "sub/boom"
    assert set(p.reused) == {"first", "sub/inner"}
    assert p.carried["scope_inputs"] == {"sub": {"v": 7}}
    # The new run, driven from that node, sees the include's input and outputs.
    engine = env.engine()
    _, driver = engine.create(d, {}, carried=p.carried,
                              extra={"rerun": p.record(), "start_at": p.from_node})
    again = driver.drive(driver.state.start_at)
    assert again.status == "failed"
    assert [e["node"] for e in env.events(again.run_id, "node_started")] == ["sub/boom"]


def test_plan_refusals_say_what_to_do(env: Any) -> None:
    d = env.workflow(CHECK)
    ended = env.engine().start(d, {})
    reader = RunReader(env.runs)
    with pytest.raises(InputError, match="has no node 'report2'"):
        plan(reader, ended.run_id, d, from_node="report2")
    with pytest.raises(InputError, match="not reused by this rerun"):
        plan(reader, ended.run_id, d, overrides={"run": {}})
    with pytest.raises(InputError, match="ended failed"):
        plan(reader, ended.run_id, d, from_node="report", overrides={"run": {}})
    changed = env.workflow(CHECK.replace("exit 3", "exit 4"))
    with pytest.raises(InputError, match=r"\(changed: run\).*--force"):
        plan(reader, ended.run_id, changed)
    forced = plan(reader, ended.run_id, changed, force=True)
    assert (forced.forced, forced.changed_nodes) == (True, ("run",))


def test_changed_nodes_names_edges_added_removed_and_top_level_changes() -> None:
    old = {"name": "w", "nodes": {"a": {"k": 1}, "b": {"k": 2}},
           "edges": [{"from": "a", "to": "b"}]}
    assert changed_nodes(old, old) == []
    assert changed_nodes(old, {**old, "edges": [{"from": "a", "to": "c"}],
                               "nodes": {"a": {"k": 1}, "c": {"k": 3}}}) == ["a", "b", "c"]
    assert changed_nodes(old, {**old, "max_steps": 5}) == ["(workflow)"]


def test_a_cancelled_map_records_its_ended_items_and_a_rerun_reuses_them(
        env: Any, when: Any) -> None:
    """A user who cancels a long map keeps what it did: the node's cancelled end lists
    its items and the outputs of those that ended ok, so a rerun runs only the rest."""
    env.write("hold.sh", "touch started.$1; while [ ! -e never ]; do sleep 0.05; done\n")
    d = env.workflow("""
        start: each
        nodes:
          each:
            map:
              over: "{{ ['a', 'b', 'c'] }}"
              max_concurrency: 1  # c is claimed in the write that records b's end
              do:
                action:
                  use_shell: true
                  shell: "if [ {{ item }} = c ]; then sh hold.sh c; fi; printf {{ item }}"
    """)
    control = RunControl()
    when(lambda: (env.root / "started.c").exists(), lambda: control.cancel("user asked"))
    ended = env.engine().start(d, {}, control=control)
    assert ended.status == "cancelled"
    p = plan(RunReader(env.runs), ended.run_id, d)
    assert p.from_node == "each"
    assert sorted(p.items["each"]) == ["0", "1"]
    assert [p.items["each"][k]["stdout"] for k in ("0", "1")] == ["a", "b"]
