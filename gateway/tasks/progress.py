"""A task's status message, edited as the task goes: progress without a flood.

The turn that started the task posted the status message (an outbox row marked with the
task's id, :data:`~.start.STATUS_META`). While the task works, :class:`Progress` edits
that message with what it is doing now ("step 2: search"), at most once per
``agent.tasks.progress_interval`` seconds (and never faster than the platform's
``edit_interval``). These edits are a courtesy, made straight through the adapter and
not kept: a crash loses at most the newest line, and every edit sets the whole text, so
repeating one is harmless. When the task ends, its checkpoint carries one durable edit
(:meth:`Progress.final`) that says how it ended, delivered by the outbox like any reply.

A platform that cannot edit (or a status message not sent yet, or refused) simply gets
no progress: the result still arrives as its own message.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import TYPE_CHECKING

import structlog

from tether.adapters.base import Adapter
from tether.events import EDIT_META, OutMessage, Target
from tether.gateway.tasks.spec import TaskSpec, short
from tether.gateway.tasks.start import STATUS_META
from tether.memory.roles import OutboxStore
from tether.redaction import redactor

if TYPE_CHECKING:
    from collections.abc import Mapping

log = structlog.get_logger("tether.tasks")


class Progress:
    """The status message of one task's run."""

    def __init__(
        self,
        spec: TaskSpec,
        store: OutboxStore,
        adapters: Mapping[str, Adapter],
        interval: float,
    ) -> None:
        self.spec = spec
        self._store = store
        self._target = Target.parse(spec.target) if spec.target else None
        self._adapter = adapters.get(self._target.platform) if self._target else None
        self._interval = interval
        self._platform_id: str | None = None
        self._latest = "working"
        self._shown = ""
        self._wake = asyncio.Event()
        self._started = time.monotonic()

    def note(self, text: str) -> None:
        """What the task does now; shown at the next edit."""
        self._latest = text
        self._wake.set()

    async def pump(self, done: asyncio.Event) -> None:
        """Edit the status message as notes come, until ``done``. Never raises."""
        adapter = self._adapter
        if adapter is None or not adapter.can_edit:
            return
        gap = max(self._interval, adapter.edit_interval)
        while not done.is_set():
            woken, ended = (
                asyncio.ensure_future(self._wake.wait()),
                asyncio.ensure_future(done.wait()),
            )
            await asyncio.wait({woken, ended}, timeout=gap, return_when=asyncio.FIRST_COMPLETED)
            woken.cancel()
            ended.cancel()
            self._wake.clear()
            if done.is_set():
                return
            text = self._text(f"{self._latest} · {_elapsed(time.monotonic() - self._started)}")
            if text == self._shown:
                continue
            try:
                await self._edit(adapter, text)
            except Exception as exc:  # a courtesy: the result goes out without it
                log.info("task.progress_failed", task=self.spec.id, error=_scrubbed(exc))
                return
            with contextlib.suppress(TimeoutError):  # the platform's pace, and ours
                await asyncio.wait_for(done.wait(), gap)

    async def final(self, line: str) -> OutMessage | None:
        """The durable edit that says how the task ended, or None without a message."""
        if self._target is None or self._adapter is None or not self._adapter.can_edit:
            return None
        platform_id = await self._status_id()
        if platform_id is None:
            return None
        return OutMessage(
            target=self._target,
            text=self._text(line, ended=True),
            meta={**self.spec.reply_meta, EDIT_META: platform_id},
        )

    def _text(self, line: str, *, ended: bool = False) -> str:
        head = f"Task {self.spec.id}: {short(self.spec.goal)}\n{line}"
        return head if ended else f"⏳ {head}\n/cancel {self.spec.id} stops it."

    async def _edit(self, adapter: Adapter, text: str) -> None:
        platform_id = await self._status_id()
        if platform_id is None or self._target is None:
            return
        message = OutMessage(
            key=f"{self.spec.key}#progress", target=self._target, text=text,
            meta=dict(self.spec.reply_meta),
        )  # fmt: skip
        await adapter.edit(message, platform_id)
        self._shown = text

    async def _status_id(self) -> str | None:
        """The status message's platform id, once the outbox has sent it."""
        if self._platform_id is None:
            for row in await self._store.outbox_rows(self.spec.started_by):
                if row.message.meta.get(STATUS_META) == self.spec.id and row.platform_id:
                    self._platform_id = row.platform_id
        return self._platform_id


def _elapsed(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    return f"{minutes}m {secs:02d}s" if minutes else f"{secs}s"


def _scrubbed(exc: Exception) -> str:
    return redactor.scrub(f"{type(exc).__name__}: {exc}")[:300]
