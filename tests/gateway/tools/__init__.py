"""Tools: exactly-once calls, crashes mid-call, MCP servers."""
