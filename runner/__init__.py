"""wfrun: declarative, durable workflows for agent and automation work.

The public API is what `__all__` lists; every other module is private.
"""

from __future__ import annotations

from runner.compiler import (
    Compiler,
    CompileResult,
    Diagnostic,
    WorkflowDefinition,
    build_catalog,
    find_project_root,
)
from runner.errors import (
    ClaimLost,
    ConflictError,
    DefinitionInvalid,
    InputError,
    NotFoundError,
    OperationFailed,
    TemporaryError,
    WfrunError,
)

__version__ = "0.1.0"

__all__ = [
    "ClaimLost",
    "CompileResult",
    "Compiler",
    "ConflictError",
    "DefinitionInvalid",
    "Diagnostic",
    "InputError",
    "NotFoundError",
    "OperationFailed",
    "TemporaryError",
    "WfrunError",
    "WorkflowDefinition",
    "__version__",
    "build_catalog",
    "find_project_root",
]
