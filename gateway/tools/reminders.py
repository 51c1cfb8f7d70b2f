"""Built-in tools for reminders made in chat: ``schedule``, ``list_schedules`` and
``cancel_schedule`` (each switched by ``agent.tools``).

"Remind me every weekday at 9 to send the report" becomes a durable job of the chat
that asked, made by the person who asked (:mod:`tether.scheduler.reminders` stores and
fires it). All three are idempotent: ``schedule`` stores its reminder under an id made
from the event key and the call's place in the turn (``tool:R:I``), so a re-run after a
crash finds the same row instead of adding a second; cancelling twice cancels once.

Bounded by ``agent.tools.reminders`` (:mod:`tether.scheduler.bounds`): a recurring one
that would fire more often than ``min_interval`` is refused, and so is one past the
chat's (``per_chat``) or the person's (``per_person``) cap; the model reads why as the
call's result. A reminder made by a turn that dies afterwards stays: the tool step made
it durably, it is listed and cancellable like any other, and the caps bound what any
turn can leave behind.

Who may cancel from chat: the person who made the reminder, and the bot's admins
(``access.admins``, the owner who claimed the owner code, the console), for any
reminder that posts into the chat they are talking in. ``list_schedules`` shows the
chat's reminders, naming the maker of those someone else made.

A reminder's ``text`` is posted as it is, or with ``prompt: true`` it is a prompt for
the agent: at its time it runs as one agent turn in the conversation that made it, with
its memory (``fire_reminder`` in ``gateway/agent/cron.py``), and the agent's answer is
what the chat gets. (A flag rather than a second text argument: the schema stays small,
since every request that offers the tool pays for it, and ``text`` stays required.) In
that turn the tools act for the reminder's maker (:func:`sender_of`, :func:`as_person`),
not for the cron fire the event is: a prompt made by someone who is not an admin cannot
cancel others'.

Times the model may give ``schedule``: ``at`` as ISO-8601 (``2026-12-01T09:00``, in
``timezone`` when it has no offset) or relative (``+10m``, ``+2h``, ``+1d``, ``+1h30m``);
``cron`` as a crontab line (5 fields, 6 with seconds first, or ``@daily``) read in
``timezone`` (default UTC). Anything it cannot read goes back to the model as a
:class:`~.spec.ToolError` saying why.
"""

from __future__ import annotations

import dataclasses
import json
import re
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from tether.config.tools import RemindersConfig, ToolsConfig
from tether.cron import Schedule, stamp, zone
from tether.errors import ToolError
from tether.events import Event, Kind
from tether.gateway.builtin.access import Access, Patterns
from tether.gateway.handler.context import turn_of
from tether.gateway.handler.python_tool import python_tool
from tether.gateway.handler.tool import Tool
from tether.keys import TRUSTED_PLATFORMS, sender_name
from tether.memory.operator import PairingStore
from tether.memory.reminders import Reminder
from tether.scheduler.bounds import Refused, shortest_gap
from tether.scheduler.reminder_jobs import describe, what
from tether.scheduler.reminders import MAX_AHEAD, Reminders, new_reminder, reminder_id

if TYPE_CHECKING:
    from tether.gateway.handler.context import Context

_RELATIVE = re.compile(r"\+(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?")
MAX_TEXT = 2000
NAMES = ("schedule", "list_schedules", "cancel_schedule")


def parse_at(value: str, timezone: str, now: datetime) -> datetime:
    """``at`` as an aware UTC time, or a ToolError saying what is wrong."""
    text = value.strip()
    relative = _RELATIVE.fullmatch(text)
    if relative and any(relative.groups()):
        days, hours, minutes, seconds = (int(g or 0) for g in relative.groups())
        try:
            delta = timedelta(days=days, hours=hours, minutes=minutes, seconds=seconds)
        except OverflowError:
            raise ToolError(f"at {value!r}: too far ahead") from None
        if delta > MAX_AHEAD:
            raise ToolError(f"at {value!r}: at most {MAX_AHEAD.days} days ahead")
        return now + delta
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise ToolError(
            f"at {value!r}: expected ISO-8601 like 2026-12-01T09:00 (in timezone), or"
            " relative like +10m, +2h, +1d"
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=zone(timezone))
    moment = moment.astimezone(UTC)
    if moment <= now:
        raise ToolError(f"at {value!r} is in the past (now: {stamp(now)})")
    if moment - now > MAX_AHEAD:
        raise ToolError(f"at {value!r}: at most {MAX_AHEAD.days} days ahead")
    return moment


