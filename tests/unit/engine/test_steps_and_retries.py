"""max_steps bounds loops (per include invocation too); retries back off deterministically."""

from __future__ import annotations

from typing import Any

import pytest

from runner.clock import FakeClock
from runner.engine import RunControl
from runner.engine._runtypes import retry_delay
from runner.engine.executors._scripted import ScriptedExecutor


def test_max_steps_bounds_a_loop(env: Any) -> None:
    d = env.workflow("""
        start: think
        max_steps: 5
        nodes:
          think:
            decision: {question: "Again?", choices: {again: think, done: end}}
          end: {compute: "{{ 'end' }}"}
    """)
    out = env.engine(executor=ScriptedExecutor({"think": {"route": "again"}})).start(d)
    assert out.status == "failed"
    assert out.error is not None
    assert out.error["code"] == "max_steps"
    assert "max_steps (5)" in out.error["message"]
    assert out.state.steps == 5
    assert len(env.events(out.run_id, "node_started")) == 5


CHILD = """
    start: spin
    max_steps: 3
    exits: {out: {from: leave}}
    nodes:
      spin:
        decision: {question: "Spin?", choices: {again: spin, leave: leave}}
      leave: {compute: "{{ 'left' }}"}
"""

PARENT = """
    start: first
    includes:
      inner: {workflow: ./child.yaml}
    nodes:
      first: {compute: "{{ 0 }}"}
      done: {compute: "{{ 'parent done' }}"}
    edges:
      - {from: first, to: inner}
      - {from: inner.out, to: done}
"""


def test_an_include_max_steps_bounds_one_invocation(env: Any) -> None:
    env.write("child.yaml", CHILD)
    d = env.workflow(PARENT)
    forever = ScriptedExecutor({"inner/spin": {"route": "again"}})
    out = env.engine(executor=forever).start(d)
    assert out.status == "failed"
    assert out.error is not None
    assert out.error["code"] == "max_steps"
    assert "include 'inner' reached its max_steps (3)" in out.error["message"]
    spins = [e for e in env.events(out.run_id, "node_started") if e["node"] == "inner/spin"]
    assert len(spins) == 3


def test_include_step_budget_restarts_on_each_invocation(env: Any) -> None:
    env.write("child.yaml", CHILD)
    d = env.workflow("""
        start: first
        includes:
          inner: {workflow: ./child.yaml}
        nodes:
          first: {compute: "{{ 0 }}"}
          again: {compute: "{{ 'again' in results }}"}
          done: {compute: "{{ 'parent done' }}"}
        edges:
          - {from: first, to: inner}
          - {from: inner.out, to: again}
          - {from: again, switch: {on: $output, cases: {false: inner, true: done}}}
    """)
    # Each invocation takes spin, spin, leave = 3 steps, exactly the child's max_steps;
    # the second invocation of the same mount starts with a fresh budget.
    script = ScriptedExecutor({"inner/spin": {"outputs": [{"route": "again"},
                                                          {"route": "leave"}] * 2}})
    out = env.engine(executor=script).start(d)
    assert out.status == "completed", out.error
    assert out.final_output == "parent done"
    spins = [e for e in env.events(out.run_id, "node_started") if e["node"] == "inner/spin"]
    assert len(spins) == 4
    assert len(env.events(out.run_id, "include_entered")) == 2
    assert out.state.scope_steps == {"inner": 3}


def test_retry_delay_is_deterministic_bounded_and_capped() -> None:
    a = retry_delay("run-1", "n", 1, 2.0, None)
    assert a == retry_delay("run-1", "n", 1, 2.0, None)
    assert 0.8 * 2.0 <= a <= 1.2 * 2.0
    b = retry_delay("run-1", "n", 2, 2.0, None)
    assert 0.8 * 4.0 <= b <= 1.2 * 4.0  # exponential: base doubles per attempt
    others = {retry_delay(f"run-{i}", "n", 1, 2.0, None) for i in range(20)}
    assert len(others) > 1  # jitter differs between runs
    assert retry_delay("run-1", "n", 6, 2.0, 5.0) <= 5.0
    assert retry_delay("run-1", "n", 6, 2.0, 5.0) == retry_delay("run-1", "n", 6, 2.0, 5.0)


