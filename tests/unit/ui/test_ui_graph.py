"""The server-side graph layout and SVG (ADR 0005)."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from typing import Any

from runner.ui._graph import GAP_Y, NODE_H, layout, render_svg

SVG = "{http://www.w3.org/2000/svg}"


def snapshot(nodes: list[str], edges: list[dict[str, Any]], start: str | None = None) -> Any:
    return {"start": start or nodes[0], "edges": edges,
            "nodes": {n: {"kind": "compute"} for n in nodes}}


def test_layers_follow_the_longest_forward_path() -> None:
    graph = layout(snapshot(["a", "b", "c", "d"], [
        {"from": "a", "switch": {"on": "$.v", "cases": {"x": "b", "y": "c"}, "default": None}},
        {"from": "b", "to": "d"}, {"from": "c", "to": "d"}]))
    layers = {n: p.layer for n, p in graph.nodes.items()}
    assert layers == {"a": 0, "b": 1, "c": 1, "d": 2}
    assert graph.nodes["b"].y == graph.nodes["c"].y == graph.nodes["a"].y + NODE_H + GAP_Y
    assert graph.nodes["b"].x != graph.nodes["c"].x
    assert not graph.back


def test_a_loop_is_a_back_edge_and_does_not_push_layers() -> None:
    graph = layout(snapshot(["work", "check", "done"], [
        {"from": "work", "to": "check"},
        {"from": "check", "switch": {"on": "$.ok", "cases": {"no": "work"}, "default": "done"}}]))
    assert graph.back == frozenset({("check", "work")})
    assert {n: p.layer for n, p in graph.nodes.items()} == {"work": 0, "check": 1, "done": 2}
    svg = ET.fromstring(render_svg(graph))
    classes = [p.get("class") for p in svg.iter(f"{SVG}path") if p.get("data-from")]
    assert sorted(classes) == ["edge", "edge", "edge back"]


def test_unreachable_nodes_are_still_drawn() -> None:
    graph = layout(snapshot(["a", "island"], []))
    assert set(graph.nodes) == {"a", "island"}


def test_every_piece_of_user_text_is_escaped_and_states_are_attributes() -> None:
    evil = '<script>alert(1)</script>"&\''
    graph = layout({"start": evil, "nodes": {evil: {"kind": "compute"}, "b": {"kind": "x"}},
                    "edges": [{"from": evil, "switch": {"on": "$.v",
                                                         "cases": {'<img onerror="x">': "b"},
                                                         "default": None}}]})
    text = render_svg(graph, {evil: "failed"})
    assert "<script>" not in text
    assert "<img" not in text
    svg = ET.fromstring(text)  # well-formed XML
    nodes = {g.get("data-node"): g.get("data-state") for g in svg.iter(f"{SVG}g")}
    assert nodes == {evil: "failed", "b": "pending"}
    labels = [t.text for t in svg.iter(f"{SVG}text") if t.get("class") == "edge-label"]
    assert labels == ['<img onerror="x">']


def _fanout_snapshot() -> dict[str, Any]:
    action = {"kind": "action", "spec": {"shell": ["echo"]}}
    return {"start": "reviews", "edges": [{"from": "reviews", "to": "files"}], "nodes": {
        "reviews": {"kind": "parallel", "spec": {"branches": {
            "style": action, "<b>x</b>": {"workflow": "deep-review", "input": {}}}}},
        "files": {"kind": "map", "spec": {"over": "{{ [1] }}", "as": "file", "do": action}}}}


def test_a_fan_out_node_draws_its_branches_or_body_and_its_items_progress() -> None:
    graph = layout(_fanout_snapshot())
    reviews, files = graph.nodes["reviews"], graph.nodes["files"]
    assert [b.label for b in reviews.bodies] == ["style: $ action",
                                                 "<b>x</b>: workflow deep-review"]
    assert [b.label for b in files.bodies] == ["each file: $ action"]
    # The box grows with its rows, and the next layer starts below it.
    assert reviews.h > files.h > NODE_H
    assert files.y == reviews.y + reviews.h + GAP_Y
    svg = ET.fromstring(render_svg(
        graph, {"reviews": "running", "files": "pending"},
        items={"reviews": {"ok": 1, "running": 1, "total": 2},
               "files": {"ok": 5, "failed": 1, "timed_out": 1, "running": 2, "pending": 1,
                         "total": 10}},
        branches={"reviews": {"style": "ok", "<b>x</b>": "running"}}))
    groups = {g.get("data-node"): g for g in svg.iter(f"{SVG}g") if g.get("class") == "fanout"}
    rows = [(r.get("data-branch"), r.get("data-state")) for r in groups["reviews"].iter(f"{SVG}g")
            if r.get("class") == "body"]
    assert rows == [("style", "ok"), ("<b>x</b>", "running")]  # escaped in, read back whole
    text = {n: "".join("".join(t.itertext()) for t in g.iter(f"{SVG}text")
                       if t.get("class") == "items-text") for n, g in groups.items()}
    assert text == {"reviews": "1 ok · 0 failed · 1 running of 2",
                    "files": "5 ok · 2 failed · 2 running of 10"}
    widths = {r.get("data-part"): int(r.get("width") or 0)
              for r in groups["files"].iter(f"{SVG}rect") if r.get("data-part")}
    track = next(int(r.get("width") or 0) for r in groups["files"].iter(f"{SVG}rect")
                 if r.get("class") == "items-track")
    assert widths["ok"] == round(track * 5 / 10)
    assert widths["failed"] == round(track * 2 / 10)
    assert widths["cancelled"] == 0
    assert "<b>" not in render_svg(graph)  # user text is escaped, never markup
