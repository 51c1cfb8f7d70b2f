"""What an adapter is: ingress into the inbox, and one ``send`` the outbox calls.

An adapter never touches the store. It turns platform traffic into :class:`Event` and
hands it to :meth:`Ingress.accept` (acknowledging the platform only after that returns),
and it sends one :class:`OutMessage` at a time when the outbox asks, raising one of the
``Send*`` errors (:mod:`tether.errors`) so the outbox knows whether a retry is safe.

:class:`Ingress` is all an adapter sees of the gateway: the inbox's accept, the cursors
it commits with its events, and the cross-process lock that keeps one long poll per
account. The gateway's inbox implements it; a test may hand an adapter anything that
does.
"""

from __future__ import annotations

import abc
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from tether.errors import DownloadError, SendFatal
from tether.events import Attachment, Event, OutMessage, Target
from tether.files import FileKind, Upload
from tether.limits import Limit
from tether.text import Length

if TYPE_CHECKING:
    from aiohttp import web


class Ingress(Protocol):
    """Where an adapter hands what it received: durable when :meth:`accept` returns."""

    async def accept(
        self, events: Sequence[Event], cursors: Mapping[str, str] | None = None
    ) -> list[bool]:
        """Commit ``events`` and ``cursors`` in one transaction; True where an event is
        new. Acknowledge the platform only after this returns."""
        ...

    async def cursor(self, name: str) -> str | None:
        """A cursor committed with earlier events (Telegram's offset), or None."""
        ...

    async def recent_cursors(self, prefix: str, since: float) -> dict[str, str]:
        """Cursors named ``prefix…`` that moved at or after ``since`` (epoch seconds):
        what was active before a restart (Discord's channels to read back)."""
        ...

    async def try_lock(self, name: str) -> bool:
        """Take the cross-process lock ``name`` (held until the process ends); a store
        used by one process always grants it."""
        ...


@dataclass(frozen=True, slots=True)
class Sent:
    """What the platform said about a delivered message."""

    platform_id: str | None = None


