"""Includes: mounted children with their own input and outputs, exits routed by the parent."""

from __future__ import annotations

from typing import Any

from runner.compiler._templates import SCOPE
from runner.engine.executors._scripted import ScriptedExecutor

CHILD = """
    input:
      type: object
      required: [issue]
      properties: {issue: {type: string}}
    start: plan
    exits:
      fixed: {from: good}
      broken: {from: bad}
    nodes:
      plan:
        compute: "{{ {'issue': input.issue, 'fresh': 'plan' not in outputs} }}"
      review:
        decision: {question: "Fix {{ outputs.plan.issue }}?", choices: {ok: good, no: bad}}
      good: {compute: "{{ 'fixed ' ~ input.issue }}"}
      bad: {compute: "{{ 'gave up on ' ~ input.issue }}"}
    edges:
      - {from: plan, to: review}
"""

PARENT = """
    start: intro
    includes:
      fix: {workflow: ./child.yaml, input: {issue: "{{ outputs.intro.problem }}"}}
    nodes:
      intro: {compute: "{{ {'problem': input.problem} }}"}
      celebrate: {compute: "{{ {'exit': outputs.fix.exit, 'said': outputs.fix.output} }}"}
      mourn: {compute: "{{ {'exit': outputs.fix.exit, 'said': outputs.fix.output} }}"}
    edges:
      - {from: intro, to: fix}
      - {from: fix.fixed, to: celebrate}
      - {from: fix.broken, to: mourn}
"""


def test_two_exits_route_differently_with_qualified_ids(env: Any) -> None:
    env.write("child.yaml", CHILD)
    d = env.workflow(PARENT)
    assert "fix/plan" in d.nodes
    assert d.nodes["fix/plan"].scope == "fix"

    ok = env.engine(executor=ScriptedExecutor({"fix/review": {"route": "ok"}}))
    out = ok.start(d, {"problem": "leak"})
    assert out.status == "completed", out.error
    assert out.final_output == {"exit": "fixed", "said": "fixed leak"}
    assert out.state.outputs["fix"] == {"exit": "fixed", "output": "fixed leak"}
    started = [e["node"] for e in env.events(out.run_id, "node_started")]
    assert started == ["intro", "fix/plan", "fix/review", "fix/good", "celebrate"]
    entered = env.events(out.run_id, "include_entered")[0]
    assert entered["node"] == "fix"
    assert entered["payload"]["input"] == {"issue": "leak"}
    exited = env.events(out.run_id, "include_exited")[0]["payload"]
    assert exited == {"mount": "fix", "exit": "fixed", "output": "fixed leak"}
    # Child templates saw the child's own input and outputs, under local ids.
    assert out.state.outputs["fix/plan"] == {"issue": "leak", "fresh": True}
    assert out.state.scope_inputs["fix"] == {"issue": "leak"}
    prompt = env.events(out.run_id, "agent_prompt_sent")[0]["payload"]["prompt"]
    assert prompt.startswith("Fix leak?")
    assert "step: fix/review" in prompt

    no = env.engine(executor=ScriptedExecutor({"review": {"route": "no"}}))
    out2 = no.start(d, {"problem": "leak"})
    assert out2.final_output == {"exit": "broken", "said": "gave up on leak"}
    assert [e["node"] for e in env.events(out2.run_id, "node_started")][-1] == "mourn"


def test_reentering_an_include_starts_empty(env: Any) -> None:
    env.write("child.yaml", CHILD)
    d = env.workflow("""
        start: intro
        includes:
          fix: {workflow: ./child.yaml, input: {issue: "{{ input.problem }}"}}
        nodes:
          intro: {compute: "{{ 1 }}"}
          done: {compute: "{{ outputs.fix }}"}
        edges:
          - {from: intro, to: fix}
          - {from: fix.broken, to: fix}
          - {from: fix.fixed, to: done}
    """)
    script = ScriptedExecutor({"fix/review": {"outputs": [{"route": "no"}, {"route": "ok"}]}})
    out = env.engine(executor=script).start(d, {"problem": "p"})
    assert out.status == "completed", out.error
    assert out.final_output == {"exit": "fixed", "output": "fixed p"}
    plans = [e for e in env.events(out.run_id, "node_finished") if e["node"] == "fix/plan"]
    assert len(plans) == 2
    # The second invocation did not see the first one's `plan` output.
    assert [p["payload"]["output"]["fresh"] for p in plans] == [True, True]
    assert [e["payload"]["exit"] for e in env.events(out.run_id, "include_exited")] == [
        "broken", "fixed"]
    # The first invocation's `bad` branch is forgotten, not carried into the second.
    assert "fix/bad" not in out.state.outputs
    assert "fix/bad" not in out.state.results
    assert out.state.outputs["fix/good"] == "fixed p"


