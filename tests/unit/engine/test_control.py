"""Timeouts, cancel, park and pause: processes die as a group, runs stop where they should."""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

from runner.engine import RunControl


def _at(event: dict[str, Any]) -> float:
    return datetime.fromisoformat(event["at"].replace("Z", "+00:00")).timestamp()


# The children below would sleep 30 s: a run that ends well before that (QUICK) was
# stopped by the timeout or cancel under test, however loaded the machine is.
QUICK = 15.0
GROUP = "echo $$ > {pids}; sleep 30 & echo $! >> {pids}; sleep 30"


def _pids(path: Path, env: Any) -> list[int]:
    assert env.wait_for(lambda: path.exists() and len(path.read_text().split()) == 2)
    return [int(p) for p in path.read_text().split()]


def test_shell_timeout_kills_the_whole_process_group(env: Any) -> None:
    pids = env.root / "pids"
    d = env.workflow(f"""
        start: slow
        nodes:
          slow:
            action: {{shell: [sh, -c, "{GROUP.format(pids=pids)}"]}}
            timeout: 500ms
    """)
    t0 = time.monotonic()
    out = env.engine().start(d)
    elapsed = time.monotonic() - t0
    assert out.status == "timed_out"
    assert out.error is not None
    assert out.error["code"] == "timed_out"
    assert 0.5 <= elapsed < QUICK
    shell_pid, grandchild = _pids(pids, env)
    assert env.wait_for(lambda: not env.alive(shell_pid) and not env.alive(grandchild))
    failed = env.events(out.run_id, "node_failed")[0]["payload"]
    assert failed["outcome"] == "timed_out"


def test_timeout_null_means_no_deadline(env: Any) -> None:
    d = env.workflow("""
        start: unbounded
        defaults: {timeout: 100ms}
        nodes:
          unbounded: {action: {shell: [sleep, "0.4"]}, timeout: null}
          bounded: {action: {shell: [sleep, "0.4"]}}
        edges:
          - {from: unbounded, to: bounded}
    """)
    assert d.nodes["unbounded"].timeout is None
    assert d.nodes["bounded"].timeout == 0.1
    out = env.engine().start(d)
    assert out.state.results["unbounded"]["outcome"] == "ok"
    assert out.state.results["bounded"]["outcome"] == "timed_out"
    assert out.status == "timed_out"


HOOKS = """
    import threading

    def hang(ctx):
        threading.Event().wait(30)  # the hook thread is a daemon: left behind, harmless
        return "late"

    def boom(ctx):
        raise ValueError("the hook broke on purpose")

    def gives_up(ctx):
        import pathlib, time
        from runner.steps import StepFailed
        pathlib.Path(ctx.params["marker"]).touch()
        while not ctx.stopping():
            time.sleep(0.001)
        raise StepFailed("gave_up", "the run stopped, so the hook let its work go")
"""


def test_a_hanging_hook_times_out(env: Any) -> None:
    env.write("hooks.py", HOOKS)
    d = env.workflow("""
        start: h
        nodes:
          h: {compute: {call: "./hooks.py:hang"}, timeout: 300ms}
    """)
    t0 = time.monotonic()
    out = env.engine().start(d)
    assert time.monotonic() - t0 < QUICK
    assert out.status == "timed_out"
    assert out.error is not None
    assert out.error["code"] == "timed_out"
    assert "hooks.py:hang" in out.error["message"]


def test_a_raising_hook_fails_with_its_message(env: Any) -> None:
    env.write("hooks.py", HOOKS)
    d = env.workflow("""
        start: h
        nodes:
          h: {action: {call: "./hooks.py:boom"}}
    """)
    out = env.engine().start(d)
    assert out.status == "failed"
    assert out.error is not None
    assert out.error["code"] == "hook_raised"
    assert "ValueError: the hook broke on purpose" in out.error["message"]


def test_cancel_mid_shell_kills_the_group_and_ends_cancelled(env: Any, when: Any) -> None:
    pids = env.root / "pids"
    d = env.workflow(f"""
        start: slow
        nodes:
          slow: {{action: {{shell: [sh, -c, "{GROUP.format(pids=pids)}"]}}}}
          after: {{compute: "{{{{ 1 }}}}"}}
        edges:
          - {{from: slow, to: after}}
    """)
    control = RunControl()
    when(lambda: pids.exists() and len(pids.read_text().split()) == 2,
         lambda: control.cancel("user asked"))
    t0 = time.monotonic()
    out = env.engine().start(d, control=control)
    assert time.monotonic() - t0 < QUICK
    assert out.status == "cancelled"
    assert out.error is not None
    assert out.error["message"] == "user asked"
    assert env.types(out.run_id)[-1] == "run_cancelled"
    assert env.manifest(out.run_id)["status"] == "cancelled"
    assert "after" not in out.state.results
    for pid in _pids(pids, env):
        assert env.wait_for(lambda p=pid: not env.alive(p)), pid


