"""MCP sessions: `wfrun mcp` (the `workflow` tool over MCP's stdio transport), the
Claude Code hooks (`wfrun hook claude-code`) and `wfrun integrate claude-code`.

Two lean paths, both standard library only: the hook (hook.py, channel.py,
sessionlog.py) runs on every prompt and stop; the server's start (stdio.py,
serve.py) must answer `initialize` within Claude Code's wait, so it loads the
session (server.py: the controller, the launch layer, the store) only after the
handshake (ADR 0007)."""
