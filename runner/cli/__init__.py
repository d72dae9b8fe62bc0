"""`wfrun` commands: parse arguments, call one runtime function, render the result."""

from __future__ import annotations

import atexit
import gc
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
    # The imports make a great many objects and almost no garbage: the collector stays
    # off until the command is loaded (`app.WfrunGroup.get_command` freezes what they
    # made, which no later collection walks again, and turns it back on).
    gc.disable()
    from .app import main as app_main

    # At exit the interpreter's last collections walk, and free one by one, every object
    # the imports made (~25 ms of a host's exit here, ~5 ms with this): what is alive then
    # is frozen out of them instead. Commands close what they hold themselves (the store,
    # bundles, logs); registered first, this runs after every handler a later import
    # adds (atexit runs last-in first-out), so those still see a normal interpreter.
    atexit.register(gc.freeze)
    try:
        app_main()
    except SystemExit as exc:
        _leave(exc.code)
        raise
    _leave(0)


def _leave(code: object) -> None:
    """End the process once the exit handlers ran and stdout and stderr are flushed,
    without the interpreter's teardown: freeing every module and object one by one was
    ~4 ms of a host's exit (issue 37), and nothing a command needs happens in it (it
    closes what it holds itself; `test_cli_exit.py`). Only with no thread left that
    the interpreter would wait for, and an exit code (a message to print, or a flush
    that fails, takes the interpreter's own way out: the same code and text as ever)."""
    if code is None:
        code = 0
    threading = sys.modules.get("threading")
    if not isinstance(code, int) or (threading is not None and any(
            not t.daemon for t in threading.enumerate() if t is not threading.main_thread())):
        return
    atexit._run_exitfuncs()  # each handler once: they are cleared after running
    try:
        for stream in (sys.stdout, sys.stderr):
            if stream is not None:
                stream.flush()
    except (OSError, ValueError):
        return
    os._exit(code & 0xFF)


__all__ = ["main"]
