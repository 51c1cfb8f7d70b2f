"""Discord: discord.py against a fake REST API and gateway."""
