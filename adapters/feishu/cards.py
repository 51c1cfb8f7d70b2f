"""Buttons on Feishu: an interactive card out, ``card.action.trigger`` (a press) in.

Out: a message with buttons is sent as an ``interactive`` card — the text as its first
element (``lark_md`` for Markdown, ``plain_text`` otherwise), then one ``action``
element per keyboard row. A data button carries ``{"data": …}`` as its ``value``, which
Feishu hands back on a press; a url button opens the link and calls nothing back. The
card goes through the same ``im/v1/messages`` call, with the same ``uuid``, as any reply.
It is a shared card (``config.update_multi``): only those can be edited for everyone
(``PATCH``, :mod:`.edit`), as ``ctx.edit`` of a pressed card does.

In: a press is the ``card.action.trigger`` callback, by webhook or over the long
connection, as a v2 event. :func:`card_action` makes it a ``callback`` event keyed
``fs:evt:{event_id}`` (DESIGN §3: events that are not messages); it is committed before
the HTTP answer (or the long connection's ack), which Feishu needs within 3 s, so the
press is never acknowledged and lost, and a redelivered one is a duplicate.

Pure: no I/O. The presser is the ``operator``; the chat and the card's message come from
``context``. A press on a card Tether did not make (no ``data`` in its value) is skipped
with its reason, like any payload that cannot be an event.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from tether.adapters.kit import Dropped
from tether.buttons import Keyboard
from tether.events import Conversation, Event, Kind, Sender

PLATFORM = "feishu"
SKIPPED = "feishu.skipped"
CARD_ACTION = "card.action.trigger"
#: The key of a data button's ``value`` object that carries the button's data.
DATA = "data"


def card_body(text: str, markdown: bool, rows: Keyboard) -> str:
    """The ``content`` of an ``interactive`` message: the text, then the buttons."""
    shown = {"tag": "lark_md" if markdown else "plain_text", "content": text}
    elements: list[dict[str, Any]] = [{"tag": "div", "text": shown}]
    for row in rows:
        actions = []
        for button in row:
            label = {"tag": "plain_text", "content": button.text}
            if button.url is not None:
                actions.append(
                    {"tag": "button", "text": label, "type": "default", "url": button.url}
                )
            else:
                value = {DATA: button.data}
                actions.append({"tag": "button", "text": label, "type": "primary", "value": value})
        elements.append({"tag": "action", "actions": actions})
    card = {"config": {"wide_screen_mode": True, "update_multi": True}, "elements": elements}
    return json.dumps(card, ensure_ascii=False)


def card_action(
    event: Mapping[str, Any], header: Mapping[str, Any], raw: dict[str, Any]
) -> Event | Dropped:
    """A ``card.action.trigger`` event's ``event`` part → a ``callback`` event, or why
    not. The caller has checked ``header.event_id``; anything else may be missing."""
    action = event.get("action")
    value = action.get("value") if isinstance(action, Mapping) else None
    if isinstance(value, str):  # a value may be a plain string on newer cards
        data: Any = value
    else:
        data = value.get(DATA) if isinstance(value, Mapping) else None
    if not isinstance(data, str) or not data:
        return Dropped(SKIPPED, "card action without button data (not one of our cards)")
    context = event.get("context")
    context = context if isinstance(context, Mapping) else {}
    chat_id = context.get("open_chat_id")
    if not isinstance(chat_id, str) or not chat_id:
        return Dropped(SKIPPED, "card action without context.open_chat_id")
    operator = event.get("operator")
    operator = operator if isinstance(operator, Mapping) else {}
    ids = {k: operator[k] for k in ("open_id", "union_id", "user_id") if _text(operator.get(k))}
    if not ids:
        return Dropped(SKIPPED, "card action without an operator id")
    message_id = context.get("open_message_id")
    meta: dict[str, Any] = {
        "event_id": header.get("event_id"),
        "tenant_key": header.get("tenant_key") or operator.get("tenant_key"),
        **ids,
    }
    return Event(
        key=f"fs:evt:{header['event_id']}",
        platform=PLATFORM,
        kind=Kind.CALLBACK,
        conversation=Conversation(platform=PLATFORM, chat_id=chat_id, chat_type="group"),
        sender=Sender(id=str(ids.get("open_id") or ids.get("union_id") or ids.get("user_id"))),
        message_id=message_id if _text(message_id) else None,
        text=data,
        timestamp=_millis(header.get("create_time")),
        meta={k: v for k, v in meta.items() if isinstance(v, str) and v},
        # The card's update token (valid 30 minutes) stays out of the store.
        raw={**raw, "event": {k: v for k, v in event.items() if k != "token"}},
    )


def _text(value: Any) -> bool:
    return isinstance(value, str) and bool(value)


def _millis(value: Any) -> datetime:
    try:
        return datetime.fromtimestamp(int(value) / 1000, UTC)
    except (TypeError, ValueError, OverflowError, OSError):
        return datetime.now(UTC)
