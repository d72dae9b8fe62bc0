"""The built-in workflows in definitions/: valid, and together a tour of the format.

The coverage assertions read the *compiled* definitions, so removing a feature
from the built-ins (a node kind, a switch, the include, the loop) fails here.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jsonschema
import networkx as nx
import pytest

from runner.compiler import (
    ActionSpec,
    AgentSpec,
    Compiler,
    CompileResult,
    WorkflowDefinition,
    build_catalog,
)
from runner.compiler._checker import case_key
from runner.compiler._discovery import builtin_folder
from runner.compiler._model import DEFAULT_MAX_STEPS
from runner.compiler._schema import workflow_schema
from runner.compiler._templates import render_native, render_text
from runner.compiler._yamlio import load

REPO = Path(__file__).resolve().parents[2]
DEFINITIONS = REPO / "definitions"
BUILTIN_FILES = sorted(DEFINITIONS.glob("*.yaml"))


def _compile_all() -> dict[str, CompileResult]:
    catalog = build_catalog("workflows", None, None)
    compiler = Compiler(catalog)
    out = {}
    for entry in catalog.entries:
        out[entry.name] = compiler.compile_path(entry.path, display=entry.display,
                                                origin=entry.origin)
    return out


@pytest.fixture(scope="module")
def compiled() -> dict[str, CompileResult]:
    return _compile_all()


@pytest.fixture(scope="module")
def definitions(compiled: dict[str, CompileResult]) -> dict[str, WorkflowDefinition]:
    out = {}
    for name, result in compiled.items():
        assert result.definition is not None, name
        out[name] = result.definition
    return out


def test_the_source_checkout_serves_the_repository_definitions() -> None:
    assert builtin_folder("workflows").resolve() == DEFINITIONS.resolve()
    assert {p.stem for p in BUILTIN_FILES} >= {"demo", "review", "repair", "shell-check"}


@pytest.mark.parametrize("path", BUILTIN_FILES, ids=lambda p: p.stem)
def test_every_builtin_compiles_without_any_diagnostic(
        path: Path, compiled: dict[str, CompileResult]) -> None:
    result = compiled[path.stem]
    assert result.valid, [d.to_json() for d in result.diagnostics]
    assert result.diagnostics == []  # not even a warning
    assert result.definition is not None
    assert result.definition.name == path.stem
    assert result.definition.digest.startswith("sha256:")
    assert result.definition.source is not None
    assert result.definition.source.kind == "builtin"
    assert result.definition.source.name == path.stem


@pytest.mark.parametrize("path", BUILTIN_FILES, ids=lambda p: p.stem)
def test_every_builtin_passes_the_published_editor_schema(path: Path) -> None:
    data = load(path.read_text(encoding="utf-8"), path.as_posix())
    jsonschema.validate(data, workflow_schema())


@pytest.mark.parametrize("path", BUILTIN_FILES, ids=lambda p: p.stem)
def test_every_builtin_is_self_describing(path: Path,
                                          definitions: dict[str, WorkflowDefinition]) -> None:
    d = definitions[path.stem]
    assert d.title
    assert d.description
    assert d.input_schema is not None
    assert d.input_schema.get("type") == "object"


def _kinds(definitions: dict[str, WorkflowDefinition]) -> set[str]:
    kinds = set()
    for d in definitions.values():
        for node in d.nodes.values():
            is_decision = isinstance(node.spec, AgentSpec) and node.spec.decision_field
            kinds.add("decision" if is_decision else node.kind)
    return kinds


def test_builtins_cover_every_author_node_kind(
        definitions: dict[str, WorkflowDefinition]) -> None:
    assert _kinds(definitions) >= {"agent", "decision", "compute", "action", "notify",
                                   "checkpoint", "include_entry", "include_exit"}


def test_builtins_run_a_shell_argv_list_and_an_explicit_shell_line(
        definitions: dict[str, WorkflowDefinition]) -> None:
    actions = [n.spec for d in definitions.values() for n in d.nodes.values()
               if isinstance(n.spec, ActionSpec)]
    argv = [a for a in actions if isinstance(a.shell, tuple)]
    assert argv
    assert all(not a.use_shell for a in argv)
    assert any(a.use_shell and isinstance(a.shell, str) for a in actions)


def test_builtins_cover_plain_edges_and_both_kinds_of_switch(
        definitions: dict[str, WorkflowDefinition]) -> None:
    edges = [e for d in definitions.values() for e in d.edges.values()]
    assert any(e.to is not None for e in edges)
    outcome_switches = [e for e in edges if e.on == "$result.outcome"]
    assert outcome_switches
    assert any({"ok", "failed"} <= set(e.cases) for e in outcome_switches)
    assert any(e.on is not None and e.on.startswith("$.") for e in edges)
    # A switch on a boolean output: YAML `true:`/`false:` keys become strings.
    assert any(set(e.cases) == {"true", "false"} for e in edges)


def test_review_includes_repair_through_named_exits(
        definitions: dict[str, WorkflowDefinition]) -> None:
    repair, review = definitions["repair"], definitions["review"]
    assert set(repair.exits) == {"fixed", "stuck"}
    entry = review.nodes["fix"]
    assert entry.kind == "include_entry"
    assert entry.spec.to_json()["workflow"] == "repair"
    # Child nodes are mount-qualified and scoped to the mount.
    for local in repair.nodes:
        assert review.nodes[f"fix/{local}"].scope == "fix"
        assert review.nodes[f"fix/{local}"].local_id == local
    assert review.edges["fix"].to == f"fix/{repair.start}"
    # Both exits are routed by the parent: fixed loops back, stuck goes to triage.
    assert review.edges["fix/__exit_fixed"].to == "review"
    assert review.edges["fix/__exit_stuck"].to == "triage"
    assert {s.name for s in review.sources if s.kind == "builtin"} == {"review", "repair"}


@pytest.mark.parametrize("name", ["review", "repair", "demo"])
def test_loops_are_bounded_by_an_explicit_max_steps(
        name: str, definitions: dict[str, WorkflowDefinition],
        compiled: dict[str, CompileResult]) -> None:
    result = compiled[name]
    assert result.graph is not None
    assert not nx.is_directed_acyclic_graph(result.graph), f"{name} should loop"
    assert definitions[name].max_steps < DEFAULT_MAX_STEPS
    assert result.text is not None
    assert "max_steps:" in result.text


def test_review_routes_every_verdict_and_every_triage_choice(
        definitions: dict[str, WorkflowDefinition]) -> None:
    review = definitions["review"]
    output = review.nodes["review"].spec.to_json()["output"]
    verdicts = set(output["properties"]["verdict"]["enum"])
    assert set(review.edges["review"].cases) == verdicts
    triage = review.nodes["triage"].spec
    assert isinstance(triage, AgentSpec)
    assert set(review.edges["triage"].cases) == set(triage.choices)
    assert review.nodes["ask_human"].kind == "checkpoint"
    assert "ask_human" not in review.edges  # the run ends waiting for a human


def test_review_output_schema_requires_issues_for_changes(
        definitions: dict[str, WorkflowDefinition]) -> None:
    schema = definitions["review"].nodes["review"].spec.to_json()["output"]
    ok = {"verdict": "pass", "summary": "fine", "issues": []}
    jsonschema.validate(ok, schema)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({**ok, "verdict": "changes"}, schema)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({**ok, "verdict": "maybe"}, schema)


def test_shell_check_routes_every_routable_outcome(
        definitions: dict[str, WorkflowDefinition]) -> None:
    d = definitions["shell-check"]
    run = d.nodes["run"]
    assert isinstance(run.spec, ActionSpec)
    assert run.spec.use_shell
    assert run.spec.allow_nonzero_exit  # the exit status is routed on, output kept
    assert d.edges["run"].on == "$result.outcome"
    assert set(d.edges["run"].cases) == {"ok", "failed", "timed_out"}
    assert d.edges["judge"].on == "$.verdict"
    assert set(d.edges["judge"].cases) == {"passed", "failed", "explain"}


@pytest.mark.parametrize(("exit_code", "explain", "verdict", "end"), [
    (0, False, "passed", "passed"),
    (0, True, "passed", "passed"),
    (2, False, "failed", "report_failure"),
    (2, True, "explain", "diagnose"),
    (None, False, "failed", "report_failure"),  # killed by a signal
])
def test_shell_check_judges_the_exit_status(
        exit_code: int | None, explain: bool, verdict: str, end: str,
        definitions: dict[str, WorkflowDefinition]) -> None:
    d = definitions["shell-check"]
    run = {"exit_code": exit_code, "stdout": "3 passed\n", "stderr": "E boom\n",
           "truncated": False}
    ctx = {"input": {"command": "pytest -q", "explain": explain}, "outputs": {"run": run},
           "results": {"run": {"outcome": "ok"}}, "run": {}, "project": {}}
    out = render_native(d.nodes["judge"].spec.to_json()["expr"], ctx)
    assert out == {"verdict": verdict, "exit_code": exit_code}
    assert _route(d, "judge", out, "ok") == end
    if end == "report_failure":
        message = render_text(d.nodes[end].spec.to_json()["message"], ctx)
        assert message.startswith("✗ `pytest -q` failed with exit status")
        assert message.endswith("E boom")  # the end of stderr, with no diagnosis


def test_repair_keeps_the_failing_check_output_for_the_next_attempt(
        definitions: dict[str, WorkflowDefinition]) -> None:
    d = definitions["repair"]
    assert d.edges["verify"].on == "$result.outcome"
    assert d.edges["checked"].on == "$.passed"
    verify = {"exit_code": 1, "stdout": "1 failed", "stderr": "AssertionError: 200 != 500"}
    ctx = {"input": {"task": "t", "issues": [{"title": "Crash", "severity": "blocker"}],
                     "check": "pytest -q"},
           "outputs": {"verify": verify, "fix": {"summary": "Tried X."}},
           "results": {"verify": {"outcome": "ok"}}, "run": {}, "project": {}}
    assert render_native(d.nodes["checked"].spec.to_json()["expr"], ctx) == {"passed": False}
    prompt = render_text(d.nodes["fix"].spec.to_json()["prompt"], ctx)
    assert "1. Crash [blocker]" in prompt
    assert "did not pass the check" in prompt
    assert "AssertionError: 200 != 500" in prompt
    first = dict(ctx, outputs={}, results={})
    assert "did not pass" not in render_text(d.nodes["fix"].spec.to_json()["prompt"], first)


def test_demo_needs_no_model_and_no_shell_interpreter(
        definitions: dict[str, WorkflowDefinition]) -> None:
    d = definitions["demo"]
    assert {n.kind for n in d.nodes.values()} <= {"compute", "action", "notify"}
    for node in d.nodes.values():
        if isinstance(node.spec, ActionSpec):
            assert isinstance(node.spec.shell, tuple)
            assert not node.spec.use_shell


# -- a tiny walker: renders the demo's templates the way the engine will ----------

def _route(d: WorkflowDefinition, nid: str, output: Any, outcome: str) -> str | None:
    edge = d.edges.get(nid)
    if edge is None:
        return None
    if edge.to is not None:
        return edge.to
    assert edge.on is not None
    value: Any = {"outcome": outcome} if edge.on.startswith("$result") else output
    for part in edge.on.split(".")[1:]:
        value = value[part]
    target = edge.cases.get(case_key(value), edge.default)
    assert target is not None, f"no case for {value!r} at {nid}"
    return target


def _walk_demo(d: WorkflowDefinition, run_input: dict[str, Any],
               machine_outcome: str) -> tuple[list[str], list[str]]:
    ctx: dict[str, Any] = {"input": run_input, "outputs": {}, "results": {},
                           "run": {}, "project": {}}
    messages, path = [], []
    nid: str | None = d.start
    while nid is not None:
        path.append(nid)
        assert len(path) <= d.max_steps
        node = d.nodes[nid]
        spec = node.spec.to_json()
        outcome, output = "ok", None
        if node.kind == "compute":
            output = render_native(spec["expr"], ctx)
        elif node.kind == "notify":
            messages.append(render_text(spec["message"], ctx))
            output = {"kind": spec["kind"]}
        elif node.kind == "action":
            argv = [render_text(a, ctx) for a in spec["shell"]]
            assert argv[0] == "uname"
            outcome = machine_outcome
            output = {"exit_code": 0, "stdout": "Linux 6.1 x86_64\n"} if outcome == "ok" else None
        ctx["results"][nid] = {"outcome": outcome, "output": output}
        if outcome == "ok":
            ctx["outputs"][nid] = output
        nid = _route(d, nid, output, outcome)
    return path, messages


@pytest.mark.parametrize("machine_outcome", ["ok", "failed", "timed_out"])
def test_demo_runs_to_a_final_report_whatever_the_command_does(
        machine_outcome: str, definitions: dict[str, WorkflowDefinition]) -> None:
    d = definitions["demo"]
    path, messages = _walk_demo(d, {"who": "Ada", "rounds": 2}, machine_outcome)
    assert path[-1] == "done"
    assert path.count("tick") == 2
    assert messages[0].startswith("Hello, Ada!")
    assert messages[-1].startswith("Demo finished for Ada: 2 rounds.")
    # Every round is reported, the last one too (issue 34 item 15: it never was).
    assert [m for m in messages if m.startswith("Round")] == [
        "Round 1 of 2 done.", "Round 2 of 2 done."]
    if machine_outcome == "ok":
        assert "Linux 6.1 x86_64" in messages[-1]
    else:
        assert machine_outcome in messages[-1]


def test_demo_loop_is_capped_below_max_steps(definitions: dict[str, WorkflowDefinition]) -> None:
    d = definitions["demo"]
    path, _ = _walk_demo(d, {}, "ok")  # defaults: world, 3 rounds
    assert path.count("tick") == 3
    path, _ = _walk_demo(d, {"rounds": 99}, "ok")  # the template clamps to 5
    assert path.count("tick") == 5
    assert len(path) <= d.max_steps
