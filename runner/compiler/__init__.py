"""YAML source -> validated definition -> NetworkX graph + digest (DESIGN §3).

Pure apart from reading files: no processes, network or databases.

The names below load on first use (PEP 562): `wfrun status` needs only
`discovery` (where the project is) and must not pay for YAML and Jinja2 because
the package was touched (issue 15, cold start).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from runner._lazy import lazy_names

if TYPE_CHECKING:
    from ._compile import Compiler, CompileResult
    from ._diagnostics import Diagnostic, render_text, summary_line
    from ._discovery import Catalog, find_project_root
    from ._model import (
        ActionSpec,
        AgentSpec,
        CheckpointSpec,
        ComputeSpec,
        Edge,
        FailSpec,
        HookRef,
        Node,
        NotifySpec,
        Source,
        WorkflowDefinition,
    )
    from ._workflows import build_catalog

#: public name -> the submodule that defines it
_LAZY: dict[str, str] = {
    **dict.fromkeys(("Compiler", "CompileResult"), "_compile"),
    **dict.fromkeys(("Diagnostic", "render_text", "summary_line"), "_diagnostics"),
    **dict.fromkeys(("Catalog", "find_project_root"), "_discovery"),
    "build_catalog": "_workflows",
    **dict.fromkeys(("ActionSpec", "AgentSpec", "CheckpointSpec", "ComputeSpec", "Edge",
                     "FailSpec", "HookRef", "Node",
                     "NotifySpec", "Source", "WorkflowDefinition"), "_model"),
}


__getattr__, __dir__ = lazy_names(__name__, _LAZY)


__all__ = [
    "ActionSpec",
    "AgentSpec",
    "Catalog",
    "CheckpointSpec",
    "CompileResult",
    "Compiler",
    "ComputeSpec",
    "Diagnostic",
    "Edge",
    "FailSpec",
    "HookRef",
    "Node",
    "NotifySpec",
    "Source",
    "WorkflowDefinition",
    "build_catalog",
    "find_project_root",
    "render_text",
    "summary_line",
]
