"""Built-in agents: what answers when no plugin handler matched.

``echo`` replies with the received text verbatim and records both turns in memory; it
is the default when no LLM is configured, and what the quick start talks to. The
commands every agent answers (``/help``, ``/start``…) are in
:mod:`tether.gateway.builtin.commands`, ahead of this fallback, so they are not echoed back.
With ``agent.on_edit: reanswer`` an edited message is echoed again, saying it is the
edited text; by default an edit is left alone (the first answer stands).
"""

from __future__ import annotations

from tether.config.schema import AgentConfig
from tether.events import Kind
from tether.gateway.handler.context import Context
from tether.gateway.handler.routing import Router

#: What a re-answered edit starts with (``agent.on_edit: reanswer``), for every agent, so
#: the person sees which version of their message the answer is about.
EDITED = "(answering your edited message)\n"


def echo_router(agent: AgentConfig | None = None) -> Router:
    router = Router("echo")

    @router.fallback
    async def echo(ctx: Context) -> None:
        text = ctx.event.text
        if not text:
            return
        ctx.memory.add("user", text)
        await ctx.reply(EDITED + text if ctx.event.kind is Kind.EDIT else text)
        ctx.memory.add("assistant", text)

    if agent is not None and agent.on_edit == "reanswer":
        router.on(Kind.EDIT)(echo)

    return router
