"""Routing: plain edges, switches on output and result paths, defaults, endings."""

from __future__ import annotations

from typing import Any

import pytest


def test_plain_edges_run_in_order(env: Any) -> None:
    d = env.workflow("""
        start: a
        nodes:
          a: {compute: "{{ 1 }}"}
          b: {compute: "{{ outputs.a + 10 }}"}
          c: {compute: "{{ outputs.b + 100 }}"}
        edges:
          - {from: a, to: b}
          - {from: b, to: c}
    """)
    out = env.engine().start(d)
    started = [e["node"] for e in env.events(out.run_id, "node_started")]
    assert started == ["a", "b", "c"]
    assert out.final_output == 111
    assert out.state.steps == 3


SWITCH = """
    start: pick
    nodes:
      pick: {compute: "{{ {'x': input.x, 'n': {'deep': input.x}} }}"}
      left: {compute: "{{ 'L' }}"}
      right: {compute: "{{ 'R' }}"}
      other: {compute: "{{ 'O' }}"}
    edges:
      - {from: pick, switch: {on: ON, cases: {l: left, r: right, o: other} DEFAULT}}
"""


@pytest.mark.parametrize("on", ["$.x", "$output.x", "$.n.deep", "$output.n.deep"])
def test_switch_on_output_paths(env: Any, on: str) -> None:
    d = env.workflow(SWITCH.replace("ON", on).replace(" DEFAULT", ""))
    assert env.engine().start(d, {"x": "r"}).final_output == "R"
    assert env.engine().start(d, {"x": "l"}).final_output == "L"


def test_switch_default_case(env: Any) -> None:
    d = env.workflow(SWITCH.replace("ON", "$.x").replace(" DEFAULT", ", default: other"))
    out = env.engine().start(d, {"x": "zzz"})
    assert out.status == "completed"
    assert out.final_output == "O"


def test_switch_without_a_matching_case_fails_with_a_routing_error(env: Any) -> None:
    d = env.workflow(SWITCH.replace("ON", "$.x").replace(" DEFAULT", ""))
    out = env.engine().start(d, {"x": "zzz"})
    assert out.status == "failed"
    assert out.error is not None
    assert out.error["code"] == "routing"
    assert out.error["node"] == "pick"
    assert "no case for $.x = 'zzz'" in out.error["message"]
    assert env.types(out.run_id)[-1] == "run_failed"


def test_switch_on_a_missing_path_fails_with_a_routing_error(env: Any) -> None:
    d = env.workflow(SWITCH.replace("ON", "$.nope").replace(" DEFAULT", ""))
    out = env.engine().start(d, {"x": "l"})
    assert out.status == "failed"
    assert out.error is not None
    assert out.error["code"] == "routing"
    assert "$.nope is not present" in out.error["message"]


RESULT_SWITCH = """
    start: try
    nodes:
      try:
        action:
          shell: [sh, -c, 'case "$0" in fail) exit 1;; slow) sleep 30;; esac', "{{ input.mode }}"]
        timeout: 3s  # far longer than starting sh on a loaded machine, far below 30 s
      good: {compute: "{{ 'ok path' }}"}
      bad: {compute: "{{ 'failed path: ' ~ results.try.error.code }}"}
      slow: {compute: "{{ 'timed out path' }}"}
    edges:
      - {from: try, switch: {on: $result.outcome, cases: {ok: good, failed: bad, timed_out: slow}}}
"""


@pytest.mark.parametrize(("mode", "expected"), [
    ("fine", "ok path"),
    ("fail", "failed path: nonzero_exit"),
    ("slow", "timed out path"),
])
def test_result_outcome_switch_catches_failure_and_timeout(env: Any, mode: str,
                                                          expected: str) -> None:
    d = env.workflow(RESULT_SWITCH)
    out = env.engine().start(d, {"mode": mode})
    assert out.status == "completed", out.error
    assert out.final_output == expected
    outcome = {"fine": "ok", "fail": "failed", "slow": "timed_out"}[mode]
    assert out.state.results["try"]["outcome"] == outcome


def test_failed_node_with_a_plain_edge_fails_the_run(env: Any) -> None:
    d = env.workflow("""
        start: a
        nodes:
          a: {action: {shell: ["false"]}}
          b: {compute: "{{ 'never' }}"}
        edges:
          - {from: a, to: b}
    """)
    out = env.engine().start(d)
    assert out.status == "failed"
    assert out.error is not None
    assert out.error["code"] == "nonzero_exit"
    assert out.error["node"] == "a"
    assert [e["node"] for e in env.events(out.run_id, "node_started")] == ["a"]


def test_timed_out_node_without_a_result_switch_times_the_run_out(env: Any) -> None:
    d = env.workflow("""
        start: a
        nodes:
          a: {action: {shell: [sleep, "5"]}, timeout: 200ms}
    """)
    out = env.engine().start(d)
    assert out.status == "timed_out"
    assert env.types(out.run_id)[-1] == "run_timed_out"
    assert env.manifest(out.run_id)["status"] == "timed_out"


def test_a_node_without_an_edge_completes_the_run_with_its_output(env: Any) -> None:
    d = env.workflow("""
        start: a
        nodes:
          a: {compute: "{{ 'first' }}"}
          b: {compute: "{{ {'last': outputs.a} }}"}
        edges:
          - {from: a, to: b}
    """)
    out = env.engine().start(d)
    assert out.status == "completed"
    assert out.error is None
    assert out.final_output == {"last": "first"}
    last = env.trace(out.run_id)[-1]
    assert last["type"] == "run_completed"
    assert last["payload"]["final_output"] == {"last": "first"}
