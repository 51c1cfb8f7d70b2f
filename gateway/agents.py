"""Built-in agents: what answers when no plugin handler matched.

``echo`` replies with the received text verbatim and records both turns in memory; it
is the default when no LLM is configured, and what the quick start talks to.
"""

from __future__ import annotations

from tether.gateway.context import Context
from tether.gateway.routing import Router


def echo_router() -> Router:
    router = Router("echo")

    @router.fallback
    async def echo(ctx: Context) -> None:
        text = ctx.event.text
        if not text:
            return
        ctx.memory.add("user", text)
        await ctx.reply(text)
        ctx.memory.add("assistant", text)

    return router
