"""Rooms: agents in one group chat hear each other through the gateway.

Telegram never delivers one bot's message to another bot, and where a platform does
(Discord, Feishu) :class:`~tether.gateway.agent.accounts.AccountInbox` drops that copy, so
the relay here is the one path by which an agent hears another. When an agent's reply
to a group chat has reached the platform (the outbox calls :meth:`Rooms.delivered`
before it marks the row), every other agent with an account on that platform gets it
as an event keyed ``room:{outbox key}:{agent}``: a resend, a restart or a second
instance relays it again and the inbox admits it once. Relayed before the row is
marked, so a crash in between leaves the row ``sending``; the restart then relays it
(again: a duplicate) whatever it decides about the send itself.

Each agent decides as for a person (``respond_to_agents``: ``mentioned`` — its name or
an alias appears —, ``all`` or ``never``); an agent it does not address is not given
the event at all. A relay is the gateway's own: it passes ``access:`` and skips the
per-sender flood limit. Loop guards (a stop by either of the first two is one
``room.guard`` log line naming the guard and why, and a ``tether_room_guard_total{guard}``
count):

- ``max_agent_turns``: a chain of agent messages since the last human message is at
  most this long. A relayed message carries its depth (``meta.room.depth``); a message
  of depth ``rooms.max_agent_turns`` is sent but relayed to no one.
- ``agent_rate``: at most this many agent messages per room and minute are relayed.
- ``self``: an agent never hears (so never answers) its own message.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections import defaultdict, deque
from collections.abc import Mapping
from typing import Any

import structlog
from prometheus_client import Counter

from tether.adapters.base import Adapter
from tether.backoff import equal_jitter
from tether.config.agents import AgentSpec
from tether.config.schema import Settings
from tether.events import Conversation, Event, Kind, Sender
from tether.gateway.agent.accounts import AGENT, AGENT_EVENTS, AccountInbox, split_account
from tether.gateway.core.edits import action_of
from tether.gateway.core.inbox import Inbox
from tether.keys import OutboxKey, room_key
from tether.memory.records import OutboxRow

log = structlog.get_logger("tether.rooms")

RELAYS = Counter("tether_room_relays_total", "Agent messages relayed to another agent", ["agent"])
GUARDS = Counter("tether_room_guard_total", "Agent messages a loop guard kept back", ["guard"])
#: ``Event.meta`` key of a relayed message: ``{"depth", "from", "outbox"}``.
ROOM = "room"
WINDOW = 60.0


class Rooms:
    """The relay between the agents of one gateway, and its loop guards."""

    def __init__(self, settings: Settings, inbox: Inbox, adapters: Mapping[str, Adapter]) -> None:
        self.config = settings.rooms
        self.inbox = inbox
        #: Relays skip the per-sender flood limit (``access.rate_limit``): an agent's
        #: messages are paced by the room guards, and a throttled relay would be
        #: answered with the flood notice, in the room.
        self.relays = Inbox(inbox.store, inbox.dispatcher, inbox.group_sessions)
        self.adapters = adapters
        self.agents: dict[str, AgentSpec] = {spec.name: spec for spec in settings.agents}
        self._named = {
            spec.name: re.compile(
                r"(?<![\w@])@?(?:" + "|".join(re.escape(n) for n in spec.names()) + r")(?!\w)",
                re.IGNORECASE,
            )
            for spec in settings.agents
        }
        self._recent: defaultdict[str, deque[float]] = defaultdict(deque)

    def inbox_for(self, name: str, inbox: Inbox) -> Inbox:
        """What the adapter ``name`` accepts into: stamped with its account when it is
        an agent's (``telegram@alice``), the plain inbox otherwise."""
        agent = split_account(name)[1]
        if agent is None or agent not in self.agents:
            return inbox
        return AccountInbox(inbox, name, self.adapters[name], self._ours)

    def _ours(self, event: Event) -> bool:
        """A message the platform delivered from one of our agents' accounts."""
        sender = event.sender
        if sender is None or not sender.is_bot:
            return False
        for name, adapter in self.adapters.items():
            if split_account(name)[0] == event.platform and split_account(name)[1]:
                bot_id = getattr(adapter, "bot_id", None)
                if bot_id is not None and str(bot_id) == sender.id:
                    return True
        return False

    async def delivered(self, row: OutboxRow) -> None:
        """The outbox's hook: ``row`` reached (or may have reached) its chat. Never
        raises: a store failure is retried here, since the outbox must not send twice."""
        failures = 0
        while True:
            try:
                await self._relay(row)
                return
            except Exception as exc:
                failures += 1
                delay = equal_jitter(failures, 0.5, 30.0)
                log.error(
                    "room.relay_failed",
                    key=row.key,
                    attempt=failures,
                    error=f"{type(exc).__name__}: {exc}",
                    delay_s=delay,
                )
                await asyncio.sleep(delay)

    async def _relay(self, row: OutboxRow) -> None:
        message = row.message
        platform, speaker = split_account(message.target.platform)
        answered = OutboxKey.parse(row.key)
        if speaker is None or speaker not in self.agents or answered.dead:
            return
        if action_of(message) is not None:  # a deletion or a reaction says nothing to relay
            return
        source = await self.inbox.store.inbox_row(answered.event)
        if source is None:
            return
        origin = source.event
        same_chat = (
            split_account(origin.conversation.platform)[0] == platform
            and origin.conversation.chat_id == message.target.chat_id
            and origin.conversation.thread_id == message.target.thread_id
        )
        if not same_chat or origin.conversation.chat_type != "group":
            return  # a DM, or a message sent elsewhere (ctx.send): no room
        room = f"{platform}:{message.target.chat_id}" + (
            f":{message.target.thread_id}" if message.target.thread_id else ""
        )
        depth = _depth(origin) + 1
        rlog = log.bind(key=row.key, room=room, agent=speaker, depth=depth)
        listeners = [name for name in self.agents if name != speaker and self._has(name, platform)]
        if not listeners:
            return
        addressed = [name for name in listeners if self._answers(name, message.text)]
        if not addressed:
            rlog.debug("room.unaddressed", listeners=listeners)
            return
        if depth >= self.config.max_agent_turns:
            GUARDS.labels("max_agent_turns").inc()
            rlog.info(
                "room.guard",
                guard="max_agent_turns",
                addressed=addressed,
                why=f"{depth} agent messages in a row since the last human message"
                f" (rooms.max_agent_turns: {self.config.max_agent_turns})",
            )
            return
        if not self._within_rate(room, row.key):
            GUARDS.labels("agent_rate").inc()
            rlog.info(
                "room.guard",
                guard="agent_rate",
                addressed=addressed,
                why=f"more than {self.config.agent_rate} agent messages in this room"
                " within a minute (rooms.agent_rate)",
            )
            return
        events = [
            self._event(row, origin, platform, speaker, listener, depth) for listener in addressed
        ]
        accepted = await self.relays.accept(events)
        for listener, new in zip(addressed, accepted, strict=True):
            if new:
                RELAYS.labels(listener).inc()
                AGENT_EVENTS.labels(listener, "room").inc()
        rlog.info("room.relayed", to=addressed, new=sum(accepted))

    def _has(self, agent: str, platform: str) -> bool:
        return f"{platform}@{agent}" in self.adapters

    def _answers(self, agent: str, text: str) -> bool:
        """Whether ``agent`` takes another agent's message, as it would a person's."""
        mode = self.agents[agent].respond_to_agents
        if mode == "never":
            return False
        return mode == "all" or self._named[agent].search(text) is not None

    def _within_rate(self, room: str, key: str) -> bool:
        """Counts one agent message against the room's per-minute rate; False when over it."""
        now = time.monotonic()
        recent = self._recent[room]
        while recent and recent[0] <= now - WINDOW:
            recent.popleft()
        if len(recent) >= self.config.agent_rate:
            return False
        recent.append(now)
        return True

    def _event(
        self, row: OutboxRow, origin: Event, platform: str, speaker: str, listener: str, depth: int
    ) -> Event:
        message = row.message
        conversation = Conversation(
            platform=f"{platform}@{listener}",
            chat_id=message.target.chat_id,
            thread_id=message.target.thread_id,
            chat_type="group",
        )
        mentioned = self._named[listener].search(message.text) is not None
        meta: dict[str, Any] = {
            AGENT: listener,
            ROOM: {"depth": depth, "from": speaker, "outbox": row.key},
        }
        return Event(
            key=room_key(row.key, listener),
            platform=platform,
            kind=Kind.MESSAGE,
            conversation=conversation,
            sender=Sender(id=f"agent:{speaker}", name=speaker, is_bot=True),
            message_id=row.platform_id,
            text=message.text,
            mentions=[listener] if mentioned else [],
            mentions_bot=mentioned,
            meta=meta,
        )


def _depth(event: Event) -> int:
    """How many agent messages in a row led to ``event`` (0: a person's message)."""
    room = event.meta.get(ROOM)
    depth = room.get("depth") if isinstance(room, dict) else None
    return depth if isinstance(depth, int) else 0