class ReminderTools:
    """``schedule``, ``list_schedules``, ``cancel_schedule`` over :class:`Reminders`."""

    label = "reminder tools"

    def __init__(
        self, config: ToolsConfig, reminders: Reminders, pairings: PairingStore | None = None
    ) -> None:
        self._config = config
        self.reminders = reminders
        #: Where the owner code's admins are kept (``access``); None: ``access.admins`` only.
        self._pairings = pairings
        self._tools = {tool.name: tool for tool in self._build()}

    def names(self) -> list[str]:
        return [name for name in self._tools if self._config.enabled(name)]

    async def tools(self, ctx: Context) -> list[Tool]:
        config = ctx.llm.settings.agent.tools if ctx.llm.configured else self._config
        return [tool for name, tool in self._tools.items() if config.enabled(name)]

    def _settings(self, ctx: Context) -> ToolsConfig:
        """The turn's ``agent.tools`` (reloaded, or an agent's own), else the start's."""
        return ctx.llm.settings.agent.tools if ctx.llm.configured else self._config

    async def _is_admin(self, ctx: Context) -> bool:
        if not ctx.llm.configured:
            return False
        access, event = ctx.llm.settings.access, as_person(ctx.event)
        if self._pairings is None:  # built without a store: the configured admins only
            return event.platform in TRUSTED_PLATFORMS or Patterns(access.admins).match(event)
        return await Access(access, self._pairings).is_admin(event)

    def _build(self) -> list[Tool]:
        reminders = self.reminders
        tools = self

        async def schedule(
            ctx: Context,
            text: str,
            at: str | None = None,
            cron: str | None = None,
            timezone: str | None = None,
            prompt: bool = False,
        ) -> str:
            """Schedule a reminder in this chat: once (``at``) or recurring (``cron``).

            (Only the line above and the arguments below reach the model: every word
            here is paid for in every request that offers the tool.)

            Args:
                text: What to post when it fires, e.g. "Send the weekly report".
                at: A one-off: ISO-8601 like 2026-12-01T09:00 (in timezone if it has no
                    offset) or relative like +10m, +2h, +1d.
                cron: Recurring: a crontab line, minute hour day month weekday (e.g.
                    "0 9 * * 1-5" is weekdays at 9:00), or @daily.
                timezone: IANA time zone like Europe/Berlin for at and cron; default UTC.
                prompt: true: text is a prompt you answer when it fires, with this
                    chat's memory; your answer is posted.
            """
            limits = tools._settings(ctx).reminders
            return await _schedule(reminders, ctx, text, at, cron, timezone, limits, prompt)

        async def list_schedules(ctx: Context) -> str:
            """List the reminders and recurring jobs scheduled in this chat, with ids."""
            found = await reminders.in_chat(ctx.event.conversation.target().key)
            if not found:
                return "no schedules in this chat"
            now, me = reminders.clock(), sender_of(ctx.event)
            return "\n".join(
                describe(reminder, now) + ("" if _made_by(reminder, me, ctx) else _by(reminder))
                for reminder in found
            )

        async def cancel_schedule(ctx: Context, id: str) -> str:
            """Cancel a reminder of this chat: one the person made (an admin: any).

            Args:
                id: Its id (r-...), as list_schedules or schedule showed it.
            """
            found = await reminders.store.reminder(id.strip())
            chat = ctx.event.conversation.target().key
            if found is None or found.status != "active" or found.target != chat:
                raise ToolError(f"no active schedule {id!r} in this chat (see list_schedules)")
            if not _made_by(found, sender_of(ctx.event), ctx) and not await tools._is_admin(ctx):
                raise ToolError(
                    f"{found.id} was made by someone else{_by(found)}: only they or one of"
                    " the bot's admins can cancel it"
                )
            cancelled = await reminders.cancel(found.id)
            if cancelled is None:  # cancelled meanwhile (the CLI, another turn)
                raise ToolError(f"no active schedule {id!r} in this chat (see list_schedules)")
            ctx.log.info("reminder.cancelled_by", reminder=found.id, sender=sender_of(ctx.event))
            return f"cancelled {cancelled.id}: {what(cancelled)}"

        return [
            _builtin(python_tool(schedule, idempotent=True)),
            _builtin(python_tool(list_schedules, idempotent=True)),
            _builtin(python_tool(cancel_schedule, idempotent=True)),
        ]


