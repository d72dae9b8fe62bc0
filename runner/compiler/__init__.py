"""YAML source -> validated definition -> NetworkX graph + digest (DESIGN §3).

Pure apart from reading files: no processes, network or databases.

The names below load on first use (PEP 562): `wfrun status` needs only
`discovery` (where the project is) and must not pay for YAML and Jinja2 because
the package was touched (issue 15, cold start).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from runner.lazy import lazy_names

if TYPE_CHECKING:
    from .compile import Compiler, CompileResult, digest_of
    from .diagnostics import Diagnostic, render_text, summary_line
    from .discovery import (
        Catalog,
        CatalogEntry,
        build_catalog,
        builtin_folder,
        find_project_root,
        is_path_ref,
    )
    from .durations import format_duration, parse_duration
    from .model import (
        ActionSpec,
        AgentSpec,
        CheckpointSpec,
        ComputeSpec,
        Edge,
        FailSpec,
        HookRef,
        IncludeEntrySpec,
        IncludeExitSpec,
        Node,
        NotifySpec,
        Retry,
        Source,
        WorkflowDefinition,
    )

#: public name -> the submodule that defines it
_LAZY: dict[str, str] = {
    **dict.fromkeys(("Compiler", "CompileResult", "digest_of"), "compile"),
    **dict.fromkeys(("Diagnostic", "render_text", "summary_line"), "diagnostics"),
    **dict.fromkeys(("Catalog", "CatalogEntry", "build_catalog", "builtin_folder",
                     "find_project_root", "is_path_ref"), "discovery"),
    **dict.fromkeys(("format_duration", "parse_duration"), "durations"),
    **dict.fromkeys(("ActionSpec", "AgentSpec", "CheckpointSpec", "ComputeSpec", "Edge",
                     "FailSpec", "HookRef", "IncludeEntrySpec", "IncludeExitSpec", "Node",
                     "NotifySpec", "Retry", "Source", "WorkflowDefinition"), "model"),
}


__getattr__, __dir__ = lazy_names(__name__, _LAZY)


__all__ = [
    "ActionSpec",
    "AgentSpec",
    "Catalog",
    "CatalogEntry",
    "CheckpointSpec",
    "CompileResult",
    "Compiler",
    "ComputeSpec",
    "Diagnostic",
    "Edge",
    "FailSpec",
    "HookRef",
    "IncludeEntrySpec",
    "IncludeExitSpec",
    "Node",
    "NotifySpec",
    "Retry",
    "Source",
    "WorkflowDefinition",
    "build_catalog",
    "builtin_folder",
    "digest_of",
    "find_project_root",
    "format_duration",
    "is_path_ref",
    "parse_duration",
    "render_text",
    "summary_line",
]
