"""`wfrun` commands: parse arguments, call one runtime function, render the result."""

from __future__ import annotations

import sys


def main() -> None:
    """The console script. `wfrun hook claude-code` skips click and every command module:
    Claude Code runs it on each prompt and stop (runner/host/mcp/hook.py)."""
    if sys.argv[1:3] == ["hook", "claude-code"] and len(sys.argv) == 3:
        from runner.host.mcp.hook import main as hook_main

        sys.exit(hook_main())
    from .app import main as app_main

    app_main()


__all__ = ["main"]
