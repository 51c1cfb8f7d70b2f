"""A gateway in the test's own process: the bot author's handlers, the real pipeline.

:class:`Bot` runs a whole Tether (inbox, lanes, checkpoint, outbox, the built-in agent)
on the loopback platform and an in-memory store, with a clock the test moves. Each of
its calls does what a person or the time of day does, then waits until everything that
caused has been handled and its replies sent, and returns those replies: no sleeps, no
polling, and nothing a test has to know about lanes::

    async with Bot(router) as bot:
        [reply] = await bot.say("/vote")
        [answer] = await bot.press(reply.button("Yes"), under=reply)
        assert answer.text == "Counted: yes"

What the handlers are given is the real thing: ``ctx.step`` is memoized in the store,
``ctx.llm`` talks to a :class:`~tether.testing.model.FakeModel` over HTTP through the
``openai`` SDK (with ``model=``), ``ctx.download`` returns the bytes of
:meth:`Bot.send_file`, and cron jobs and reminders fire through the scheduler's ledger
when :meth:`Bot.advance` moves the clock past their time.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import yaml

from tether.adapters.loopback import Delivery, LoopbackAdapter
from tether.buttons import Button
from tether.config import Settings, load_text
from tether.events import Event, OutMessage
from tether.files import Upload
from tether.gateway.app import Gateway
from tether.gateway.handler.routing import Router
from tether.memory.records import Turn
from tether.testing.model import FakeModel

#: What a :class:`Bot` runs on unless ``config`` says otherwise: nothing kept on disk, no
#: HTTP server, no terminal, everyone admitted (access is not what a handler test is
#: about), and retries that come back in milliseconds.
DEFAULTS: dict[str, Any] = {
    "memory": {"store": "memory://"},
    "http": {"enabled": False},
    "platforms": {"console": {"enabled": False}},
    "access": {"allow": ["*"], "rate_limit": {"messages": 0}},
    "pipeline": {"backoff_base": 0.01, "backoff_max": 0.05},
    "outbox": {"backoff_base": 0.01, "backoff_max": 0.05},
}
#: How long one call waits for what it caused (a handler stuck longer fails the test).
WAIT = 30.0


@dataclass(frozen=True, slots=True)
class Reply:
    """One message the bot sent: its text, buttons and files, and where it went."""

    text: str
    chat: str
    buttons: list[list[Button]]
    files: tuple[Upload, ...]
    #: The platform's id of the message (what a press on its buttons names).
    platform_id: str
    message: OutMessage

    @classmethod
    def of(cls, delivery: Delivery) -> Reply:
        message = delivery.message
        return cls(
            text=message.text,
            chat=message.target.chat_id,
            buttons=[list(row) for row in message.buttons],
            files=delivery.files,
            platform_id=delivery.platform_id,
            message=message,
        )

    def button(self, text: str) -> Button:
        """The button labelled ``text``; KeyError naming the labels there are."""
        for row in self.buttons:
            for button in row:
                if button.text == text:
                    return button
        labels = [button.text for row in self.buttons for button in row]
        raise KeyError(f"no button {text!r} under this reply (there are {labels})")


class Clock:
    """The time cron jobs and reminders see: where the test put it."""

    def __init__(self, now: datetime) -> None:
        if now.tzinfo is None:
            raise ValueError("the clock needs an aware datetime (tzinfo=UTC)")
        self.now = now.astimezone(UTC)

    def __call__(self) -> datetime:
        return self.now


class Bot:
    """A Tether for a test. ``routers`` are the handlers under test, included like
    plugins (before the built-in commands and agent); ``config`` is merged over
    :data:`DEFAULTS` (any ``tether.yaml`` section); ``model`` answers ``ctx.llm`` and
    makes the built-in agent the ``llm`` one; ``now`` starts the clock (default: the
    current minute)."""

    def __init__(
        self,
        *routers: Router,
        config: Mapping[str, Any] | None = None,
        model: FakeModel | None = None,
        now: datetime | None = None,
    ) -> None:
        self.routers = routers
        self.model = model
        self.clock = Clock(now or datetime.now(UTC).replace(second=0, microsecond=0))
        self.adapter = LoopbackAdapter(edits=True)
        self.settings = _settings(config or {}, model)
        self.replies: list[Reply] = []
        self._gateway: Gateway | None = None

    @property
    def gateway(self) -> Gateway:
        if self._gateway is None:
            raise RuntimeError("the bot is not started (use `async with Bot(...) as bot`)")
        return self._gateway

    async def start(self) -> None:
        self._gateway = Gateway(
            self.settings, {"loopback": self.adapter}, plugins=self.routers, clock=self.clock
        )
        await self._gateway.start()

    async def stop(self) -> None:
        if self._gateway is not None:
            await self._gateway.stop()
            self._gateway = None

    async def __aenter__(self) -> Bot:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    # -- what a person does ------------------------------------------------------------

    async def say(
        self, text: str, *, user: str = "u1", chat: str | None = None, group: bool = False
    ) -> list[Reply]:
        """``user`` sends ``text`` (a ``/command`` too): in a direct chat, or in the
        group ``chat`` with ``group=True``. The replies it caused, in order."""
        where, kind = _chat(user, chat, group)
        return await self._deliver(self.adapter.event(text, chat=where, user=user, chat_type=kind))

    async def press(
        self, button: Button | str, *, under: Reply | None = None, user: str = "u1"
    ) -> list[Reply]:
        """``user`` presses ``button`` (or sends that callback data) on the message
        ``under`` (default: the newest reply in their direct chat)."""
        data = button if isinstance(button, str) else button.data
        if data is None:
            raise ValueError("a URL button opens a link: there is nothing to press")
        message = under or next((r for r in reversed(self.replies) if r.chat == user), None)
        chat = message.chat if message else user
        event = self.adapter.press(
            data, chat=chat, user=user, message_id=message.platform_id if message else None
        )
        return await self._deliver(event)

    async def send_file(
        self,
        data: bytes,
        *,
        name: str = "file",
        kind: str = "document",
        mime: str | None = None,
        caption: str = "",
        user: str = "u1",
        chat: str | None = None,
        group: bool = False,
    ) -> list[Reply]:
        """``user`` sends a file (``kind``: photo, document, voice, …) with an optional
        caption; ``ctx.download`` of its attachment returns ``data``."""
        where, chat_type = _chat(user, chat, group)
        attachment = self.adapter.attach(data, name=name, kind=kind, mime=mime)
        event = self.adapter.event(
            caption, chat=where, user=user, chat_type=chat_type, attachments=[attachment]
        )
        return await self._deliver(event)

    # -- what the time of day does -----------------------------------------------------

    async def advance(
        self, by: timedelta | None = None, *, to: datetime | None = None
    ) -> list[Reply]:
        """Move the clock ``by`` a duration or ``to`` a moment; every cron job and
        reminder due on the way fires at its time, in order, as if the time had passed
        (through the scheduler's ledger: each fire once), and every question
        (``ctx.ask``, an approval) whose deadline passed expires. The replies they caused."""
        if (by is None) == (to is None):
            raise ValueError("advance by a duration or to a moment, one of them")
        end = to.astimezone(UTC) if to is not None else self.clock.now + (by or timedelta())
        if end < self.clock.now:
            raise ValueError("the clock does not go back")
        before = len(self.replies)
        while (moment := self._next_fire(end)) is not None:
            self.clock.now = moment
            await self._wake()
        self.clock.now = end
        await self._wake()
        return self.replies[before:]

    # -- what a test reads -------------------------------------------------------------

    async def history(
        self, *, user: str = "u1", chat: str | None = None, group: bool = False, limit: int = 50
    ) -> list[Turn]:
        """The conversation's stored history (what the agent remembers), oldest first."""
        return await self.gateway.store.history(self.conversation(user, chat, group), limit)

    async def facts(
        self, *, user: str = "u1", chat: str | None = None, group: bool = False
    ) -> list[str]:
        """The facts the conversation keeps (``ctx.memory.remember``, /remember)."""
        found = await self.gateway.store.facts(self.conversation(user, chat, group))
        return [fact.text for fact in found]

    def conversation(self, user: str = "u1", chat: str | None = None, group: bool = False) -> str:
        """The conversation key (memory and lane) of what ``user`` says there."""
        where, chat_type = _chat(user, chat, group)
        event = self.adapter.event("", chat=where, user=user, chat_type=chat_type)
        return event.session(self.settings.agent.group_sessions)

    # -- the machinery -----------------------------------------------------------------

    async def _deliver(self, event: Event) -> list[Reply]:
        before = len(self.replies)
        await self.adapter.deliver(event)
        await self._settle()
        return self.replies[before:]

    async def _settle(self) -> None:
        """Everything accepted is handled and its replies are sent (the same drain as
        ``tether chat`` at its end); new reminders are picked up."""
        gateway = self.gateway
        await gateway.drain(ingress_done=True)
        if gateway.reminders is not None:
            await gateway.reminders.sync()
        seen = {reply.platform_id for reply in self.replies}
        self.replies += [Reply.of(d) for d in self.adapter.sent if d.platform_id not in seen]

    def _schedulers(self) -> list[Any]:
        gateway = self.gateway
        found = [gateway.scheduler]
        if gateway.reminders is not None:
            found.append(gateway.reminders.scheduler)
        return [scheduler for scheduler in found if scheduler is not None]

    def _next_fire(self, end: datetime) -> datetime | None:
        """The earliest fire of any job after the clock, up to ``end``."""
        moments = [
            moment
            for scheduler in self._schedulers()
            for job in scheduler.jobs.values()
            if (moment := job.schedule.next_after(self.clock.now)) is not None and moment <= end
        ]
        return min(moments, default=None)

    async def _wake(self) -> None:
        for scheduler in self._schedulers():
            for job_id in list(scheduler.jobs):
                await scheduler.wake(job_id)
        await self.gateway.waits.expire()  # ctx.ask and approvals past their deadline
        await self._settle()


def _chat(user: str, chat: str | None, group: bool) -> tuple[str, Any]:
    """Where a person says something: their direct chat (named like them) or a group."""
    if group:
        return chat or "group", "group"
    return chat or user, "dm"


def _settings(config: Mapping[str, Any], model: FakeModel | None) -> Settings:
    data = _merge(DEFAULTS, dict(config))
    if model is not None:
        if not model.url:
            raise RuntimeError("start the model first (`async with FakeModel(...) as model`)")
        extra: dict[str, Any] = {"llm": model.section()}
        if "handler" not in data.get("agent", {}):
            extra["agent"] = {"handler": "llm"}
        data = _merge(data, extra)
    return load_text(yaml.safe_dump(data))  # errors name the key path, as for a file


def _merge(base: Mapping[str, Any], extra: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in extra.items():
        current = out.get(key)
        if isinstance(value, Mapping) and isinstance(current, Mapping):
            out[key] = _merge(current, value)
        else:
            out[key] = value
    return out


__all__ = ["DEFAULTS", "Bot", "Clock", "Reply"]
