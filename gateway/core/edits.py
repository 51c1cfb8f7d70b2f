"""An outbox row that edits a message already in the chat instead of posting a new one.

A streamed reply (``gateway/agent/streaming.py``) is shown while the model writes it by editing one
preview message. Its durable form is still an outbox row, committed with the event's
checkpoint; that row carries the preview's platform id in ``meta[EDIT_META]``, and the
outbox delivers it with :meth:`Adapter.edit` instead of :meth:`Adapter.send`.

Setting a message's text to the same value twice leaves one message with that text, so
an edit is idempotent on every platform: after a crash, or an ambiguous failure, an
edit row is sent again even where sends are not (Telegram).

An edit the platform refuses for good (:class:`SendFatal`: the person deleted the
preview, Telegram's "message to edit not found", Discord's 404 Unknown Message, Feishu's
refusal) would lose the answer with it. So the row is then sent as a *new message*,
under its own key (Discord's nonce, Feishu's uuid: a resend is still one message). From
that moment the row is a send, not an edit, and follows a send's rules: the ``sending``
mark before the call carries :data:`EDIT_REFUSED` in its ``error``, so a restart after
a crash there treats it as a send that may have gone out (``unknown`` on Telegram), never
as an edit that is safe to repeat.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from tether.adapters.base import Adapter, Sent
from tether.errors import SendFatal
from tether.events import OutMessage
from tether.memory.records import OutboxRow

#: ``OutMessage.meta`` key: the platform id of the message this row edits.
EDIT_META = "edit_of"
#: How a row's ``error`` starts once its edit was refused and it is sent as a message.
EDIT_REFUSED = "edit refused"


def edit_of(message: OutMessage) -> str | None:
    """The platform id of the message ``message`` replaces the text of, if it is an edit."""
    value = message.meta.get(EDIT_META)
    return str(value) if value else None


def without_edit(meta: dict[str, Any]) -> dict[str, Any]:
    """``meta`` for the second and later parts of a long edited reply: new messages."""
    return {name: value for name, value in meta.items() if name != EDIT_META}


def edit_refused(row: OutboxRow) -> bool:
    """The platform refused ``row``'s edit: it is sent as a new message instead."""
    return (row.error or "").startswith(EDIT_REFUSED)


def repeatable(row: OutboxRow) -> bool:
    """``row`` is delivered as an edit, which is safe to repeat where a send is not."""
    return edit_of(row.message) is not None and not edit_refused(row)


async def deliver(
    adapter: Adapter, row: OutboxRow, refused: Callable[[SendFatal], Awaitable[None]]
) -> Sent:
    """The platform call for one outbox row: an edit, or a new message.

    An edit refused for good is awaited with ``refused`` (which marks the row a send,
    durably) and the text goes as a new message, in the same attempt.
    """
    message = row.message
    target = edit_of(message)
    if target is None:
        return await adapter.send(message)
    if not edit_refused(row):
        try:
            return await adapter.edit(message, target)
        except SendFatal as exc:
            await refused(exc)
    return await adapter.send(message.model_copy(update={"meta": without_edit(message.meta)}))
