"""An outbox row that edits a message already in the chat instead of posting a new one.

A streamed reply (``gateway/agent/streaming.py``) is shown while the model writes it by editing one
preview message. Its durable form is still an outbox row, committed with the event's
checkpoint; that row carries the preview's platform id in ``meta[EDIT_META]``, and the
outbox delivers it with :meth:`Adapter.edit` instead of :meth:`Adapter.send`.

Setting a message's text to the same value twice leaves one message with that text, so
an edit is idempotent on every platform: after a crash, or an ambiguous failure, an
edit row is sent again even where sends are not (Telegram).
"""

from __future__ import annotations

from typing import Any

from tether.adapters.base import Adapter, Sent
from tether.events import OutMessage

#: ``OutMessage.meta`` key: the platform id of the message this row edits.
EDIT_META = "edit_of"


def edit_of(message: OutMessage) -> str | None:
    """The platform id of the message ``message`` replaces the text of, if it is an edit."""
    value = message.meta.get(EDIT_META)
    return str(value) if value else None


def without_edit(meta: dict[str, Any]) -> dict[str, Any]:
    """``meta`` for the second and later parts of a long edited reply: new messages."""
    return {name: value for name, value in meta.items() if name != EDIT_META}


async def deliver(adapter: Adapter, message: OutMessage) -> Sent:
    """The platform call for one outbox row: an edit, or a new message."""
    target = edit_of(message)
    if target is not None:
        return await adapter.edit(message, target)
    return await adapter.send(message)
