"""YAML source -> validated definition -> NetworkX graph + digest (DESIGN §3).

Pure apart from reading files: no processes, network or databases.
"""

from __future__ import annotations

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
