"""Tools the model may call: what a tool is (:mod:`.spec`), where tools come from
(Python functions on a Router, the built-ins, MCP servers), and how a call runs exactly
once per event."""
