"""MCP sessions: `wfrun mcp` (the `workflow` tool over the official MCP SDK), the
Claude Code hooks (`wfrun hook claude-code`) and `wfrun integrate claude-code`.

The hook path (hook.py, channel.py, sessionlog.py) imports only the standard
library: it runs on every prompt and stop. server.py loads the SDK and the session
controller."""
