"""An in-process platform for tests and benchmarks: inject events, read back what was sent.

Like Starlette's TestClient, it ships with the library so bot authors can test their
handlers through the real pipeline and store without a chat platform
(``tether.testing.Bot`` drives one)::

    loop = LoopbackAdapter()
    gateway = Gateway(settings, {"loopback": loop})
    await gateway.start()
    await loop.say("hello", chat="42")
    sent = await loop.wait_for_sent(1)

Besides text it makes what a person does on a real platform: a button press
(:meth:`LoopbackAdapter.press`) and a file sent (:meth:`LoopbackAdapter.attach`, whose
bytes ``ctx.download`` then gets); it records files and edits sent back
(``Delivery.files``, ``edited``) and the actions done (``acted``: deletions, reactions,
pins, press answers). Failures can be scripted with :meth:`fail_next`, to
exercise the outbox's retry paths.
"""

from __future__ import annotations

import asyncio
import itertools
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tether.adapters.base import Adapter, Sent
from tether.errors import DownloadError, SendError, TooLarge
from tether.events import (
    Attachment,
    ChatType,
    Conversation,
    Event,
    Kind,
    OutMessage,
    Sender,
    Target,
    parse_command,
)
from tether.files import Upload
from tether.limits import Limit

if TYPE_CHECKING:
    from tether.adapters.base import Ingress


@dataclass(frozen=True, slots=True)
class Delivery:
    message: OutMessage
    platform_id: str
    #: The files the message carried, with their bytes.
    files: tuple[Upload, ...] = ()


@dataclass(frozen=True, slots=True)
class Acted:
    """One ``ctx.delete``/``react``/``pin``/``answer`` as the platform got it."""

    #: ``delete``, ``react``, ``pin``, ``unpin`` or ``answer``.
    do: str
    #: The message acted on (empty for an answer: the press is the event's).
    message_id: str = ""
    #: The reaction's emoji, or the answer's text.
    detail: str = ""
    alert: bool = False


