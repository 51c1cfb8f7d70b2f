"""The web chat (``platforms.web``): the console's chat page as a platform.

It keeps the promise the way every adapter does, with the browser as the platform:

- **Ingress**: each message the page sends carries an id the page made (kept in the
  browser until the gateway has acknowledged it), so its key is
  ``web:{chat}:{message id}``. A page that resends after a reload, a lost answer or a
  gateway restart sends the same key, and the inbox admits it once.
- **Delivery**: the outbox calls :meth:`WebAdapter.send` like any other platform's; the
  reply is "delivered" when its outbox row is marked ``sent``, and the page reads the
  chat back from the store (:meth:`~tether.memory.operator.ConsoleStore.chat_log`). Nothing
  lives only in this process, so a reload or a restart loses nothing and shows each
  answer once; a send is idempotent (nothing leaves the process), so an ambiguous one
  is simply sent again.
- **Streaming**: a streamed answer's preview (and its edits) is kept in this process and
  shown by the page until the answer itself is in the store; a restart mid-stream loses
  the preview only, and the answer comes as on any platform.

The page is behind the console's login: the person chatting is the operator, so the
web is trusted like the terminal console (:data:`tether.keys.TRUSTED_PLATFORMS`).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from tether.adapters.base import Adapter, Sent
from tether.config.schema import Settings
from tether.errors import GatewayError
from tether.events import Conversation, Event, Kind, OutMessage, Sender, parse_command
from tether.keys import event_of, is_preview

if TYPE_CHECKING:
    from tether.adapters.base import Ingress

#: A chat id or message id as the page makes them (a UUID, or any short token).
ID = re.compile(r"[A-Za-z0-9_-]{1,64}")
#: The longest message the page may send, in characters.
MAX_TEXT = 8000
#: Previews kept at most (each is dropped once its answer is in the store).
MAX_PREVIEWS = 1000


class WebChatError(ValueError):
    """A message the page should not have sent (bad ids, empty or too long)."""


class WebAdapter(Adapter):
    platform = "web"
    #: Delivery is the outbox row's own ``sent`` mark: sending twice shows it once.
    idempotent_send = True
    resend_unknown = True
    #: A streamed reply shows on the page while it is written (gateway/agent/streaming.py).
    can_edit = True
    edit_interval = 0.25

    def __init__(self, user: str = "operator") -> None:
        self.user = user
        self.inbox: Ingress | None = None
        self._previews: dict[str, tuple[str, str]] = {}  # event key -> (chat, text so far)

    async def start(self, inbox: Ingress) -> None:
        self.inbox = inbox

    async def stop(self) -> None:
        self.inbox = None

    @property
    def connected(self) -> bool:
        return self.inbox is not None

    def event(self, chat: str, message_id: str, text: str) -> Event:
        if not ID.fullmatch(chat) or not ID.fullmatch(message_id):
            raise WebChatError("chat and id must be 1-64 letters, digits, '-' or '_'")
        text = text.strip()
        if not text:
            raise WebChatError("empty message")
        if len(text) > MAX_TEXT:
            raise WebChatError(f"message over {MAX_TEXT} characters")
        command = parse_command(text)
        return Event(
            key=f"web:{chat}:{message_id}",
            platform=self.platform,
            kind=Kind.COMMAND if command else Kind.MESSAGE,
            conversation=Conversation(platform=self.platform, chat_id=chat, chat_type="dm"),
            sender=Sender(id=self.user, name=self.user),
            message_id=message_id,
            text=text,
            command=command[0] if command else None,
            args=command[1] if command else "",
        )

    async def say(self, chat: str, message_id: str, text: str) -> bool:
        """Accept one message from the page; True when it is new, False for a resend."""
        if self.inbox is None:
            raise RuntimeError("the web chat is not running")
        [new] = await self.inbox.accept([self.event(chat, message_id, text)])
        return new

    async def send(self, message: OutMessage) -> Sent:
        if is_preview(message.key):
            self._preview(message)
        return Sent(platform_id=message.key)

    async def edit(self, message: OutMessage, platform_id: str) -> Sent:
        """A streamed reply's preview edited as the model writes, or (a row of the outbox)
        replaced by the answer, which the page then reads from the store."""
        if is_preview(message.key):
            self._preview(message)
        return Sent(platform_id=platform_id)

    def _preview(self, message: OutMessage) -> None:
        self._previews[event_of(message.key)] = (message.target.chat_id, message.text)
        while len(self._previews) > MAX_PREVIEWS:
            self._previews.pop(next(iter(self._previews)))

    def previews(self, chat: str, answered: set[str]) -> list[tuple[str, str]]:
        """``(event key, text so far)`` of the chat's replies being written: streamed
        previews kept in this process only (a courtesy, like on every platform). Those
        whose event has an answer in the store (``answered``) are dropped."""
        for key in answered & self._previews.keys():
            del self._previews[key]
        return [(key, text) for key, (at, text) in self._previews.items() if at == chat]


def check_web(settings: Settings) -> None:
    """The chat page is a page of the console: without it, say which key to set."""
    if not settings.http.enabled or not settings.http.ui.enabled:
        raise GatewayError(
            "platforms.web: the web chat is a page of the console;"
            " enable http.ui (with a password_hash or token) and keep http.enabled"
        )
