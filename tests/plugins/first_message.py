"""A plugin for tests/gateway/builtin/test_first_message.py: ``/help`` must list its commands, the
admin-only one to admins only (``plugins: ["tests.plugins.first_message:router"]``)."""

from __future__ import annotations

from tether import Context, Router

router = Router()


@router.command("weather")
async def weather(ctx: Context) -> None:
    """the forecast for a city"""
    await ctx.reply("sunny")


@router.command("reindex", admin=True)
async def reindex(ctx: Context) -> None:
    """rebuild the search index"""
    await ctx.reply("reindexed")
