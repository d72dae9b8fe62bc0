"""`wfrun` commands: parse arguments, call one runtime function, render the result."""

from __future__ import annotations

import os
import sys


def main() -> None:
    """The console script. Two commands Claude Code runs skip click and every command
    module, when spelled exactly as `wfrun integrate claude-code` writes them:
    `wfrun hook claude-code` on each prompt and stop (runner/host/mcp/_hook.py), and
    `wfrun mcp --client claude-code`, which must answer within Claude's wait
    (runner/cli/mcpserve.py)."""
    if sys.argv[1:] == ["hook", "claude-code"]:
        from runner.host.mcp._hook import main as hook_main

        sys.exit(hook_main())
    if sys.argv[1:] == ["mcp", "--client", "claude-code"] and not any(
            key.startswith("WFRUN_MCP_") for key in os.environ):  # click's option variables
        from .mcpserve import fast_main

        fast_main()
        return
    from .app import main as app_main

    app_main()


__all__ = ["main"]
