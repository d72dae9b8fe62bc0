"""Each node kind executes as specified: agent, decision, compute, action, notify, checkpoint."""

from __future__ import annotations

import os
from typing import Any

from runner.engine.executors._scripted import ScriptedExecutor


def test_agent_node_accepts_scripted_output_and_renders_prompt(env: Any) -> None:
    d = env.workflow("""
        start: plan
        nodes:
          plan:
            agent:
              prompt: "Plan {{ input.task }}."
              output: {type: object, required: [steps], properties: {steps: {type: array}}}
    """)
    executor = ScriptedExecutor({"plan": {"steps": ["a", "b"]}})
    out = env.engine(executor=executor).start(d, {"task": "the thing"})
    assert out.status == "completed"
    assert out.final_output == {"steps": ["a", "b"]}
    sent = env.events(out.run_id, "agent_prompt_sent")
    assert [e["payload"]["kind"] for e in sent] == ["step"]
    prompt = sent[0]["payload"]["prompt"]
    assert prompt.startswith("Plan the thing.")
    attempt = sent[0]["attempt"]
    assert f'"attempt": "{attempt}"' in prompt  # the contract shows the real values
    assert executor.turns == [("plan", attempt, "step")]


def test_decision_list_choices_route_with_a_switch_on_route(env: Any) -> None:
    d = env.workflow("""
        start: review
        nodes:
          review:
            decision: {question: "Done?", choices: [done, again]}
          yes: {compute: "{{ 'took done' }}"}
          no: {compute: "{{ 'took again' }}"}
        edges:
          - {from: review, switch: {on: $.route, cases: {done: yes, again: no}}}
    """)
    out = env.engine(executor=ScriptedExecutor({"review": {"route": "again"}})).start(d)
    assert out.final_output == "took again"


def test_decision_mapping_choices_build_the_switch(env: Any) -> None:
    d = env.workflow("""
        start: review
        nodes:
          review:
            decision:
              question: "Ship it?"
              choices: {ship: shipped, hold: held}
          shipped: {compute: "{{ 'S' }}"}
          held: {compute: "{{ 'H:' ~ outputs.review.reason }}"}
    """)
    edge = d.edges["review"]
    assert edge.on == "$.route"
    assert dict(edge.cases) == {"ship": "shipped", "hold": "held"}
    executor = ScriptedExecutor({"review": {"route": "hold", "reason": "tests red"}})
    out = env.engine(executor=executor).start(d)
    assert out.status == "completed"
    assert out.final_output == "H:tests red"
    # The decision's schema only admits the listed choices.
    bad = ScriptedExecutor({"review": {"route": "maybe"}})
    out2 = env.engine(executor=bad).start(d)
    assert out2.status == "failed"
    assert out2.error is not None
    assert out2.error["code"] == "no_submission"


def test_compute_expression_yields_native_values(env: Any) -> None:
    d = env.workflow("""
        start: n
        nodes:
          n: {compute: "{{ input.xs | length + 1 }}"}
          obj: {compute: "{{ {'double': outputs.n * 2, 'ok': outputs.n > 2, 'none': none} }}"}
        edges:
          - {from: n, to: obj}
    """)
    out = env.engine().start(d, {"xs": [1, 2, 3]})
    assert out.state.outputs["n"] == 4
    assert isinstance(out.state.outputs["n"], int)
    assert out.final_output == {"double": 8, "ok": True, "none": None}


HOOKS = """
    import threading

    def fn(ctx):
        ctx.publish_update("progress", "main", {"completed": 1, "total": 2})
        return {"n": ctx.input["n"], "prev": ctx.outputs["first"], "run": ctx.run["id"]}

    def boom(ctx):
        raise ValueError("the hook broke on purpose")

    def hang(ctx):
        threading.Event().wait(3)
        return "late"

    def bad_value(ctx):
        return {1, 2}

    def act(ctx):
        return {"acted": ctx.outputs["fn_node"]["n"] + 1}
"""


def test_compute_call_hook_sees_context_and_publishes_updates(env: Any) -> None:
    env.write("hooks.py", HOOKS)
    d = env.workflow("""
        start: first
        nodes:
          first: {compute: "{{ 'one' }}"}
          fn_node: {compute: {call: "./hooks.py:fn"}}
          act_node: {action: {call: "./hooks.py:act"}}
        edges:
          - {from: first, to: fn_node}
          - {from: fn_node, to: act_node}
    """)
    out = env.engine().start(d, {"n": 41})
    assert out.status == "completed"
    assert out.state.outputs["fn_node"] == {"n": 41, "prev": "one", "run": out.run_id}
    assert out.final_output == {"acted": 42}
    updates = env.events(out.run_id, "update_published")
    assert len(updates) == 1
    assert updates[0]["node"] == "fn_node"
    assert updates[0]["payload"] == {"type": "progress", "key": "main",
                                     "data": {"completed": 1, "total": 2}}
    assert out.state.updates["progress:main"]["data"] == {"completed": 1, "total": 2}


def test_hook_returning_non_json_fails(env: Any) -> None:
    env.write("hooks.py", HOOKS)
    d = env.workflow("""
        start: a
        nodes:
          a: {compute: {call: "./hooks.py:bad_value"}}
    """)
    out = env.engine().start(d)
    assert out.status == "failed"
    assert out.error is not None
    assert out.error["code"] == "not_json"