PARK = """
    start: a
    NODE_MAX
    nodes:
      a: {action: {shell: [sh, -c, 'echo a >> log']}}
      b:
        action:
          shell:
            - sh
            - -c
            - 'echo $$ > pid; echo b >> log; if [ ! -f marker ]; then touch marker; sleep 30; fi'
      c: {action: {shell: [sh, -c, 'echo c >> log']}}
    edges:
      - {from: a, to: b}
      - {from: b, to: c}
"""


def test_park_mid_shell_then_resume_reruns_only_the_interrupted_node(env: Any,
                                                                    when: Any) -> None:
    d = env.workflow(PARK.replace("NODE_MAX", ""))
    control = RunControl()
    when((env.root / "marker").exists, control.park)
    out = env.engine().start(d, control=control)
    assert out.parked
    assert out.status == "running"
    assert out.state.current_node == "b"
    types = env.types(out.run_id)
    assert not {"run_completed", "run_failed", "run_cancelled", "run_timed_out"} & set(types)
    # No attempt record for the interrupted node: the park is recorded, not a death.
    assert types[-2:] == ["node_started", "run_parked"]
    assert env.events(out.run_id, "run_parked")[0]["payload"]["node"] == "b"
    assert out.state.current_node_starts == 0
    assert env.manifest(out.run_id)["status"] == "running"
    assert env.state_file(out.run_id)["current_node"] == "b"
    pid = int((env.root / "pid").read_text())
    assert env.wait_for(lambda: not env.alive(pid))

    resumed = env.engine().resume(out.run_id, env.resolver())
    assert resumed.status == "completed", resumed.error
    assert (env.root / "log").read_text().split() == ["a", "b", "b", "c"]
    started = [e["node"] for e in env.events(out.run_id, "node_started")]
    assert started == ["a", "b", "b", "c"]
    res = env.events(out.run_id, "run_resumed")[0]["payload"]
    assert res["resume_at"] == "b"
    assert res["replayed_steps"] == 2
    assert resumed.state.steps == 3  # the re-run of b does not count a second step
    assert env.manifest(out.run_id)["status"] == "completed"


def test_resume_of_a_node_parked_at_the_step_limit_is_not_refused(env: Any,
                                                                 when: Any) -> None:
    d = env.workflow(PARK.replace("NODE_MAX", "max_steps: 2"))
    control = RunControl()
    when((env.root / "marker").exists, control.park)
    out2 = env.engine().start(d, control=control)
    assert out2.parked
    assert out2.state.steps == 2
    resumed = env.engine().resume(out2.run_id, env.resolver())
    # b was already counted when it started; re-running it is not a new step, and c is
    # the third step, which max_steps 2 refuses.
    assert resumed.status == "failed"
    assert resumed.error is not None
    assert resumed.error["code"] == "max_steps"
    assert "before node 'c'" in resumed.error["message"]
    assert resumed.state.results["b"]["outcome"] == "ok"
    assert [e["node"] for e in env.events(out2.run_id, "node_started")] == ["a", "b", "b"]


def _traced(env: Any, kind: str) -> Callable[[], bool]:
    """True once the (only) run's trace holds an event of `kind`."""
    return lambda: any(f'"type":"{kind}"' in p.read_text()
                       for p in env.runs.glob("*/trace.jsonl"))


