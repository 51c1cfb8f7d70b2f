"""Outbox rows that act on a message already in the chat instead of posting a new one.

**Edits.** A streamed reply (``gateway/agent/streaming.py``) is shown while the model
writes it by editing one preview message, and ``ctx.edit`` changes the message whose
button was pressed. The durable form of either is still an outbox row, committed with the
event's checkpoint; that row carries the message's platform id in ``meta[EDIT_META]``,
and the outbox delivers it with :meth:`Adapter.edit` instead of :meth:`Adapter.send`.

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

**Actions** (``meta[ACTION_META]``, from ``gateway/handler/actions.py``): delete, react,
pin or unpin a message, and answer a button press. Each is safe to repeat — a message
already deleted counts as deleted, a reaction or a pin set twice is set once — so they
are resent after a crash like edits. A press's answer (a toast) the platform refuses on
the first attempt (Telegram answered the press already, its grace having passed) is
said as a message instead, through the same path as a refused edit, so the person is not
left without it; refused on a later attempt, it is taken as the earlier attempt's answer
having arrived (a second answer is what Telegram refuses).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import structlog

from tether.adapters.base import Adapter, Sent
from tether.errors import SendFatal
from tether.events import ACTION_META, EDIT_META, OutMessage
from tether.memory.records import OutboxRow

__all__ = ["ACTION_META", "EDIT_META", "EDIT_REFUSED", "action_of", "deliver", "edit_of"]

log = structlog.get_logger("tether.outbox")

#: How a row's ``error`` starts once its edit (or answer) was refused and it is sent as a message.
EDIT_REFUSED = "edit refused"


def edit_of(message: OutMessage) -> str | None:
    """The platform id of the message ``message`` replaces the text of, if it is an edit."""
    value = message.meta.get(EDIT_META)
    return str(value) if value else None


def action_of(message: OutMessage) -> Mapping[str, Any] | None:
    """What ``message`` does instead of being sent (``{"do": "delete", ...}``), if anything."""
    value = message.meta.get(ACTION_META)
    return value if isinstance(value, dict) and value.get("do") else None


def without_edit(meta: dict[str, Any]) -> dict[str, Any]:
    """``meta`` for the second and later parts of a long edited reply: new messages."""
    return {name: value for name, value in meta.items() if name not in (EDIT_META, ACTION_META)}


def edit_refused(row: OutboxRow) -> bool:
    """The platform refused ``row``'s edit: it is sent as a new message instead."""
    return (row.error or "").startswith(EDIT_REFUSED)


def repeatable(row: OutboxRow) -> bool:
    """``row`` is delivered as an edit or an action, safe to repeat where a send is not."""
    message = row.message
    in_place = edit_of(message) is not None or action_of(message) is not None
    return in_place and not edit_refused(row)


async def deliver(
    adapter: Adapter, row: OutboxRow, refused: Callable[[SendFatal], Awaitable[None]]
) -> Sent:
    """The platform call for one outbox row: an action, an edit, or a new message.

    An edit (or a press's answer) refused for good is awaited with ``refused`` (which
    marks the row a send, durably) and the text goes as a new message, in the same attempt.
    """
    message = row.message
    action = action_of(message)
    if action is not None and not edit_refused(row):
        sent = await _act(adapter, row, action, refused)
        if sent is not None:
            return sent
    target = edit_of(message)
    if target is not None and not edit_refused(row):
        try:
            return await adapter.edit(message, target)
        except SendFatal as exc:
            await refused(exc)
    return await adapter.send(message.model_copy(update={"meta": without_edit(message.meta)}))


async def _act(
    adapter: Adapter,
    row: OutboxRow,
    action: Mapping[str, Any],
    refused: Callable[[SendFatal], Awaitable[None]],
) -> Sent | None:
    """Do ``action``; None when its text is to be sent as a message instead."""
    message = row.message
    verb = str(action["do"])
    message_id = str(action.get("message_id") or "")
    target = message.target
    if verb == "delete":
        await adapter.delete(target, message_id)
    elif verb == "react":
        await adapter.react(target, message_id, str(action.get("emoji", "")))
    elif verb in ("pin", "unpin"):
        await adapter.pin(target, message_id, pinned=verb == "pin")
    elif verb == "answer":
        try:
            press = action.get("press") or {}
            return await adapter.answer(message, press, bool(action.get("alert")))
        except SendFatal as exc:
            if row.attempts > 1 or not message.text:
                log.info("outbox.answer_settled", key=row.key, attempt=row.attempts, error=str(exc))
                return Sent()
            await refused(exc)
            return None
    else:
        raise SendFatal(f"unknown action {verb!r}")
    return Sent(platform_id=message_id or None)
