"""Plugins of the handler-state tests (tests/gateway/handler): a counter in chat_data."""
