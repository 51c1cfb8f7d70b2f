"""The built-in handler of cron fires (``Kind.CRON`` events), by the job's action:

- ``text``: send the text to every ``deliver`` target;
- ``handler``: call ``module:function`` with the :class:`Context` (``ctx.reply`` answers
  in the first target; ``ctx.event.meta["deliver"]`` lists them all);
- ``reflect``: the built-in reflection run (:mod:`tether.gateway.agent.reflection`);
- a reminder made in chat (its handler is :data:`~tether.scheduler.reminder_jobs.FIRE`):
  its text posted where it was made, or for a prompt (``meta["prompt"]``) one agent turn
  routed as ``prompt`` below, in the conversation that made it (``reminder.prompted``);
  unless it was cancelled meanwhile (``reminder.skipped``); a one-off is then marked done;
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
from tether.gateway.agent.reflection import reflect
from tether.gateway.handler.context import Context
from tether.gateway.handler.plugins import import_handler
from tether.gateway.handler.routing import Router, call
from tether.memory.roles import ReminderStore
from tether.scheduler.reminder_jobs import FIRE, MARK

ROUTER_NAME = "cron"


def with_jobs(routes: Router, reminders: ReminderStore | None = None) -> Router:
    """``routes`` with cron fires handled first (prompts go back into ``routes``);
    ``reminders`` is where a reminder's fire reads whether it was cancelled."""
    root = Router("tether")
    root.include(cron_router(routes, reminders))
    root.include(routes)
    return root


def cron_router(routes: Router, reminders: ReminderStore | None = None) -> Router:
    router = Router(ROUTER_NAME)

    @router.on(Kind.CRON)
    async def cron_fire(ctx: Context) -> None:
        meta = ctx.event.meta
        action = meta.get("action")
        targets = [Target.parse(spec) for spec in meta.get("deliver", [])]
        if action == "text":
            for target in targets:
                await ctx.send(target, ctx.event.text)
        elif action == "handler" and meta.get("handler") == FIRE:
            await fire_reminder(ctx, reminders, routes)
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


async def fire_reminder(
    ctx: Context, reminders: ReminderStore | None, routes: Router | None = None
) -> None:
    """A reminder's fire: post its text in its chat, or give a prompt to the agent as
    one turn (in ``ctx.conversation``, the one that made it: the fire event carries its
    maker, :func:`~tether.scheduler.reminder_jobs.as_maker`), unless it was cancelled
    meanwhile; a one-off is then done. The turn's model calls are memoized steps of
    this event, so a re-run after a crash asks nothing twice."""
    meta = ctx.event.meta
    reminder_id = str(meta.get("reminder") or meta.get("job"))
    found = await reminders.reminder(reminder_id) if reminders is not None else None
    if found is not None and found.status == "cancelled":
        ctx.log.info("reminder.skipped", reminder=reminder_id, reason="cancelled")
        return
    targets = [Target.parse(spec) for spec in meta.get("deliver", [])]
    if meta.get("prompt") and routes is not None:
        ctx.log.info("reminder.prompted", reminder=reminder_id, conversation=ctx.conversation)
        await _prompt(ctx, routes, targets)
    else:
        for target in targets:
            await ctx.send(target, MARK + ctx.event.text)
    if (
        reminders is not None
        and found is not None
        and found.at is not None
        and await reminders.finish_reminder(reminder_id, "done")
    ):
        ctx.log.info("reminder.done", reminder=reminder_id)
