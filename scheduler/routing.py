"""The built-in handler of cron fires (``Kind.CRON`` events), by the job's action:

- ``text``: send the text to every ``deliver`` target;
- ``handler``: call ``module:function`` with the :class:`Context` (``ctx.reply`` answers
  in the first target; ``ctx.event.meta["deliver"]`` lists them all);
- ``reflect``: the built-in reflection run (:mod:`tether.gateway.reflection`);
- ``prompt``: route the fire exactly as a user message with that text, in the first
  target's chat, would be routed — plugins' text handlers, then the built-in agent
  (``echo`` today, ``llm`` when configured). The agent sees that conversation's memory
  and works within the event's budget like for any message; its replies go to the first
  target and are copied to the others. ``ctx.event`` stays the cron event
  (``kind == Kind.CRON``, ``meta["job"]``), so an agent can tell a fire from a person.

Everything a handler sends is an outbox row committed with the checkpoint, so a failed
delivery is retried by the outbox without running the job again.
"""

from __future__ import annotations

from tether.config.jobs import ReflectConfig
from tether.errors import Fatal
from tether.events import Kind, Target
from tether.gateway.context import Context
from tether.gateway.reflection import reflect
from tether.gateway.routing import Router, call
from tether.scheduler.jobs import import_handler

ROUTER_NAME = "cron"


def with_jobs(routes: Router) -> Router:
    """``routes`` with cron fires handled first (prompts go back into ``routes``)."""
    root = Router("tether")
    root.include(cron_router(routes))
    root.include(routes)
    return root


def cron_router(routes: Router) -> Router:
    router = Router(ROUTER_NAME)

    @router.on(Kind.CRON)
    async def cron_fire(ctx: Context) -> None:
        meta = ctx.event.meta
        action = meta.get("action")
        targets = [Target.parse(spec) for spec in meta.get("deliver", [])]
        if action == "text":
            for target in targets:
                await ctx.send(target, ctx.event.text)
        elif action == "handler":
            try:
                handler = import_handler(str(meta.get("handler")))
            except (ImportError, AttributeError, TypeError) as exc:
                raise Fatal(f"job {meta.get('job')!r}: handler: {exc}") from None
            await handler(ctx)
        elif action == "prompt":
            await _prompt(ctx, routes, targets)
        elif action == "reflect":
            await reflect(ctx, ReflectConfig.model_validate(meta.get("reflect") or {}), targets)
        else:
            raise Fatal(f"cron event without a known action: {action!r}")

    return router


async def _prompt(ctx: Context, routes: Router, targets: list[Target]) -> None:
    as_message = ctx.event.model_copy(update={"kind": Kind.MESSAGE})
    resolved = routes.resolve(as_message)
    if resolved is None:
        ctx.log.warning("cron.unanswered", job=ctx.event.meta.get("job"))
        return
    route, middlewares = resolved
    before = len(ctx.outbox)
    await call(route, middlewares, ctx)
    primary = targets[0] if targets else None
    for message in ctx.outbox[before:]:
        if primary is not None and message.target == primary:
            for other in targets[1:]:
                await ctx.send(other, message.text, format=message.format)
