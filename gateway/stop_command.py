"""The ``/stop`` command itself (the mechanism is :mod:`tether.gateway.stop`, which the
dispatcher imports and so must stay free of the handler machinery imported here)."""

from __future__ import annotations

from tether.gateway.context import Context
from tether.gateway.routing import Router
from tether.gateway.stop import (
    COMMAND,
    DATA_KEY,
    NOTHING_RUNNING,
    STOPPED_ANSWER,
    Turns,
    request,
)


def stop_router() -> Router:
    """``/stop``, included ahead of every router (behind the access middleware, so only
    someone who may talk to the bot can stop it), whatever the plugins define."""
    router = Router("stop")

    @router.command(COMMAND)
    async def stop(ctx: Context) -> None:
        """Stop the conversation's running turn and say so, once."""
        turns = ctx.data.get(DATA_KEY)
        if not isinstance(turns, Turns):
            await ctx.reply(NOTHING_RUNNING, quote=False)
            return
        stopped = turns.stop(ctx.conversation)
        if stopped is None and turns.store is not None:  # maybe in another process
            stopped = await request(turns.store, ctx.conversation, ctx.event.key)
        await ctx.reply(STOPPED_ANSWER if stopped else NOTHING_RUNNING, quote=False)

    return router
