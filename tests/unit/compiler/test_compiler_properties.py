"""Property tests: random valid graphs compile deterministically; random damage to real
files only ever produces diagnostics."""

from __future__ import annotations

import io
import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest
from compiler_corpus import INVALID_FILES, VALID, VALID_FILES
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from ruamel.yaml import YAML

from runner.compiler import Compiler, render_text
from runner.compiler._model import OUTCOMES, RESERVED_NODE_IDS

SETTINGS = settings(max_examples=150, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])

# -- random valid workflows -------------------------------------------------------

node_ids = st.from_regex(r"[A-Za-z_][A-Za-z0-9_-]{0,7}", fullmatch=True).filter(
    lambda s: s not in RESERVED_NODE_IDS)


@st.composite
def node_bodies(draw: st.DrawFn, index: int) -> dict[str, Any]:
    kind = draw(st.sampled_from(["agent", "agent_full", "compute", "action", "notify",
                                 "checkpoint"]))
    body: dict[str, Any]
    if kind == "agent":
        body = {"agent": f"Step {index}: {{{{ input.task }}}}"}
    elif kind == "agent_full":
        body = {"agent": {"prompt": f"Step {index}", "reminders": draw(st.integers(0, 10)),
                          "output": {"type": "object", "required": ["route"],
                                     "properties": {"route": {"type": "string"}}}}}
    elif kind == "compute":
        body = {"compute": draw(st.sampled_from(["{{ 1 + 2 }}", "{{ input | length }}"]))}
    elif kind == "action":
        argv = draw(st.lists(st.text("abc-_ ./", min_size=1, max_size=6), min_size=1,
                             max_size=4))
        body = {"action": {"shell": argv, "allow_nonzero_exit": draw(st.booleans())}}
    elif kind == "notify":
        body = {"notify": {"kind": draw(st.sampled_from(["progress", "final"])),
                           "message": f"note {index}"}}
    else:
        body = {"checkpoint": draw(st.sampled_from([None, "Approve?", {"summary": "Go?"}]))}
    timeout = draw(st.sampled_from(["absent", "30s", "2m", "1h30m", None, 45]))
    if timeout != "absent":
        body["timeout"] = timeout
    if draw(st.booleans()):
        body["retry"] = {"attempts": draw(st.integers(1, 5)), "backoff": "1s"}
    return body


@st.composite
def workflows(draw: st.DrawFn) -> dict[str, Any]:
    """A reachable graph: a random tree from the start, plus random back edges."""
    ids = draw(st.lists(node_ids, min_size=1, max_size=8, unique=True))
    n = len(ids)
    children: dict[int, list[int]] = {i: [] for i in range(n)}
    for i in range(1, n):
        children[draw(st.integers(0, i - 1))].append(i)
    nodes = {ids[i]: draw(node_bodies(i)) for i in range(n)}
    edges: list[dict[str, Any]] = []
    for p in range(n):
        kids = [ids[c] for c in children[p]]
        source = ids[p]
        if not kids:
            if draw(st.booleans()):
                edges.append({"from": source, "to": ids[draw(st.integers(0, n - 1))]})
            continue
        if len(kids) == 1 and draw(st.booleans()):
            edges.append({"from": source, "to": kids[0]})
            continue
        style = draw(st.sampled_from(["path", "outcome", "decision", "choices"]))
        if style == "outcome" and len(kids) <= len(OUTCOMES):
            names = list(OUTCOMES[:len(kids)])
            on = "$result.outcome"
        else:
            names = [f"c{k}" for k in range(len(kids))]
            on = draw(st.sampled_from(["$.route", "$output.route", "$output.a.b", "$"]))
        if style == "choices":
            timeout = {k: v for k, v in nodes[source].items() if k in ("timeout", "retry")}
            nodes[source] = {"decision": {"question": "Which way?",
                                          "choices": dict(zip(names, kids, strict=True))},
                             **timeout}
            continue
        switch: dict[str, Any] = {"on": on, "cases": dict(zip(names, kids, strict=True))}
        if style == "decision":
            nodes[source] = {"decision": {"question": "Pick one.", "choices": names}}
            switch["on"] = draw(st.sampled_from(["$.route", "$output.route"]))
        if draw(st.booleans()):
            switch["default"] = ids[draw(st.integers(0, n - 1))]
        edges.append({"from": source, "switch": switch})
    wf: dict[str, Any] = {"start": ids[0], "nodes": nodes}
    if edges:
        wf["edges"] = edges
    if draw(st.booleans()):
        wf["max_steps"] = draw(st.integers(1, 500))
    if draw(st.booleans()):
        wf["defaults"] = {"timeout": draw(st.sampled_from(["5m", None]))}
    return wf


