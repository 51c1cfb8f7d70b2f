"""The one shape every inbound event and outbound message takes, whatever the platform.

Adapters normalize platform payloads into :class:`Event`; handlers produce
:class:`OutMessage`. Both serialize to versioned JSON for the store: ``v`` names the
schema so rows written by an older Tether can still be read by a newer one.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from tether.buttons import Button
from tether.files import OutFile

SCHEMA_VERSION = 1
#: ``Event.meta`` key: a dict that :meth:`Context.reply` copies into every reply's
#: ``OutMessage.meta``, for what the adapter needs to answer this very event.
REPLY_META = "reply_meta"
#: ``OutMessage.meta`` key: the platform id of the bot's message this row edits instead
#: of posting a new one (a streamed reply's preview, ``ctx.edit``: gateway/core/edits.py).
EDIT_META = "edit_of"
#: ``OutMessage.meta`` key: what this row does to a message already in the chat instead
#: of sending one (``ctx.delete``/``react``/``pin``/``answer``): ``{"do": verb, ...}``.
ACTION_META = "action"


class Kind(StrEnum):
    MESSAGE = "message"
    COMMAND = "command"
    EDIT = "edit"
    CALLBACK = "callback"
    CRON = "cron"
    SYSTEM = "system"
    #: A background task's own event (``task:{id}``): gateway/tasks/.
    TASK = "task"


ChatType = Literal["dm", "group", "channel"]


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")


class Conversation(_Model):
    """Where an event happened, and so where its replies go."""

    platform: str
    chat_id: str
    thread_id: str | None = None
    chat_type: ChatType = "dm"

    @property
    def key(self) -> str:
        """``{platform}:{chat_id}[:{thread_id}]`` — the chat (or topic) as a whole."""
        base = f"{self.platform}:{self.chat_id}"
        return f"{base}:{self.thread_id}" if self.thread_id else base

    def target(self) -> Target:
        return Target(platform=self.platform, chat_id=self.chat_id, thread_id=self.thread_id)


class Sender(_Model):
    id: str
    name: str = ""
    is_bot: bool = False
    #: The language the platform says the person uses (Telegram's ``language_code``,
    #: Discord's ``locale``), if it says: which fixed messages they get (tether.messages).
    language: str | None = None


class Attachment(_Model):
    kind: str  # photo, document, voice, video, audio, sticker, file, image, ...
    file_id: str | None = None
    url: str | None = None
    mime: str | None = None
    size: int | None = None
    name: str | None = None


class Event(_Model):
    """One thing that happened on a platform (or a cron fire), in the shape every part shares.

    ``key`` is stable across redeliveries of the same thing (``tg:{bot}:{update_id}``,
    ``dc:msg:{id}``, ``fs:msg:{message_id}``, ``cron:{job}:{time}``): the inbox admits a
    key once, which is what makes a redelivery a duplicate instead of a second answer.

    What a handler reads: ``kind`` (message, command, edit, callback, cron, system),
    ``text``, ``command``/``args`` (``/weather Paris`` → ``"weather"``, ``"Paris"``),
    ``conversation`` (where it happened, so where replies go), ``sender``,
    ``message_id``, ``reply_to``/``reply_to_bot``, ``mentions``/``mentions_bot``,
    ``attachments``, ``timestamp``, ``meta`` (platform extras, e.g. a cron fire's
    ``job`` and ``deliver``) and ``raw`` (the payload as the platform sent it).

    Events are frozen: the stored row, every attempt and the dead-letter snapshot see the
    same one. Adapters make them in their pure normalize step (the scheduler makes cron
    fires); ``v`` versions the JSON.
    """

    v: int = SCHEMA_VERSION
    key: str
    platform: str
    kind: Kind = Kind.MESSAGE
    conversation: Conversation
    sender: Sender | None = None
    message_id: str | None = None
    text: str = ""
    command: str | None = None
    args: str = ""
    reply_to: str | None = None
    reply_to_bot: bool = False
    mentions: list[str] = Field(default_factory=list)
    mentions_bot: bool = False
    attachments: list[Attachment] = Field(default_factory=list)
    timestamp: datetime = Field(default_factory=lambda: datetime.now(UTC))
    meta: dict[str, Any] = Field(default_factory=dict)
    raw: dict[str, Any] | None = None

    def session(self, group_sessions: str = "per_user") -> str:
        """The memory/lane key: per chat in DMs, per user in groups unless ``shared``."""
        conv = self.conversation
        if conv.chat_type == "group" and group_sessions == "per_user" and self.sender:
            return f"{conv.key}:u{self.sender.id}"
        return conv.key

    def to_json(self) -> str:
        return self.model_dump_json(exclude_defaults=False)

    @classmethod
    def from_json(cls, data: str | bytes) -> Event:
        return cls.model_validate_json(data)


class Target(_Model):
    platform: str
    chat_id: str
    thread_id: str | None = None

    @property
    def key(self) -> str:
        base = f"{self.platform}:{self.chat_id}"
        return f"{base}:{self.thread_id}" if self.thread_id else base

    @classmethod
    def parse(cls, spec: str) -> Target:
        """``platform:chat[:thread]``, as written in ``deliver:`` config entries."""
        parts = spec.split(":", 2)
        if len(parts) < 2 or not all(parts[:2]):
            raise ValueError(f"expected platform:chat[:thread], got {spec!r}")
        return cls(
            platform=parts[0], chat_id=parts[1], thread_id=parts[2] if len(parts) > 2 else None
        )


class OutMessage(_Model):
    """One outbound message: a row in the outbox before it is a platform call.

    Handlers never build one: ``ctx.reply``/``ctx.send`` queue it, the checkpoint commits
    it with the event, and the outbox sends it after. ``key`` (``{event key}#{n}``) is set
    when it is stored; Discord's nonce and Feishu's uuid derive from it, so a resend is
    not posted twice. ``format`` is plain, html or markdown; ``meta`` carries what the
    adapter needs to answer this very event (see :data:`REPLY_META`).
    """

    v: int = SCHEMA_VERSION
    key: str = ""
    target: Target
    text: str
    reply_to: str | None = None
    format: Literal["plain", "html", "markdown"] = "plain"
    meta: dict[str, Any] = Field(default_factory=dict)
    #: Rows of buttons under the message (:mod:`tether.buttons`); on the last chunk only.
    buttons: list[list[Button]] = Field(default_factory=list)
    #: Files sent with the message, ``text`` their caption (:mod:`tether.files`).
    files: list[OutFile] = Field(default_factory=list)

    def to_json(self) -> str:
        return self.model_dump_json()

    @classmethod
    def from_json(cls, data: str | bytes) -> OutMessage:
        return cls.model_validate_json(data)


_COMMAND = re.compile(r"^/([A-Za-z0-9_]{1,64})(?:@([A-Za-z0-9_]+))?(?:\s+(.*))?$", re.DOTALL)


def parse_command(text: str, bot_username: str | None = None) -> tuple[str, str] | None:
    """``"/start@MyBot a b"`` → ``("start", "a b")``; ``None`` if not a command for us.

    A command addressed to another bot (``/start@OtherBot``) is not ours.
    """
    match = _COMMAND.match(text.strip())
    if not match:
        return None
    name, addressee, args = match.groups()
    if addressee and bot_username and addressee.lower() != bot_username.lower():
        return None
    return name.lower(), (args or "").strip()
