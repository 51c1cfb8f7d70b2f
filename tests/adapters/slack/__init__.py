"""Slack: the pure normalizer over Slack's documented payload shapes (adapter in progress)."""
