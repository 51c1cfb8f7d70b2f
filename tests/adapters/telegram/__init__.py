"""Telegram: python-telegram-bot against a fake Bot API."""