def _shuffled(value: Any, seed: int, keep: bool = False) -> Any:
    """The same data with every mapping's keys in another (deterministic) order.

    A decision's `choices` mapping keeps its order: the generated prompt lists the
    choices as written, so their order is part of the meaning.
    """
    if isinstance(value, dict):
        keys = list(value)
        if not keep:
            keys = keys[seed % len(keys):] + keys[:seed % len(keys)] if keys else keys
            keys.reverse()
        return {k: _shuffled(value[k], seed + 1, keep=k == "choices") for k in keys}
    if isinstance(value, list):
        return [_shuffled(v, seed + 1) for v in value]
    return value


def _block_yaml(data: Any) -> str:
    y = YAML(typ="safe", pure=True)
    y.default_flow_style = False
    buf = io.StringIO()
    y.dump(data, buf)
    return "# generated\n" + buf.getvalue()


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("props")
    (folder / "block").mkdir()
    (folder / "flow").mkdir()
    return folder


@SETTINGS
@given(wf=workflows(), seed=st.integers(0, 50))
def test_random_valid_graphs_compile_deterministically(workdir: Path, wf: dict[str, Any],
                                                       seed: int) -> None:
    block = workdir / "block" / "gen.yaml"
    block.write_text(_block_yaml(wf))
    flow = workdir / "flow" / "gen.yaml"  # JSON is YAML too: flow style, other key order
    flow.write_text(json.dumps(_shuffled(wf, seed)))

    compiler = Compiler()
    first = compiler.compile_path(block)
    assert first.valid, render_text(first.diagnostics, first.texts)
    assert first.diagnostics == []
    assert first.definition is not None
    assert first.graph is not None
    digest = first.definition.digest

    again = compiler.compile_path(block)  # cached in this compiler
    fresh = Compiler().compile_path(block)
    other = Compiler().compile_path(flow)
    assert again.definition is not None
    assert fresh.definition is not None
    assert other.definition is not None, render_text(other.diagnostics, other.texts)
    assert again.definition.digest == fresh.definition.digest == digest
    assert other.definition.digest == digest

    # The compiled graph is the generated one.
    d = first.definition
    assert set(d.nodes) == set(wf["nodes"])
    assert d.start == wf["start"]
    sources = {e["from"] for e in wf.get("edges", [])} | {
        nid for nid, body in wf["nodes"].items()
        if isinstance(body.get("decision", {}).get("choices"), dict)}
    assert set(d.edges) == sources
    for edge in wf.get("edges", []):
        compiled = d.edges[edge["from"]]
        if "to" in edge:
            assert compiled.to == edge["to"]
        else:
            assert dict(compiled.cases) == edge["switch"]["cases"]
            assert compiled.default == edge["switch"].get("default")
    expected_graph_edges = {(s, t) for s, e in d.edges.items() for t in e.targets}
    assert set(first.graph.edges) == expected_graph_edges


# -- random damage ----------------------------------------------------------------------

SPECIAL = [b"\t", b":", b": ", b"{", b"}", b"[", b"]", b"*a", b"&a ", b"!!python/name:os.system",
           b"\x00", b"\xff", b"\xc3", b"- ", b"\n  ", b"\"", b"'", b"{{", b"{%", b"%}", b"#",
           b"./", b".yaml", b"\r", b"\xef\xbb\xbf", b"<<: *a\n", b"? "]
CORPUS_BYTES = [(p.name, p.read_bytes()) for p in [*VALID_FILES, *INVALID_FILES]]
CODE_RE = re.compile(r"^[a-z0-9]+(-[a-z0-9]+)*$")


