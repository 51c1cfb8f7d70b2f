"""The store seen by what serves the operator rather than an event: access's pairings,
``tether status`` and ``tether dead``, and the web console.

Like :mod:`tether.memory.roles`, one protocol per role whose methods are also
``abc.abstractmethod`` (see there why both); :class:`tether.memory.store.Store` is every
role of both modules.

- :class:`PairingStore`: who asked to talk to the bot and who was approved;
- :class:`ReportStore`: counts, spend, activity and dead letters, for status and the CLI;
- :class:`ConsoleStore`: the web console's reads (series, events, timelines, chats).
"""

from __future__ import annotations

import abc
from typing import Protocol

from tether.memory.console import ChatLine, ConversationInfo, EventInfo, SendInfo, Timeline
from tether.memory.records import DeadLetter, Fact, Pairing


class PairingStore(Protocol):
    """Access control's memory: pending pairing requests and approved senders."""

    @abc.abstractmethod
    async def pairing(self, platform: str, user_id: str) -> Pairing | None: ...

    @abc.abstractmethod
    async def request_pairing(self, platform: str, user_id: str, name: str, code: str) -> Pairing:
        """Record a pending request with ``code``, or return the sender's existing one."""

    @abc.abstractmethod
    async def approve_pairing(self, code: str) -> Pairing | None:
        """Approve the request with ``code`` (case-insensitive); None if there is none."""

    @abc.abstractmethod
    async def revoke_pairing(self, platform: str, user_id: str) -> bool: ...

    @abc.abstractmethod
    async def pairings(self) -> list[Pairing]: ...


class ReportStore(Protocol):
    """What ``tether status``, ``tether dead`` and the metrics read across all conversations."""

    @abc.abstractmethod
    async def counts(self) -> dict[str, dict[str, int]]:
        """``{"inbox": {status: n}, "outbox": {status: n}}``."""

    @abc.abstractmethod
    async def spend(self, since: str) -> dict[str, tuple[int, float]]:
        """LLM spend of every conversation from UTC day ``since`` on: model → (tokens, cost)."""

    @abc.abstractmethod
    async def spend_by_conversation(self, since: str) -> dict[str, tuple[int, float]]:
        """The same spend by conversation (its key) → (tokens, cost): what ``tether
        status`` adds up per agent."""

    @abc.abstractmethod
    async def activity(self) -> dict[str, dict[str, float]]:
        """Per platform: ``{"received": last inbound time, "sent": last delivery time}``."""

    @abc.abstractmethod
    async def dead_letters(self) -> list[DeadLetter]: ...

    @abc.abstractmethod
    async def dead_letter(self, key: str) -> DeadLetter | None: ...

    @abc.abstractmethod
    async def requeue(self, key: str) -> bool:
        """Send a dead event, or one waiting in ``retry_wait``, round again now (its
        attempts from zero), or a dead/unknown outbox row; False if none. A running
        gateway's sweep hands it to the lane, which runs a waiting one at once."""


class ConsoleStore(Protocol):
    """What the web console (``/ui``) reads, and the operator's own edits of facts.

    Reads are bounded (``limit``) and go straight to the tables, so a page costs one
    query per panel. The fact edits are an operator's action, like :meth:`ReportStore.requeue`:
    committed on their own, not in an event's checkpoint. The records are in
    :mod:`tether.memory.console`.
    """

    @abc.abstractmethod
    async def series(self, since: float, bucket: float, count: int) -> dict[str, list[float]]:
        """Per ``bucket`` seconds from ``since`` (``count`` buckets), each of
        :data:`~tether.memory.console.SERIES`: events received, replies sent, events that
        took more than one attempt, dead events, LLM tokens and cost."""

    @abc.abstractmethod
    async def find_events(
        self, *, key: str = "", conversation: str = "", status: str = "", limit: int = 50
    ) -> list[EventInfo]:
        """The newest events whose key and conversation contain the given text (empty:
        any) and whose status is ``status`` (empty: any), newest first."""

    @abc.abstractmethod
    async def timeline(self, key: str) -> Timeline | None: ...

    @abc.abstractmethod
    async def conversation_list(self, limit: int = 100) -> list[ConversationInfo]:
        """Conversations with events, the most recently active first."""

    @abc.abstractmethod
    async def chat_log(self, conversation: str, limit: int = 200) -> list[ChatLine]:
        """The conversation's last ``limit`` events and their delivered replies, in order."""

    @abc.abstractmethod
    async def facts_said(self, conversation: str) -> list[Fact]:
        """Every live fact said in ``conversation``, oldest first, whoever it is about (the
        chat, or the person who said it about themselves): what the operator edits there.
        A turn sees fewer (:meth:`~tether.memory.roles.MemoryRoles.facts`)."""

    @abc.abstractmethod
    async def edit_fact(self, conversation: str, fact_id: int, text: str, tokens: int) -> bool:
        """Replace a live fact's text; False if the conversation has no such fact."""

    @abc.abstractmethod
    async def forget_fact(self, conversation: str, fact_id: int) -> bool:
        """Delete a fact (as ``/forget`` does); False if the conversation has no such fact."""

    @abc.abstractmethod
    async def failed_sends(self, limit: int = 100) -> list[SendInfo]:
        """Replies that are ``dead`` or of ``unknown`` fate, newest first (requeue retries them)."""