class Adapter(abc.ABC):
    """One chat platform. Subclasses set the class attributes and implement the methods."""

    platform: str = ""
    #: Longest text one message may carry, in :meth:`text_length` units (None: no limit).
    text_limit: int | None = None
    #: True when the platform dedups sends on a key we pass, so a retry after an
    #: ambiguous failure cannot produce a second message.
    idempotent_send: bool = False
    #: Resend rows whose first send was ambiguous even though sends are not idempotent.
    resend_unknown: bool = False
    #: :meth:`edit` works: a streamed reply edits one preview message (``gateway/agent/streaming``),
    #: at most once per ``edit_interval`` seconds and ``edit_limit`` times (None: no cap).
    can_edit: bool = False
    edit_interval: float = 1.0
    edit_limit: int | None = None
    #: What ``ctx.edit``/``delete``/``react``/``pin``/``answer`` may ask of this platform
    #: (their names); ``edit`` here also needs :attr:`can_edit`, which alone may mean a
    #: streamed preview only (the web chat shows edits of its previews, no others).
    actions: frozenset[str] = frozenset()
    #: Longest caption a file may carry (None: no limit; 0: none, the text goes alone),
    #: and which kinds of file may share one message (up to 10), see ``gateway/core/media.py``.
    caption_limit: int | None = None
    file_groups: frozenset[FileKind] = frozenset()
    #: The largest file the platform takes from a bot, in bytes, checked at
    #: ``ctx.reply`` where the handler can still do something about it (None: only the
    #: store's own cap).
    upload_limit: int | None = None

    def text_length(self, text: str) -> int:
        return len(text)

    def length_for(self, format: str) -> Length:
        """How to measure a text of ``format`` against ``text_limit`` (for splitting)."""
        return self.text_length

    async def edit(self, message: OutMessage, platform_id: str) -> Sent:
        """Replace the text of sent message ``platform_id`` with ``message``'s; the same
        ``Send*`` errors as :meth:`send` (an edit is idempotent: retrying is always safe)."""
        raise SendFatal(f"{self.platform or 'this platform'} cannot edit messages")

    async def delete(self, target: Target, message_id: str) -> None:
        """Delete message ``message_id`` (``ctx.delete``); one already gone counts as
        deleted, so a retry after a timeout ends well. ``Send*`` errors as :meth:`send`."""
        raise SendFatal(f"{self.platform or 'this platform'} cannot delete messages")

    async def react(self, target: Target, message_id: str, emoji: str) -> None:
        """Put the bot's reaction ``emoji`` on message ``message_id`` (``ctx.react``)."""
        raise SendFatal(f"{self.platform or 'this platform'} cannot react to messages")

    async def pin(self, target: Target, message_id: str, *, pinned: bool) -> None:
        """Pin message ``message_id`` in its chat, or unpin it (``ctx.pin``)."""
        raise SendFatal(f"{self.platform or 'this platform'} cannot pin messages")

    async def answer(self, message: OutMessage, press: Mapping[str, Any], alert: bool) -> Sent:
        """Answer a button press with ``message.text`` as a toast, or a dialog when
        ``alert`` (``ctx.answer``); ``press`` is the press event's ``meta``. A press the
        platform no longer takes an answer for raises :class:`SendFatal`."""
        raise SendFatal(f"{self.platform or 'this platform'} cannot answer button presses")

    def claim_press(self, event: Event) -> None:  # noqa: B027 - optional hook
        """The handler of press ``event`` answers it (``ctx.answer``): where the adapter
        answers presses itself after a grace (Telegram), it leaves this one alone."""

    def account_key(self, key: str) -> str | None:
        """``key``, one of this adapter's event keys, as this account's own: where two of
        our accounts can receive one platform message (several agents in a channel),
        the key must name the account that received it. None where the key already
        does (Telegram's ``tg:{bot}:{update}``), or the account is not known yet."""
        return None

    def limits(self, target: Target) -> list[Limit]:
        """The token buckets one send to ``target`` draws from."""
        return []

    def routes(self, app: web.Application) -> None:  # noqa: B027 - optional hook
        """Add webhook routes to the gateway's HTTP app (called before it starts)."""

    @property
    def connected(self) -> bool:
        return True

    @property
    def problem(self) -> str | None:
        """Why the adapter is not connected, when it knows (readiness shows it)."""
        return None

    async def open(self) -> None:  # noqa: B027 - optional hook
        """Get ready to send (sessions, identity); called before recovery resends anything."""

    @abc.abstractmethod
    async def start(self, inbox: Ingress) -> None:
        """Begin ingress. Returns once the adapter is running (tasks may go on)."""

    @abc.abstractmethod
    async def stop(self) -> None:
        """Stop ingress; sending may still be asked for until the outbox has flushed."""

    async def set_commands(self, commands: Sequence[tuple[str, str]]) -> None:  # noqa: B027
        """Show ``commands`` ((name, description) pairs) as the platform's command menu,
        where it has one; called at start and after each reload. Optional hook."""

    async def close(self) -> None:  # noqa: B027 - optional hook
        """Release connections (HTTP clients); called after the outbox has flushed."""

    @abc.abstractmethod
    async def send(self, message: OutMessage) -> Sent:
        """Deliver one message (already split to fit ``text_limit``)."""

    async def send_files(self, message: OutMessage, files: Sequence[Upload]) -> Sent:
        """Deliver one message carrying ``files`` (its text their caption); the same
        ``Send*`` errors as :meth:`send`, and the same idempotency key.

        A platform without files (the console, the web chat) sends the text with a line
        naming each file, so the person learns that something was sent."""
        shown = [f"[{upload.kind}: {upload.name}, {len(upload.data)} bytes]" for upload in files]
        text = "\n".join([message.text, *shown] if message.text else shown)
        return await self.send(message.model_copy(update={"text": text, "files": []}))

    async def download(self, attachment: Attachment, message_id: str | None, cap: int) -> bytes:
        """The bytes of an inbound ``attachment`` of message ``message_id``, at most
        ``cap`` (:class:`~tether.errors.TooLarge` past it)."""
        raise DownloadError(f"{self.platform or 'this platform'} has no file downloads")
