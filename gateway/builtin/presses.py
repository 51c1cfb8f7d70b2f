"""Button presses nobody handles: logged and let go, never answered with the agent.

A press is a ``callback`` event whose text is the button's data (``vote:yes``), not
something a person said: the ``llm`` agent must not answer it as a question, and a
press on a button from an older version of the bot (whose handler is gone) must not
fail. This router is included after the agent, so any ``@router.callback`` of a plugin
comes first; what reaches it is logged as ``callback.unhandled``. The platform has been
acknowledged at ingress already, so the button stops spinning either way.
"""

from __future__ import annotations

from tether.gateway.handler.context import Context
from tether.gateway.handler.routing import Router


def unhandled_presses() -> Router:
    """The last router: every press nothing else took, logged with its data."""
    router = Router("presses")

    @router.callback()
    async def unhandled(ctx: Context) -> None:
        ctx.log.info("callback.unhandled", data=ctx.event.text[:64])

    return router
