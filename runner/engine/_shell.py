"""Shell actions moved into `procs.py` (one process-group runner, one kill policy);
these names stay importable from here for older imports."""

from __future__ import annotations

from ._procs import POLL as POLL
from ._procs import Ending as Ending
from ._procs import ShellResult as ShellResult
from ._procs import run_shell as run_shell

__all__ = ["POLL", "Ending", "ShellResult", "run_shell"]
