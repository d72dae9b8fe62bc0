"""No import circles between runner's modules (issue 36): a module that imports one
that imports it back cannot be read, tested or replaced on its own. Function-level
imports count too (grimp sees them)."""

from __future__ import annotations

import grimp
import networkx as nx


def test_no_import_circles_between_modules() -> None:
    graph = grimp.build_graph("runner", include_external_packages=False)
    edges = nx.DiGraph()
    for module in graph.modules:
        for imported in graph.find_modules_directly_imported_by(module):
            edges.add_edge(module, imported)
    circles = [frozenset(c) for c in nx.strongly_connected_components(edges) if len(c) > 1]
    assert circles == [], f"import circles: {[sorted(c) for c in circles]}"
