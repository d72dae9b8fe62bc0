"""Shell actions moved into `procs.py` (one process-group runner, one kill policy);
these names stay importable from here for older imports."""

from __future__ import annotations

from .procs import POLL as POLL
from .procs import Ending as Ending
from .procs import ShellResult as ShellResult
from .procs import run_shell as run_shell

__all__ = ["POLL", "Ending", "ShellResult", "run_shell"]
