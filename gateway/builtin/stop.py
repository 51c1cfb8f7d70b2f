"""The ``/stop`` command itself (the mechanism is :mod:`tether.gateway.core.stop`, which the
dispatcher imports and so must stay free of the handler machinery imported here)."""

from __future__ import annotations

from tether.gateway.core.stop import COMMAND, Turns, request
from tether.gateway.handler.context import Context
from tether.gateway.handler.routing import Router
from tether.messages import say


def stop_router(turns: Turns) -> Router:
    """``/stop``, included ahead of every router (behind the access middleware, so only
    someone who may talk to the bot can stop it), whatever the plugins define; ``turns``
    is the pipeline's registry of running turns."""
    router = Router("stop")

    @router.command(COMMAND)
    async def stop(ctx: Context) -> None:
        """Stop the conversation's running turn, or the one waiting to be tried again,
        and say which, once."""
        answer = "nothing_running"
        if turns.stop(ctx.conversation):
            answer = "stopped_answer"
        elif turns.stop_waiting(ctx.conversation):
            answer = "stopped_waiting"
        elif turns.store is not None:  # maybe in another process
            found = await request(turns.store, ctx.conversation, ctx.event.key)
            if found is not None:
                running = found.status == "running"
                answer = "stopped_answer" if running else "stopped_waiting"
        await ctx.reply(say(ctx.event, answer), quote=False)

    return router
