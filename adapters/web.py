"""The web chat (``platforms.web``): the console's chat page as a platform.

It keeps the promise the way every adapter does, with the browser as the platform:

- **Ingress**: each message the page sends carries an id the page made (kept in the
  browser until the gateway has acknowledged it), so its key is
  ``web:{chat}:{message id}``. A page that resends after a reload, a lost answer or a
  gateway restart sends the same key, and the inbox admits it once.
- **Delivery**: the outbox calls :meth:`WebAdapter.send` like any other platform's; the
  reply is "delivered" when its outbox row is marked ``sent``, and the page reads the
  chat back from the store (:meth:`~tether.memory.roles.ConsoleStore.chat_log`). Nothing
  lives only in this process, so a reload or a restart loses nothing and shows each
  answer once; a send is idempotent (nothing leaves the process), so an ambiguous one
  is simply sent again.

The page is behind the console's login: the person chatting is the operator, so the
web is trusted like the terminal console (:data:`tether.gateway.access.TRUSTED_PLATFORMS`).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from tether.adapters.base import Adapter, Sent
from tether.config.schema import Settings
from tether.errors import GatewayError
from tether.events import Conversation, Event, Kind, OutMessage, Sender, parse_command

if TYPE_CHECKING:
    from tether.gateway.inbox import Inbox

#: A chat id or message id as the page makes them (a UUID, or any short token).
ID = re.compile(r"[A-Za-z0-9_-]{1,64}")
#: The longest message the page may send, in characters.
MAX_TEXT = 8000


class WebChatError(ValueError):
    """A message the page should not have sent (bad ids, empty or too long)."""


class WebAdapter(Adapter):
    platform = "web"
    #: Delivery is the outbox row's own ``sent`` mark: sending twice shows it once.
    idempotent_send = True
    resend_unknown = True

    def __init__(self, user: str = "operator") -> None:
        self.user = user
        self.inbox: Inbox | None = None

    async def start(self, inbox: Inbox) -> None:
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
        return Sent(platform_id=message.key)


def check_web(settings: Settings) -> None:
    """The chat page is a page of the console: without it, say which key to set."""
    if not settings.http.enabled or not settings.http.ui.enabled:
        raise GatewayError(
            "platforms.web: the web chat is a page of the console;"
            " enable http.ui (with a password_hash or token) and keep http.enabled"
        )
