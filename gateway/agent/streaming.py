"""A reply shown while the model writes it: one preview message, edited as text arrives.

The ``llm`` agent's answer is streamed (``gateway/llm/stream.py``) into a :class:`StreamedReply`:
once the model has been writing for :data:`FIRST_AFTER` seconds, a preview message is
sent, then edited with the text so far, at most once per the adapter's
``edit_interval`` (Telegram: about one edit a second per chat) and ``edit_limit``
times. A quick answer is simply sent when it is complete: no preview, no edits.

The preview is a courtesy; the answer itself is still the checkpointed outbox row. As
soon as the preview is sent its platform id is saved as the event's step
``stream:preview`` (durably, before anything else happens), and the final reply row
carries it (``meta[EDIT_META]``, ``gateway/core/edits.py``): the outbox delivers the first part of
the answer by *editing the preview*, and sends what is past the platform's limit as
more messages. An edit is idempotent, so every crash converges on one message with
the full text:

- killed mid-stream: the restart runs the event again, finds the saved id, and edits
  that same preview (while streaming again, and with the final row);
- killed after the model answered: the memoized step gives the answer back without a
  stream, and the final row still edits the saved preview;
- killed after the checkpoint: the outbox resends the edit row (edits are always safe
  to repeat, even on Telegram).

The one window left: a crash after the platform accepted the preview but before its
id was saved (one store write, milliseconds). The restart cannot know about that
message and sends a new preview, so a stale partial preview stays beside the answer.
Discord and Feishu close even that window: the preview is sent with the idempotency
key of ``{event}#preview`` (nonce, uuid), so sending it again returns the same message.
On Telegram it is the same window as any send's (docs/agent.md, "Streaming"), and so
is a preview send that failed ambiguously (a timeout): it is not tried again, the
answer goes as a message of its own, and if that preview did arrive it stays too.

A preview the platform refuses to edit for good (the person deleted it) ends the
previews (``stream.failed``); the final row still names it, and the outbox, finding its
edit refused, sends the answer as a new message under the row's own key
(``outbox.edit_refused``, ``gateway/core/edits.py``). So a failed preview costs only the
preview, also when it is deleted after the last preview edit or before a restart.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, Any

from tether import metrics
from tether.adapters.base import Adapter
from tether.errors import SendRetryable
from tether.events import EDIT_META, REPLY_META, OutMessage
from tether.gateway.handler.context import turn_of
from tether.keys import preview_key
from tether.redaction import redactor
from tether.text import split_text

if TYPE_CHECKING:
    from tether.gateway.handler.context import Context

#: The step that holds the preview's platform id (JSON string) once it is sent.
PREVIEW_STEP = "stream:preview"
#: Seconds the model must have been writing before a preview is worth sending: a quick
#: answer arrives as one message, without a preview that is replaced at once.
FIRST_AFTER = 1.0


class StreamedReply:
    """The ``llm`` agent's reply to one event: streamed into a preview where it can be,
    and in every case queued with :meth:`send` as the outbox row that finishes it."""

    def __init__(self, ctx: Context, adapter: Adapter | None, preview: str | None) -> None:
        self.ctx = ctx
        self.adapter = adapter  # None: not streamed (off, or the platform cannot edit)
        self.preview = preview  # the preview's platform id, once it exists
        event = ctx.event
        meta = event.meta.get(REPLY_META)
        self._meta: dict[str, Any] = dict(meta) if isinstance(meta, dict) else {}
        self._target = event.conversation.target()
        self._text = ""
        self._shown = ""
        self._first_at: float | None = None
        self._last_at = 0.0
        self._edits = 0
        self._wake = asyncio.Event()
        self._done = asyncio.Event()

    @classmethod
    async def open(cls, ctx: Context) -> StreamedReply:
        """The reply for ``ctx``'s event, with the preview an earlier run sent, if any."""
        event = ctx.event
        turn = turn_of(ctx)
        adapter = turn.adapters.get(event.conversation.platform)
        if adapter is None or not adapter.can_edit:
            return cls(ctx, None, None)
        preview = None
        if ctx.attempt > 1:
            stored = await turn.store.step(event.key, PREVIEW_STEP)  # read without running it
            preview = json.loads(stored) if stored else None
        meta = event.meta.get(REPLY_META)
        answering_interaction = isinstance(meta, dict) and "interaction" in meta
        stream = ctx.llm.settings.agent.streaming and not answering_interaction
        return cls(ctx, adapter if stream or preview else None, preview)

    @contextlib.asynccontextmanager
    async def streaming(self) -> AsyncIterator[Callable[[str], None] | None]:
        """Around the model call: yields what the call hands its text to as it arrives
        (``ctx.llm.chat(stream=...)``), which goes on to the preview; None when this
        reply is not streamed."""
        if self.adapter is None:
            yield None
            return
        pump = asyncio.create_task(self._pump(self.adapter), name=f"stream {self.ctx.event.key}")
        try:
            yield self._update
        finally:
            self._done.set()
            # A preview send in flight is finished, not cut off: cancelling it could
            # leave a message in the chat whose id was never saved.
            await asyncio.shield(pump)
        if self.preview is not None:
            # The final edit (the outbox row) keeps to the platform's edit rate too.
            await asyncio.sleep(max(0.0, self._last_at + self.adapter.edit_interval - _now()))

    async def send(self, text: str) -> None:
        """Queue the reply: an edit of the preview when there is one, else a message."""
        meta = dict(self._meta)
        if self.preview is not None:
            meta[EDIT_META] = self.preview
            platform = self._target.platform
            metrics.labelled(metrics.STREAM, platform, "finished").inc()
            self.ctx.log.info("stream.finished", preview=self.preview, edits=self._edits)
        await self.ctx.send(
            self._target, text, reply_to=self.ctx.event.message_id, format="markdown", meta=meta
        )

    def _update(self, text: str) -> None:
        if self._first_at is None:
            self._first_at = _now()
        self._text = text
        self._wake.set()

    async def _pump(self, adapter: Adapter) -> None:
        """Show the text so far, as often as the platform allows, until the stream ends.
        Never raises: a preview is a courtesy, and the answer goes out without it."""
        try:
            await self._previews(adapter)
        except Exception as exc:
            metrics.labelled(metrics.STREAM, adapter.platform, "failed").inc()
            error = redactor.scrub(f"{type(exc).__name__}: {exc}")[:300]
            self.ctx.log.warning("stream.failed", preview=self.preview, error=error)

    async def _previews(self, adapter: Adapter) -> None:
        limit = adapter.edit_limit
        while not self._done.is_set():
            waiting = asyncio.ensure_future(self._wake.wait())
            finished = asyncio.ensure_future(self._done.wait())
            await asyncio.wait({waiting, finished}, return_when=asyncio.FIRST_COMPLETED)
            waiting.cancel()
            finished.cancel()
            if self._done.is_set():
                return
            self._wake.clear()
            if self.preview is None:  # wait until the model has written for a while
                due = (self._first_at or _now()) + FIRST_AFTER
            else:  # and between edits, as long as the platform asks
                due = self._last_at + adapter.edit_interval
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._done.wait(), max(0.0, due - _now()))
            if self._done.is_set():
                return
            if limit is not None and self._edits >= limit - 2:  # keep two for the answer
                return
            text = self._clip(adapter, self._text)
            if not text.strip() or text == self._shown:
                continue
            try:
                await self._show(adapter, text)
            except SendRetryable as exc:  # rate-limited (not shown): wait, then the latest
                if exc.retry_after is None:
                    raise
                self.ctx.log.info("stream.throttled", retry_after=exc.retry_after)
                self._last_at = _now() + exc.retry_after - adapter.edit_interval
                if self.preview is None:  # the first send waits as long
                    self._first_at = self._last_at + adapter.edit_interval - FIRST_AFTER
                self._wake.set()

    async def _show(self, adapter: Adapter, text: str) -> None:
        event = self.ctx.event
        message = OutMessage(
            key=preview_key(event.key), target=self._target, text=text,
            reply_to=event.message_id, format="markdown", meta=self._meta,
        )  # fmt: skip
        if self.preview is None:
            sent = await adapter.send(message)
            if not sent.platform_id:
                raise RuntimeError("the platform did not say which message the preview is")
            self.preview = sent.platform_id
            # Saved before anything else: from here on, every run edits this message.
            saved = json.dumps(sent.platform_id)
            await turn_of(self.ctx).store.save_step(event.key, PREVIEW_STEP, saved)
            metrics.labelled(metrics.STREAM, adapter.platform, "preview").inc()
            self.ctx.log.info("stream.preview", preview=self.preview)
        else:
            await adapter.edit(message, self.preview)
            self._edits += 1
            metrics.labelled(metrics.STREAM, adapter.platform, "edited").inc()
            self.ctx.log.debug("stream.edited", preview=self.preview, chars=len(text))
        self._shown, self._last_at = text, _now()

    @staticmethod
    def _clip(adapter: Adapter, text: str) -> str:
        """What fits one message: the answer's first part (the outbox sends the rest)."""
        length = adapter.length_for("markdown")
        if adapter.text_limit is None or length(text) <= adapter.text_limit:
            return text
        return split_text(text, adapter.text_limit, length)[0]


def _now() -> float:
    return time.monotonic()