def _builtin(tool: Tool) -> Tool:
    return dataclasses.replace(tool, source="builtin")


def sender_of(event: Event) -> str:
    """Who made a reminder, as kept on it: ``platform:user`` ("" without a sender); in a
    prompt reminder's turn, its maker."""
    if _prompted(event):
        return str(event.meta["sender"])
    return sender_name(event) if event.sender is not None else ""


def as_person(event: Event) -> Event:
    """``event`` as its person's own: a prompt reminder's fire is on the trusted ``cron``
    platform, but its turn may do only what the reminder's maker may."""
    if not _prompted(event):
        return event
    return event.model_copy(update={"platform": str(event.meta["sender"]).partition(":")[0]})


def _prompted(event: Event) -> bool:
    return event.kind is Kind.CRON and bool(event.meta.get("prompt") and event.meta.get("sender"))


def _made_by(reminder: Reminder, sender: str, ctx: Context) -> bool:
    """``sender`` made it (a row from before senders were kept: made in this session)."""
    if reminder.sender:
        return reminder.sender == sender
    return reminder.conversation == ctx.conversation


def _by(reminder: Reminder) -> str:
    return f" (by {reminder.sender})" if reminder.sender else ""


async def _schedule(
    reminders: Reminders,
    ctx: Context,
    text: str,
    at: str | None,
    cron: str | None,
    timezone: str | None,
    limits: RemindersConfig | None = None,
    prompt: bool = False,
) -> str:
    limits = limits or RemindersConfig()
    text = text.strip()
    if not text:
        wanted = "the prompt you will be given" if prompt else "what to post"
        raise ToolError(f"text is empty: say {wanted} when it fires")
    if len(text) > MAX_TEXT:
        raise ToolError(f"text is {len(text)} characters; at most {MAX_TEXT}")
    if (at is None or not at.strip()) == (cron is None or not cron.strip()):
        raise ToolError("give exactly one of at (a one-off) or cron (recurring)")
    tz = (timezone or "UTC").strip() or "UTC"
    try:
        zone(tz)
    except ValueError as exc:
        raise ToolError(f"timezone: {exc}") from None
    now = reminders.clock()  # the scheduler's clock: a test may move it
    moment = None
    if at is not None and at.strip():
        moment = parse_at(at, tz, now)
    else:
        assert cron is not None
        cron = " ".join(cron.split())
        try:
            parsed = Schedule.parse(cron, tz)
        except ValueError as exc:
            raise ToolError(f"cron {cron!r}: {exc}") from None
        if parsed.next_after(now) is None:
            raise ToolError(f"cron {cron!r} never fires again")
        gap = shortest_gap(cron)
        if gap < limits.min_interval:
            raise ToolError(
                f"cron {cron!r} fires every {gap:g}s at its closest; a recurring reminder may"
                f" fire at most every {limits.min_interval:g}s"
                " (agent.tools.reminders.min_interval): use a slower schedule"
            )
    called = [text, at, cron, timezone] + ([True] if prompt else [])
    position = turn_of(ctx).tool_step or "call:" + json.dumps(called, ensure_ascii=False)
    made = new_reminder(
        reminder_id=reminder_id(ctx.event.key, str(position)),
        conversation=ctx.conversation,
        target=ctx.event.conversation.target().key,
        text=text,
        cron=cron if moment is None else None,
        at=moment,
        timezone=tz,
        event_key=ctx.event.key,
        created=now.timestamp(),
        sender=sender_of(ctx.event),
        prompt=bool(prompt),
    )
    try:
        stored = await reminders.add(made, limits)
    except Refused as exc:
        raise ToolError(f"not scheduled: {exc}") from None
    return "scheduled " + describe(stored, now)


def reminder_tools(
    config: ToolsConfig, reminders: Reminders | None, pairings: PairingStore | None = None
) -> ReminderTools | None:
    """The source, when the gateway runs reminders and any of the three is switched on;
    ``pairings`` is where the owner code's admins are (they may cancel from chat)."""
    if reminders is None or not any(config.enabled(name) for name in NAMES):
        return None
    return ReminderTools(config, reminders, pairings)