class LoopbackAdapter(Adapter):
    platform = "loopback"
    actions = frozenset({"edit", "delete", "react", "pin", "answer"})

    def __init__(
        self,
        *,
        text_limit: int | None = None,
        idempotent: bool = False,
        limits: list[Limit] | None = None,
        edits: bool = False,
    ) -> None:
        self.text_limit = text_limit
        self.idempotent_send = idempotent
        #: ``edits``: a streamed reply edits its preview here, as on Telegram (a subclass
        #: may say so itself).
        self.can_edit = edits or type(self).can_edit
        #: Each edit: the message's platform id and the text it was given, in order.
        self.edited: list[tuple[str, OutMessage]] = []
        #: Each action done, in order (:class:`Acted`).
        self.acted: list[Acted] = []
        #: Inbound files by ``file_id``, what ``download`` answers (see :meth:`attach`).
        self.files: dict[str, bytes] = {}
        self._limits = limits or []
        self.sent: list[Delivery] = []
        self.attempts: list[OutMessage] = []
        self.inbox: Ingress | None = None
        self._changed = asyncio.Condition()
        self._failures: deque[SendError] = deque()
        self._ids = itertools.count(1)
        self._keys = itertools.count(1)

    def limits(self, target: Target) -> list[Limit]:
        return list(self._limits)

    async def start(self, inbox: Ingress) -> None:
        self.inbox = inbox

    async def stop(self) -> None:
        self.inbox = None

    def event(
        self,
        text: str,
        *,
        chat: str = "1",
        user: str = "u1",
        key: str | None = None,
        chat_type: ChatType = "dm",
        thread: str | None = None,
        attachments: Sequence[Attachment] = (),
    ) -> Event:
        """A message event as a platform adapter would normalize it."""
        command = parse_command(text)
        n = next(self._keys)
        return Event(
            key=key or f"loopback:{chat}:{n}",
            platform=self.platform,
            kind=Kind.COMMAND if command else Kind.MESSAGE,
            conversation=Conversation(
                platform=self.platform,
                chat_id=chat,
                thread_id=thread,
                chat_type=chat_type,
            ),
            sender=Sender(id=user, name=user),
            message_id=str(n),
            text=text,
            command=command[0] if command else None,
            args=command[1] if command else "",
            attachments=list(attachments),
        )

    def press(
        self, data: str, *, chat: str = "1", user: str = "u1", message_id: str | None = None
    ) -> Event:
        """A button press (``Kind.CALLBACK``) as a platform adapter would normalize it:
        ``text`` is the button's data, ``message_id`` the message it sat under."""
        n = next(self._keys)
        return Event(
            key=f"loopback:{chat}:press:{n}",
            platform=self.platform,
            kind=Kind.CALLBACK,
            conversation=Conversation(platform=self.platform, chat_id=chat),
            sender=Sender(id=user, name=user),
            message_id=message_id,
            text=data,
        )

    def attach(
        self, data: bytes, *, name: str = "file", kind: str = "document", mime: str | None = None
    ) -> Attachment:
        """An inbound file, as a message's attachment; ``ctx.download`` gets ``data``."""
        file_id = f"file-{len(self.files) + 1}"
        self.files[file_id] = data
        return Attachment(kind=kind, file_id=file_id, mime=mime, size=len(data), name=name)

    async def download(self, attachment: Attachment, message_id: str | None, cap: int) -> bytes:
        data = self.files.get(attachment.file_id or "")
        if data is None:
            raise DownloadError(f"no file {attachment.file_id!r} was sent here")
        if len(data) > cap:
            raise TooLarge(len(data), cap)
        return data

    async def deliver(self, *events: Event) -> list[bool]:
        """Hand events to the inbox as ingress would; True where an event was new."""
        if self.inbox is None:
            raise RuntimeError("adapter not started")
        return await self.inbox.accept(list(events))

    async def say(self, text: str, **kwargs: Any) -> Event:
        event = self.event(text, **kwargs)
        await self.deliver(event)
        return event

    def fail_next(self, *errors: SendError) -> None:
        """The next sends raise these, in order, before sends succeed again."""
        self._failures.extend(errors)

    async def send(self, message: OutMessage) -> Sent:
        return await self._deliver(message, ())

    async def send_files(self, message: OutMessage, files: Sequence[Upload]) -> Sent:
        return await self._deliver(message, tuple(files))

    async def edit(self, message: OutMessage, platform_id: str) -> Sent:
        self.attempts.append(message)
        if self._failures:
            raise self._failures.popleft()
        async with self._changed:
            self.edited.append((platform_id, message))
            self._changed.notify_all()
        return Sent(platform_id=platform_id)

    async def delete(self, target: Target, message_id: str) -> None:
        await self._act(Acted("delete", message_id))

    async def react(self, target: Target, message_id: str, emoji: str) -> None:
        await self._act(Acted("react", message_id, emoji))

    async def pin(self, target: Target, message_id: str, *, pinned: bool) -> None:
        await self._act(Acted("pin" if pinned else "unpin", message_id))

    async def answer(self, message: OutMessage, press: Mapping[str, Any], alert: bool) -> Sent:
        await self._act(Acted("answer", "", message.text, alert))
        return Sent()

    async def _act(self, acted: Acted) -> None:
        if self._failures:
            raise self._failures.popleft()
        async with self._changed:
            self.acted.append(acted)
            self._changed.notify_all()

    async def wait_for_acted(self, count: int, timeout: float = 10.0) -> list[Acted]:
        """Wait until at least ``count`` actions were done; raise on timeout."""
        async with asyncio.timeout(timeout), self._changed:
            await self._changed.wait_for(lambda: len(self.acted) >= count)
        return list(self.acted)

    async def _deliver(self, message: OutMessage, files: tuple[Upload, ...]) -> Sent:
        self.attempts.append(message)
        if self._failures:
            raise self._failures.popleft()
        platform_id = str(next(self._ids))
        async with self._changed:
            self.sent.append(Delivery(message, platform_id, files))
            self._changed.notify_all()
        return Sent(platform_id=platform_id)

    async def wait_for_sent(self, count: int, timeout: float = 10.0) -> list[Delivery]:
        """Wait until at least ``count`` messages were delivered; raise on timeout."""
        async with asyncio.timeout(timeout), self._changed:
            await self._changed.wait_for(lambda: len(self.sent) >= count)
        return list(self.sent)

    async def wait_for_text(self, part: str, timeout: float = 10.0) -> list[Delivery]:
        """Wait until a delivered message's text holds ``part``; the ones that do."""

        def holding() -> list[Delivery]:
            return [d for d in self.sent if part in d.message.text]

        async with asyncio.timeout(timeout), self._changed:
            await self._changed.wait_for(lambda: bool(holding()))
        return holding()