def test_shell_argv_templates_cwd_env_and_stdin(env: Any) -> None:
    (env.root / "sub").mkdir()
    d = env.workflow("""
        start: a
        nodes:
          a:
            action:
              shell: [sh, -c, 'printf "%s|%s|%s|" "$1" "$(pwd)" "$GREETING"; cat', sh,
                      "{{ input.word }}"]
              cwd: sub
              env: {GREETING: "hello {{ input.word }}"}
              stdin: "fed {{ input.n }}"
    """)
    out = env.engine().start(d, {"word": "two words; $(rm -rf /)", "n": 7})
    assert out.status == "completed", out.error
    o = out.final_output
    arg, cwd, greeting, rest = o["stdout"].split("|")
    assert arg == "two words; $(rm -rf /)"  # one argv element, never re-parsed by a shell
    assert os.path.realpath(cwd) == os.path.realpath(env.root / "sub")
    assert greeting == "hello two words; $(rm -rf /)"
    assert rest == "fed 7"
    assert o["exit_code"] == 0
    assert o["truncated"] is False
    assert o["command"][0] == "sh"
    assert o["command"][-1] == "two words; $(rm -rf /)"


def test_shell_nonzero_exit_fails_unless_allowed(env: Any) -> None:
    d = env.workflow("""
        start: strict
        nodes:
          strict:
            action: {shell: [sh, -c, 'echo first >&2; echo "it broke" >&2; exit 3']}
    """)
    out = env.engine().start(d)
    assert out.status == "failed"
    assert out.error is not None
    assert out.error["code"] == "nonzero_exit"
    assert "exited with 3" in out.error["message"]
    assert "it broke" in out.error["message"]
    assert out.error["node"] == "strict"

    d2 = env.workflow("""
        start: lenient
        nodes:
          lenient:
            action: {shell: [sh, -c, 'exit 3'], allow_nonzero_exit: true}
          three: {compute: "{{ 'saw three' }}"}
        edges:
          - {from: lenient, switch: {on: $result.exit_code, cases: {3: three}}}
    """, name="wf2")
    out2 = env.engine().start(d2)
    assert out2.status == "completed"
    assert out2.state.outputs["lenient"]["exit_code"] == 3
    assert out2.final_output == "saw three"


def test_shell_output_cap_truncates(env: Any) -> None:
    d = env.workflow("""
        start: a
        nodes:
          a:
            action: {shell: [sh, -c, 'printf 0123456789abcdef; printf XYZXYZXYZXYZ >&2'],
                     output_cap: 10}
    """)
    out = env.engine().start(d)
    assert out.final_output["stdout"] == "0123456789"
    assert out.final_output["stderr"] == "XYZXYZXYZX"
    assert out.final_output["truncated"] is True


def test_shell_parse_expression_sees_stdout_and_exit_code(env: Any) -> None:
    d = env.workflow("""
        start: a
        nodes:
          a:
            action:
              shell: [sh, -c, 'echo 21; exit 2']
              allow_nonzero_exit: true
              parse: "{{ {'doubled': (stdout | trim | int) * 2, 'code': exit_code} }}"
    """)
    out = env.engine().start(d)
    assert out.status == "completed"
    assert out.final_output == {"doubled": 42, "code": 2}


def test_shell_missing_program_fails_cleanly(env: Any) -> None:
    d = env.workflow("""
        start: a
        nodes:
          a: {action: {shell: [definitely-not-a-program-wfrun]}}
    """)
    out = env.engine().start(d)
    assert out.status == "failed"
    assert out.error is not None
    assert out.error["code"] == "command_not_found"
    assert "definitely-not-a-program-wfrun" in out.error["message"]


class Sink:
    def __init__(self) -> None:
        self.got: list[tuple[str, str, str, str, str, str]] = []

    def emit(self, run_id: str, node: str, attempt: str, notification_id: str, kind: str,
             message: str, channels: tuple[str, ...] = ()) -> None:
        self.got.append((run_id, node, attempt, notification_id, kind, message))


def test_notify_reaches_the_sink_and_outputs_the_notification_id(env: Any) -> None:
    d = env.workflow("""
        start: tell
        nodes:
          tell: {notify: {kind: final, message: "done with {{ input.task }}"}}
    """)
    sink = Sink()
    out = env.engine(notifications=sink).start(d, {"task": "review"})
    assert out.status == "completed"
    assert len(sink.got) == 1
    run_id, node, attempt, nid, kind, message = sink.got[0]
    assert (run_id, node, kind, message) == (out.run_id, "tell", "final", "done with review")
    assert out.final_output == {"notification_id": nid, "kind": "final",
                                "message": "done with review"}
    assert nid == f"{out.run_id}:tell:1"
    emitted = env.events(out.run_id, "notification_emitted")
    assert [e["payload"]["notification_id"] for e in emitted] == [nid]
    assert emitted[0]["attempt"] == attempt


def test_checkpoint_ends_the_run_waiting(env: Any) -> None:
    d = env.workflow("""
        start: ask
        nodes:
          ask: {checkpoint: {summary: "Approve {{ input.n }} steps?"}}
          after: {compute: "{{ 1 }}"}
        edges:
          - {from: ask, to: after}
    """)
    out = env.engine().start(d, {"n": 3})
    assert out.status == "waiting"
    assert not out.parked
    assert out.final_output == {"summary": "Approve 3 steps?"}
    assert env.types(out.run_id)[-1] == "run_waiting"
    assert env.events(out.run_id, "run_waiting")[0]["payload"]["waiting_on"] == "ask"
    assert env.manifest(out.run_id)["status"] == "waiting"
    assert "after" not in out.state.outputs