@st.composite
def mutants(draw: st.DrawFn) -> bytes:
    _, data = draw(st.sampled_from(CORPUS_BYTES))
    for _ in range(draw(st.integers(1, 4))):
        op = draw(st.sampled_from(["flip", "insert", "delete", "truncate", "duplicate",
                                   "special"]))
        at = draw(st.integers(0, len(data)))
        if op == "flip" and data:
            i = min(at, len(data) - 1)
            data = data[:i] + bytes([draw(st.integers(0, 255))]) + data[i + 1:]
        elif op == "insert":
            data = data[:at] + draw(st.binary(min_size=1, max_size=8)) + data[at:]
        elif op == "delete":
            data = data[:at] + data[at + draw(st.integers(1, 40)):]
        elif op == "truncate":
            data = data[:at]
        elif op == "duplicate":
            end = min(len(data), at + draw(st.integers(1, 80)))
            data = data[:end] + data[at:end] + data[end:]
        else:
            data = data[:at] + draw(st.sampled_from(SPECIAL)) + data[at:]
    return data


@pytest.fixture(scope="module")
def mutant_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of valid/ so hooks and included children resolve next to the mutant."""
    folder = tmp_path_factory.mktemp("mutants") / "valid"
    shutil.copytree(VALID, folder)
    return folder


@SETTINGS
@given(data=mutants())
def test_damaged_files_only_produce_diagnostics(mutant_dir: Path, data: bytes) -> None:
    path = mutant_dir / "mutant.yaml"
    path.write_bytes(data)
    result = Compiler().compile_path(path)  # must not raise, whatever the bytes
    lines = len(data.decode("utf-8", "replace").splitlines()) + 1  # YAML breaks on \r too
    for d in result.diagnostics:
        assert CODE_RE.match(d.code), d
        assert d.severity in ("error", "warning")
        assert d.message
        assert "\n" not in d.message
        assert d.line >= 0
        assert d.column >= 0
        if d.path == result.path:
            assert d.line <= lines + 1, d
    render_text(result.diagnostics, result.texts)
    if result.valid:
        assert result.definition is not None
        assert result.definition.digest.startswith("sha256:")
    else:
        assert result.errors
        assert result.definition is None


# -- type confusion ------------------------------------------------------------------

def _load_plain(path: Path) -> Any:
    from runner.compiler._yamlio import load

    return json.loads(json.dumps(load(path.read_text(encoding="utf-8-sig"), path.name)))


VALID_DATA = [_load_plain(p) for p in VALID_FILES]

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-10**6, 10**6) | st.floats(allow_nan=False)
    | st.sampled_from(["", " ", "a", "$.x", "$result.outcome", "./hooks.py:count_steps",
                       "json:dumps", "{{ x }}", "{{", "{% for %}", "30s", "-1s", "ok",
                       "./child_repair.yaml", "child_repair", "start", "a.b", "1h30m"])
    | st.text(max_size=6),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
        st.sampled_from(["prompt", "to", "from", "on", "cases", "agent", "shell", "call",
                         "x", "1", "workflow", "type"]) | st.text(max_size=4), inner,
        max_size=3),
    max_leaves=8)


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix]
    if isinstance(value, dict):
        for k, v in value.items():
            out += _paths(v, (*prefix, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            out += _paths(v, (*prefix, i))
    return out


@st.composite
def confused(draw: st.DrawFn) -> Any:
    data = json.loads(json.dumps(draw(st.sampled_from(VALID_DATA))))
    for _ in range(draw(st.integers(1, 3))):
        path = draw(st.sampled_from(_paths(data)))
        new = draw(json_values)
        if not path:
            data = new
            continue
        parent = data
        for part in path[:-1]:
            parent = parent[part]
        parent[path[-1]] = new
    return data


@SETTINGS
@given(data=confused())
def test_wrong_types_anywhere_only_produce_diagnostics(mutant_dir: Path, data: Any) -> None:
    path = mutant_dir / "confused.yaml"
    path.write_text(json.dumps(data))
    result = Compiler().compile_path(path)  # must not raise
    for d in result.diagnostics:
        assert CODE_RE.match(d.code), d
        assert d.path != result.path or d.line >= 1, d  # content problems are positioned
    render_text(result.diagnostics, result.texts)
    assert result.valid == (result.definition is not None)
