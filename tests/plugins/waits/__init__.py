"""Plugins of the durable-wait tests (tests/gateway/waits): a dialog and an approval-gated tool."""
