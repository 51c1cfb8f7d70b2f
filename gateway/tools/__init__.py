"""Tools the model may call: where tools come from (Python functions on a Router, the
built-ins, MCP servers, reminders), the toolbox that gathers them for a turn, the loop
that runs the model's calls, and how a call runs exactly once per event. What a tool
is lives a floor below, in :mod:`tether.gateway.handler.tool`, beside the Router that
registers Python tools."""
