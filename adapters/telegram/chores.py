"""What the bot does right after updates are committed: stop button spinners, show "typing…".

A press is answered without text :data:`PRESS_GRACE` after its commit, unless its
handler says by then that it answers it itself (``ctx.answer``: :meth:`Chores.claim`):
Telegram takes one answer per press, so an early empty answer would leave the handler's
toast nowhere. A second is short enough that the spinner stops before anyone wonders,
and long enough for a handler that answers first thing. A redelivered press was
answered before (or its handler will not run again): it is answered at once.

Best effort and off the ingress path: each call runs as its own task, a failure is a
debug line, never a failed accept, and nothing is retried. "typing…" lasts ~5 s or until
the bot's next message, so it is sent once per chat per few seconds when a message for
the bot arrives (the core has no hook for "a handler is running" yet).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Sequence
from typing import Any

import structlog
from telegram.constants import ChatAction
from telegram.error import TelegramError

from tether import metrics
from tether.adapters.kit import describe
from tether.adapters.telegram.http import BotClient
from tether.adapters.telegram.send import chat_id
from tether.events import Event, Kind

log = structlog.get_logger("tether.telegram")

#: Telegram shows "typing…" for about 5 s; do not ask again sooner for the same chat.
_TYPING_EVERY = 4.0
#: How long a press waits for its handler to claim its answer before it is answered bare.
PRESS_GRACE = 1.0
#: Presses remembered as claimed; forgetting one only means an answer Telegram refuses.
_MAX_CLAIMS = 10_000
#: At most this many chores in flight; beyond it they are left out, not queued.
_MAX_CHORES = 256
#: Chats remembered for the typing interval; forgetting only means one more action.
_MAX_TYPING_CHATS = 10_000


class Chores:
    """The chore tasks in flight, and when "typing…" was last shown per conversation."""

    def __init__(self, bot: BotClient, *, typing: bool) -> None:
        self.bot = bot
        self.typing = typing
        self._tasks: set[asyncio.Task[None]] = set()
        self._typing_at: dict[str, float] = {}
        #: Presses whose handler answers them (ctx.answer): the grace answer skips them.
        self._claimed: set[str] = set()
        self.grace = PRESS_GRACE

    def after_accept(self, events: Sequence[Event], accepted: Sequence[bool]) -> None:
        """Answer every button press; "typing…" where a new message for the bot arrived."""
        now = time.monotonic()
        for event, fresh in zip(events, accepted, strict=True):
            if event.kind is Kind.CALLBACK:
                query_id = str(event.meta["callback_query_id"])
                self._run("answerCallbackQuery", self._answer(query_id, fresh, fresh))
            elif fresh and self._typing_due(event, now):
                conv = event.conversation
                self._run(
                    "sendChatAction",
                    self.bot.send_chat_action(
                        chat_id(conv.chat_id),
                        ChatAction.TYPING,
                        message_thread_id=int(conv.thread_id) if conv.thread_id else None,
                    ),
                )

    def claim(self, query_id: str) -> None:
        """The press's handler answers it (through the outbox): no bare answer for it."""
        if len(self._claimed) >= _MAX_CLAIMS:
            self._claimed.clear()
        self._claimed.add(query_id)

    async def _answer(self, query_id: str, fresh: bool, wait: bool) -> None:
        """Stop the button's spinner, after the grace where the handler may claim it; a
        redelivered press was answered already, and Telegram refuses a second answer
        (logged, harmless)."""
        if wait:
            await asyncio.sleep(self.grace)
            if query_id in self._claimed:
                self._claimed.discard(query_id)
                log.info("telegram.press_claimed", callback_query_id=query_id)
                return
        try:
            await self.bot.answer_callback_query(query_id)
        except TelegramError as exc:
            metrics.labelled(metrics.PRESS_ACKS, "telegram", "failed").inc()
            emit = log.warning if fresh else log.info
            emit("telegram.press_ack_failed", callback_query_id=query_id, error=describe(exc))
            return
        metrics.labelled(metrics.PRESS_ACKS, "telegram", "ok").inc()
        log.info("telegram.press_acked", callback_query_id=query_id, duplicate=not fresh)

    async def drain(self, timeout: float = 2.0) -> None:
        """Give the chores in flight ``timeout`` seconds, then cancel what is left."""
        tasks = list(self._tasks)
        if tasks:
            await asyncio.wait(tasks, timeout=timeout)
            for task in tasks:
                task.cancel()

    def _typing_due(self, event: Event, now: float) -> bool:
        """A new message for the bot, and no "typing…" sent to its chat for a few seconds."""
        conv = event.conversation
        if not self.typing or conv.chat_type == "channel":
            return False
        if event.kind not in (Kind.MESSAGE, Kind.COMMAND):
            return False
        if now - self._typing_at.get(conv.key, -_TYPING_EVERY) < _TYPING_EVERY:
            return False
        if len(self._typing_at) > _MAX_TYPING_CHATS:
            self._typing_at.clear()
        self._typing_at[conv.key] = now
        return True

    def _run(self, what: str, call: Awaitable[Any]) -> None:
        if len(self._tasks) >= _MAX_CHORES:
            if asyncio.iscoroutine(call):
                call.close()  # never awaited: close it, or Python warns about it
            return

        async def run() -> None:
            try:
                await call
            except TelegramError as exc:
                log.debug("telegram.chore_failed", call=what, error=describe(exc))

        task = asyncio.create_task(run(), name=f"telegram-{what}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