RETRY = """
    start: flaky
    nodes:
      flaky:
        FORM
        retry: {attempts: 3, backoff: 2s}
"""


@pytest.mark.parametrize("form", [
    "action: {shell: [sh, -c, 'echo try >> tries; exit 1']}",
    "action: {call: \"./hooks.py:boom\"}",
])
def test_retries_back_off_on_the_clock_then_fail(env: Any, form: str) -> None:
    env.write("hooks.py", """
        def boom(ctx):
            with open(ctx.project["root"] + "/tries", "a") as fh:
                fh.write("try\\n")
            raise RuntimeError("flaky")
    """)
    d = env.workflow(RETRY.replace("FORM", form))
    clock = FakeClock()
    before = clock.monotonic()
    out = env.engine(clock=clock).start(d)
    assert out.status == "failed"
    started = env.events(out.run_id, "node_started")
    failed = env.events(out.run_id, "node_failed")
    assert len(started) == 3
    assert [e["payload"]["retry"] for e in started] == [0, 1, 2]
    assert [e["payload"]["will_retry"] for e in failed] == [True, True, False]
    expected = [retry_delay(out.run_id, "flaky", k, 2.0, None) for k in (1, 2)]
    assert [e["payload"]["retry_in_ms"] for e in failed[:2]] == [int(x * 1000) for x in expected]
    assert clock.monotonic() - before == pytest.approx(sum(expected), abs=0.05)
    assert (env.root / "tries").read_text().split() == ["try"] * 3
    assert out.state.steps == 1  # retries are attempts of one step


def test_no_implicit_retries(env: Any) -> None:
    d = env.workflow("""
        start: once
        nodes:
          once: {action: {shell: [sh, -c, 'echo try >> tries; exit 1']}}
    """)
    clock = FakeClock()
    out = env.engine(clock=clock).start(d)
    assert out.status == "failed"
    assert len(env.events(out.run_id, "node_started")) == 1
    assert env.events(out.run_id, "node_failed")[0]["payload"]["will_retry"] is False
    assert (env.root / "tries").read_text().split() == ["try"]


def test_a_retry_that_succeeds_continues_the_run(env: Any) -> None:
    d = env.workflow("""
        start: flaky
        nodes:
          flaky:
            action: {shell: [sh, -c, 'echo x >> tries; [ $(wc -l < tries) -ge 2 ]']}
            retry: {attempts: 3, backoff: 1s, max_delay: 1s}
          next: {compute: "{{ [results.flaky.outcome, results.flaky.attempt] }}"}
        edges:
          - {from: flaky, to: next}
    """)
    clock = FakeClock()
    before = clock.monotonic()
    out = env.engine(clock=clock).start(d)
    assert out.status == "completed"
    # `attempt` is the attempt's number (the second try succeeded), as documented; the
    # trace's opaque attempt id is kept as `attempt_id`.
    assert out.final_output == ["ok", 2]
    (second,) = [e for e in env.events(out.run_id, "node_finished") if e["node"] == "flaky"]
    assert out.state.results["flaky"]["attempt_id"] == second["attempt"]
    assert len(env.events(out.run_id, "node_started")) == 3  # flaky twice, then next
    assert clock.monotonic() - before <= 1.0 + 1e-6  # capped by max_delay


def test_a_pause_request_does_not_cut_the_retry_backoff_short(env: Any, when: Any) -> None:
    d = env.workflow("""
        start: flaky
        nodes:
          flaky:
            action:
              shell: [sh, -c, 'touch started; while [ ! -e paused ]; do sleep 0.1; done; exit 1']
            retry: {attempts: 2, backoff: 5s}
    """)
    clock = FakeClock()
    before = clock.monotonic()
    control = RunControl()

    def pause() -> None:
        control.pause()
        (env.root / "paused").touch()  # only now does the first attempt end

    # The request wakes the engine mid-attempt; the backoff must still happen.
    when((env.root / "started").exists, pause)
    out = env.engine(clock=clock).start(d, control=control)
    assert out.status == "failed"
    assert len(env.events(out.run_id, "node_started")) == 2
    delay = retry_delay(out.run_id, "flaky", 1, 5.0, None)
    assert clock.monotonic() - before == pytest.approx(delay, abs=0.05)