def test_pause_holds_at_the_next_node_boundary(env: Any, when: Any) -> None:
    # `a` runs until the pause was requested (the file `paused`), so the request always
    # comes while `a` is running; resume() is called once the run recorded its pause.
    d = env.workflow("""
        start: a
        nodes:
          a:
            action:
              shell: [sh, -c, 'touch a-started; while [ ! -e paused ]; do sleep 0.1; done']
          b: {compute: "{{ 'b ran' }}"}
        edges:
          - {from: a, to: b}
    """)
    control = RunControl()
    paused_at: list[float] = []
    resumed_at: list[float] = []

    def pause() -> None:
        control.pause()
        paused_at.append(time.time())
        (env.root / "paused").touch()

    def resume() -> None:
        resumed_at.append(time.time())
        control.resume()

    when((env.root / "a-started").exists, pause)
    when(_traced(env, "run_paused"), resume)
    out = env.engine().start(d, control=control)
    assert out.status == "completed"
    assert out.final_output == "b ran"
    trace = env.trace(out.run_id)
    order = [(e["type"], e.get("node")) for e in trace
             if e["type"] in ("node_finished", "run_paused", "run_resumed", "node_started")]
    assert order == [("node_started", "a"), ("node_finished", "a"), ("run_paused", None),
                     ("run_resumed", None), ("node_started", "b"), ("node_finished", "b")]
    assert out.state.results["a"]["outcome"] == "ok"  # the running node was not disturbed
    paused = _at(next(e for e in trace if e["type"] == "run_paused"))
    resumed = _at(next(e for e in trace if e["type"] == "run_resumed"))
    assert paused_at  # the pause request came while `a` was still running
    assert resumed_at
    assert paused >= paused_at[0] - 0.001  # event times are cut to the millisecond
    assert resumed >= resumed_at[0] - 0.001  # held until resume() was called
    assert not out.state.paused


def test_cancel_while_paused_ends_cancelled(env: Any, when: Any) -> None:
    d = env.workflow("""
        start: a
        nodes:
          a: {compute: "{{ 1 }}"}
    """)
    control = RunControl()
    control.pause()
    when(_traced(env, "run_paused"), control.cancel)
    out = env.engine().start(d, control=control)
    assert out.status == "cancelled"
    assert "run_paused" in env.types(out.run_id)
    assert env.events(out.run_id, "node_started") == []


def test_a_hook_that_gives_up_on_a_stop_ends_the_node_cancelled(env: Any, when: Any) -> None:
    """A hook that watches `ctx.stopping()` raises as soon as the run stops, usually
    before the engine's own wait looks again: the stop, not the raise, is the ending."""
    env.write("hooks.py", HOOKS)
    marker = env.root / "started"
    d = env.workflow(f"""
        start: h
        nodes:
          h:
            action: {{call: "./hooks.py:gives_up", with: {{marker: "{marker}"}}}}
            timeout: null
    """)
    control = RunControl()
    when(marker.exists, lambda: control.cancel("user asked"))
    out = env.engine().start(d, control=control)
    assert out.status == "cancelled", out.error
    assert out.state.results["h"]["outcome"] == "cancelled"


def test_a_controls_events_made_after_a_request_say_so() -> None:
    """`wake` and `stopped` are made on first use (a host makes a control per run):
    one made after a request starts set, one made before it is set by it, and `rearm`
    clears `wake` until a stop, which stays."""
    paused = RunControl()
    paused.pause()
    assert (paused.pause_requested, paused.wake.is_set()) == (True, True)  # made after: set
    assert not paused.stopped.is_set()
    paused.rearm()
    assert not paused.wake.is_set()
    paused.resume()
    # made before: set by it
    assert (paused.pause_requested, paused.wake.is_set()) == (False, True)

    early = RunControl()
    wake, stopped = early.wake, early.stopped
    assert (wake.is_set(), stopped.is_set()) == (False, False)
    early.cancel("asked")
    assert (wake.is_set(), stopped.is_set()) == (True, True)
    early.rearm()
    assert wake.is_set()  # a stop stays sticky
    assert (early.stop_reason, early.reason) == ("cancel", "asked")

    late = RunControl()
    late.park("host stopping", auto_resume=True)
    assert (late.stopped.is_set(), late.wake.is_set()) == (True, True)
    assert (late.stop_reason, late.auto_resume) == ("park", True)


def test_the_first_stop_request_wins_and_stopping_follows_it() -> None:
    """What the run loop and every template operation read are plain attributes, kept
    in step by the requests: `stopping` is true exactly when `stop_reason` is set."""
    control = RunControl()
    assert (control.stop_reason, control.stopping, control.pause_requested) == \
        (None, False, False)
    control.pause()
    assert control.pause_requested
    assert not control.stopping
    control.cancel("asked")
    control.park("later", auto_resume=True)  # too late: the cancel stands
    assert (control.stop_reason, control.stopping, control.reason, control.auto_resume) == \
        ("cancel", True, "asked", False)
    control.resume()
    assert not control.pause_requested
    assert control.stopping
