"""Feishu/Lark: lark-oapi against a fake open platform, signed webhooks."""
