"""Slack: the pure normalizer over Slack's documented payload shapes (the adapter is in progress)."""
