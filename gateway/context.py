"""What a handler gets: the event, its memory, and the only ways to act on the world.

Handlers never touch the store or an adapter. ``reply``/``send`` queue outbox rows that
are committed with the checkpoint; ``step`` runs a costly call once per event, across
retries and crashes; ``llm`` asks the configured models, through ``step`` and within the
event's token budget.
"""

from __future__ import annotations

import functools
import inspect
import json
from collections.abc import Callable
from typing import Any, Literal, TypeVar

import structlog

from tether.events import REPLY_META, Event, OutMessage, Target
from tether.gateway import metrics
from tether.gateway.llm import LLM, TaskLLM
from tether.memory.conversation import ConversationMemory
from tether.memory.store import Store

T = TypeVar("T")
Format = Literal["plain", "html", "markdown"]


class Context:
    def __init__(
        self,
        event: Event,
        conversation: str,
        attempt: int,
        store: Store,
        log: structlog.typing.FilteringBoundLogger,
        platforms: frozenset[str],
        llm: LLM | None = None,
    ) -> None:
        self.event = event
        self.conversation = conversation
        self.attempt = attempt
        self.log = log
        self.memory = ConversationMemory(store, conversation)
        self.outbox: list[OutMessage] = []
        self.data: dict[str, Any] = {}
        self._store = store
        self._platforms = platforms
        self._step_names: set[str] = set()
        self._llm = llm

    @functools.cached_property
    def llm(self) -> TaskLLM:
        """The LLM with this event's budget. Made on first use: it refers back to the
        context, and that cycle would otherwise leave every event for the garbage
        collector instead of freeing it when the event is done."""
        return TaskLLM(self._llm, self)

    async def reply(self, text: str, *, quote: bool = True, format: Format = "plain") -> None:
        """Answer in the event's chat (and thread), quoting the message when ``quote``."""
        target = self.event.conversation.target()
        reply_to = self.event.message_id if quote else None
        # An adapter may ask for data on every reply (Discord: the token of the slash
        # command being answered); it travels in OutMessage.meta to its send().
        meta = self.event.meta.get(REPLY_META)
        await self.send(
            target,
            text,
            reply_to=reply_to,
            format=format,
            meta=dict(meta) if isinstance(meta, dict) else None,
        )

    async def send(
        self,
        target: Target | str,
        text: str,
        *,
        reply_to: str | None = None,
        format: Format = "plain",
        meta: dict[str, Any] | None = None,
    ) -> None:
        """Queue a message to any chat, e.g. ``"telegram:12345"``; sent after checkpoint."""
        if isinstance(target, str):
            target = Target.parse(target)
        if target.platform not in self._platforms:
            raise ValueError(f"no enabled platform {target.platform!r} to send to")
        if not text:
            return
        self.outbox.append(
            OutMessage(target=target, text=text, reply_to=reply_to, format=format, meta=meta or {})
        )

    async def step(self, name: str, fn: Callable[[], Any]) -> Any:
        """Run ``fn`` once for this event; a re-run after a retry or crash gets its result.

        ``fn`` may be sync or async. The result is stored as JSON and returned as
        JSON-decoded data on every run (first or cached), so both paths see the same value.
        """
        if name in self._step_names:
            raise ValueError(f"step {name!r} used twice in one handler run")
        self._step_names.add(name)
        if self.attempt > 1:
            cached = await self._store.step(self.event.key, name)
            if cached is not None:
                self.log.info("step.cached", step=name)
                metrics.STEPS_CACHED.inc()
                return json.loads(cached)
        result = fn()
        if inspect.isawaitable(result):
            result = await result
        encoded = json.dumps(result)
        await self._store.save_step(self.event.key, name, encoded)
        self.log.info("step.saved", step=name)
        return json.loads(encoded)