def test_a_long_exit_output_reaches_the_parent_intact(env: Any) -> None:
    env.write("child.yaml", """
        start: make
        exits: {done: {from: make}}
        nodes:
          make: {compute: "{{ {'text': 'q' * 5000, 'tag': {'$escaped': 1}} }}"}
    """)
    d = env.workflow("""
        start: fix
        includes:
          fix: {workflow: ./child.yaml}
        nodes:
          use:
            compute: "{{ {'n': outputs.fix.output.text | length, 'tag': outputs.fix.output.tag} }}"
        edges:
          - {from: fix.done, to: use}
    """)
    out = env.engine().start(d)
    assert out.status == "completed", out.error
    assert out.final_output == {"n": 5000, "tag": {"$escaped": 1}}


def test_an_include_input_renders_in_the_runs_scope_which_ends_with_the_run(
        env: Any) -> None:
    env.write("child.yaml", """
        start: a
        exits: {done: {from: a}}
        nodes:
          a: {compute: "{{ input }}"}
    """)
    d = env.workflow("""
        template_budget: {max_size: 1000}
        start: fix
        includes:
          fix: {workflow: ./child.yaml, input: {s: "{{ input.s * 2000 }}"}}
        nodes:
          done: {compute: "{{ outputs.fix.output }}"}
        edges:
          - {from: fix.done, to: done}
    """)
    out = env.engine().start(d, {"s": "x"})
    # The workflow's budget, not the default one (which lets 2,000 characters pass).
    assert out.status == "failed"
    assert out.error is not None
    assert out.error["code"] == "template_error"
    assert out.error["message"].startswith("include input: ")
    assert "over the budget of 1,000" in out.error["message"]
    assert SCOPE.get() is None  # no render after the run meets its scope
    fine = env.engine().start(d, {"s": ""})
    assert fine.status == "completed", fine.error
    assert fine.final_output == {"s": ""}
    assert SCOPE.get() is None


SHELL_CHILD = """
    start: a
    exits:
      ok: {from: a}
    nodes:
      a: {action: {shell: [echo, hi]}}
"""


def test_a_child_shell_step_runs_and_its_live_log_stays_inside_logs(env: Any) -> None:
    # Issue 34.1: the child's qualified id `c/a` named a live log under a `logs/c/`
    # folder nobody created, and the run crashed with FileNotFoundError.
    env.write("child.yaml", SHELL_CHILD)
    d = env.workflow("""
        start: c
        includes:
          c: {workflow: ./child.yaml}
        nodes:
          done: {compute: "{{ outputs.c.output.stdout }}"}
        edges:
          - {from: c.ok, to: done}
    """)
    out = env.engine().start(d, {})
    assert out.status == "completed", out.error
    assert out.final_output == "hi\n"
    logs = env.runs / out.run_id / "logs"
    assert not logs.exists() or [p for p in logs.iterdir() if p.is_dir()] == []


def test_the_builtin_review_runs_its_repair_check(env: Any, tmp_path: Any) -> None:
    from runner.compiler import Compiler, build_catalog

    catalog = build_catalog("workflows", None, None)
    entry = next(e for e in catalog.entries if e.name == "review")
    result = Compiler(catalog).compile_path(entry.path, display=entry.display,
                                            origin=entry.origin)
    assert result.definition is not None
    issue = {"title": "t", "detail": "d", "severity": "major"}
    script = ScriptedExecutor({
        "review": {"outputs": [{"verdict": "changes", "summary": "s", "issues": [issue]},
                               {"verdict": "pass", "summary": "ok", "issues": []}]},
        "fix/fix": {"changed": [], "summary": "done", "unresolved": []},
        "fix/assess": {"route": "fixed"},
    })
    out = env.engine(executor=script).start(result.definition,
                                            {"task": "x", "check": "echo checked"})
    assert out.status == "completed", out.error
    assert out.state.outputs["fix/verify"]["stdout"] == "checked\n"
