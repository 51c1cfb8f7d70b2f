"""The ``/stop`` command itself (the mechanism is :mod:`tether.gateway.core.stop`, which the
dispatcher imports and so must stay free of the handler machinery imported here)."""

from __future__ import annotations

from tether.gateway.core.stop import COMMAND, NOTHING_RUNNING, STOPPED_ANSWER, Turns, request
from tether.gateway.handler.context import Context
from tether.gateway.handler.routing import Router


def stop_router(turns: Turns) -> Router:
    """``/stop``, included ahead of every router (behind the access middleware, so only
    someone who may talk to the bot can stop it), whatever the plugins define; ``turns``
    is the pipeline's registry of running turns."""
    router = Router("stop")

    @router.command(COMMAND)
    async def stop(ctx: Context) -> None:
        """Stop the conversation's running turn and say so, once."""
        stopped = turns.stop(ctx.conversation)
        if stopped is None and turns.store is not None:  # maybe in another process
            stopped = await request(turns.store, ctx.conversation, ctx.event.key)
        await ctx.reply(STOPPED_ANSWER if stopped else NOTHING_RUNNING, quote=False)

    return router
