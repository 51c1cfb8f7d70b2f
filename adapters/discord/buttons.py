"""Buttons on Discord: message components out, component interactions (presses) in.

Out: a keyboard is action rows of buttons, ``custom_id`` = the button's data (style
primary), a link button (style 5) for a url. discord.py only sends components from a
``View``, which it then keeps in memory to dispatch presses to Python callbacks; Tether
routes presses through the inbox instead, so the message goes out through discord.py's
HTTP client with the components in the payload, the same nonce and allowed mentions as
any send (:mod:`.send`).

In: a press is an INTERACTION_CREATE of type 3 (MESSAGE_COMPONENT). :func:`press` makes
it a ``callback`` event keyed ``dc:int:{interaction id}`` — the gateway may deliver one
twice (a RESUME replays), and the inbox admits the key once. :class:`Presses` commits it
and only then acknowledges it with a DEFERRED_UPDATE_MESSAGE (type 6: "got it", the
message stays as it is), within Discord's 3 s and long before the handler has run. A
redelivered press is acknowledged again: if the first run crashed between commit and
acknowledgement, this is the acknowledgement; otherwise Discord refuses it as answered
already, which is logged and harmless.

Answering a press (``ctx.answer``, the call in :mod:`.edit`): it was acknowledged
already, so a toast is an ephemeral follow-up message (flags 64: only the person who
pressed sees it) through the interaction's webhook. The token that allows it lasts 15
minutes: it is in the event's ``meta`` (:data:`TOKEN_META`), stored with it as ``/ask``'s
is, and left out of ``raw``. A follow-up before the acknowledgement is refused (Unknown
Webhook), so an answer first waits for its press's acknowledgement while this process is
still making it (:meth:`Presses.acknowledged`).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Coroutine, Mapping
from typing import TYPE_CHECKING, Any

import discord
import structlog
from discord.http import Route, handle_message_parameters

from tether import metrics
from tether.adapters.base import Sent
from tether.adapters.discord import read
from tether.adapters.discord.normalize import PLATFORM, SKIPPED, interaction_origin
from tether.adapters.kit import Dropped, describe
from tether.adapters.untrusted import unstorable
from tether.buttons import Keyboard
from tether.events import Event, Kind, OutMessage

if TYPE_CHECKING:
    from tether.adapters.base import Ingress

log = structlog.get_logger("tether.discord")

#: INTERACTION_CREATE ``type`` of a press on a message component.
MESSAGE_COMPONENT = 3
#: Component types: an action row, and a button.
_ROW, _BUTTON = 1, 2
_PRIMARY, _LINK = 1, 5
#: Interaction response type: acknowledge a component press, leave the message as is.
DEFERRED_UPDATE_MESSAGE = 6
#: ``Event.meta`` key of a press: the interaction's token, for ``ctx.answer``'s follow-up.
TOKEN_META = "interaction_token"
#: Message flag: only the person who pressed sees the follow-up.
EPHEMERAL = 1 << 6


def components(rows: Keyboard) -> list[dict[str, Any]]:
    """The ``components`` of a message: one action row per keyboard row."""
    return [
        {
            "type": _ROW,
            "components": [
                {"type": _BUTTON, "style": _LINK, "label": button.text, "url": button.url}
                if button.url is not None
                else {
                    "type": _BUTTON,
                    "style": _PRIMARY,
                    "label": button.text,
                    "custom_id": button.data,
                }
                for button in row
            ],
        }
        for row in rows
    ]


async def send_with_buttons(
    client: discord.Client,
    message: OutMessage,
    nonce: str,
    mentions: discord.AllowedMentions,
) -> Sent:
    """Create the message with its components, idempotent by ``nonce`` like any send."""
    reference = None
    if message.reply_to and message.reply_to.isdigit():
        reference = {
            "message_id": int(message.reply_to),
            "channel_id": int(message.target.chat_id),
            "fail_if_not_exists": False,  # the quoted message may be gone: send anyway
        }
    params = handle_message_parameters(content=message.text, nonce=nonce, allowed_mentions=mentions)
    payload = params.payload
    assert payload is not None  # JSON, not multipart: no files
    if reference is not None:
        payload["message_reference"] = reference
    payload["components"] = components(message.buttons)
    with params:
        data = await client.http.send_message(int(message.target.chat_id), params=params)
    return Sent(platform_id=str(data.get("id")) if isinstance(data, Mapping) else None)


def is_press(data: Any) -> bool:
    """Is this INTERACTION_CREATE ``d`` a press on a component (not a slash command)?"""
    return isinstance(data, Mapping) and data.get("type") == MESSAGE_COMPONENT


def press(data: Any) -> Event | Dropped:
    """A component interaction → a ``callback`` event (``text`` = the button's
    ``custom_id``), or why not. Pure, and never raises."""
    try:
        return _press(read.mapping(data, "interaction"))
    except read.Malformed as exc:
        return Dropped(SKIPPED, f"malformed: {exc}")
    except Exception as exc:  # a shape nobody foresaw: skip it, never fail ingress
        return Dropped(SKIPPED, f"cannot normalize: {describe(exc)}")


def _press(data: Mapping[str, Any]) -> Event | Dropped:
    interaction_id = read.snowflake(data.get("id"), "id")
    if data.get("type") != MESSAGE_COMPONENT:
        return Dropped(SKIPPED, f"not a component interaction (type {data.get('type')!r})")
    pressed = read.mapping(data.get("data"), "data")
    if pressed.get("component_type") != _BUTTON:
        return Dropped(SKIPPED, f"unsupported component type {pressed.get('component_type')!r}")
    custom_id = read.text(pressed.get("custom_id"), "data.custom_id")
    if not custom_id:
        return Dropped(SKIPPED, "data.custom_id: empty")
    if not read.text(data.get("token"), "token"):  # it could never be acknowledged
        return Dropped(SKIPPED, "token: missing")
    conversation, sender, meta = interaction_origin(data, interaction_id)
    meta[TOKEN_META] = read.text(data.get("token"), "token")
    on = data.get("message")
    message_id = read.snowflake(on.get("id"), "message.id") if isinstance(on, Mapping) else None
    return Event(
        key=f"dc:int:{interaction_id}",
        platform=PLATFORM,
        kind=Kind.CALLBACK,
        conversation=conversation,
        sender=sender,
        message_id=message_id,
        text=custom_id,
        timestamp=read.created(interaction_id),
        meta=meta,
        # The token answers the interaction for 15 minutes: in meta for that (ctx.answer),
        # and only there.
        raw={key: value for key, value in data.items() if key != "token"},
    )


class Presses:
    """Commit each press, then acknowledge it; one task per press, off the read loop."""

    def __init__(
        self,
        inbox: Callable[[], Ingress | None],
        client: Callable[[], discord.Client | None],
        spawn: Callable[[Coroutine[Any, Any, None]], None],
    ) -> None:
        self._inbox = inbox
        self._client = client
        self._spawn = spawn
        #: Presses taken whose acknowledgement has not ended yet, by interaction id.
        self._acking: dict[str, asyncio.Event] = {}

    async def acknowledged(self, interaction_id: str, timeout: float) -> None:
        """Return once press ``interaction_id``'s acknowledgement has ended (at once for
        a press this process is not acknowledging), or after ``timeout`` seconds."""
        acking = self._acking.get(interaction_id)
        if acking is not None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(acking.wait(), timeout)

    def take(self, data: Any) -> None:
        """The read loop's hook for a component INTERACTION_CREATE (before discord.py's
        parser, which finds no View for it and leaves it alone)."""
        inbox = self._inbox()
        outcome = press(data)
        if isinstance(outcome, Event) and (reason := unstorable(outcome)):
            outcome = Dropped(SKIPPED, reason)
        if isinstance(outcome, Dropped):
            ident = read.id_or_none(data.get("id")) if isinstance(data, Mapping) else None
            log.warning(outcome.log_event, reason=outcome.reason, interaction_id=ident)
            return
        if inbox is None:  # stopping: unacknowledged, the person sees it failed
            log.warning("discord.interaction_dropped", reason="stopping")
            return
        self._acking.setdefault(str(outcome.meta["interaction_id"]), asyncio.Event())
        self._spawn(self._commit_then_ack(inbox, outcome, str(data["token"])))

    async def _commit_then_ack(self, inbox: Ingress, event: Event, token: str) -> None:
        interaction_id = event.meta["interaction_id"]
        try:
            await self._ack(inbox, event, token)
        finally:  # done, failed or cancelled: an answer waiting for it goes ahead
            acking = self._acking.pop(str(interaction_id), None)
            if acking is not None:
                acking.set()

    async def _ack(self, inbox: Ingress, event: Event, token: str) -> None:
        interaction_id = event.meta["interaction_id"]
        try:
            (fresh,) = await inbox.accept([event])
        except Exception as exc:  # not stored: not acknowledged either
            log.error("discord.accept_failed", interaction_id=interaction_id, error=describe(exc))
            return
        client = self._client()
        if client is None:
            return
        route = Route(
            "POST",
            "/interactions/{interaction_id}/{interaction_token}/callback",
            interaction_id=int(interaction_id),
            interaction_token=token,
        )
        try:
            await client.http.request(route, json={"type": DEFERRED_UPDATE_MESSAGE})
        except (TimeoutError, discord.HTTPException, OSError) as exc:
            metrics.labelled(metrics.PRESS_ACKS, PLATFORM, "failed").inc()
            emit = log.info if not fresh else log.warning  # a replay was answered before
            emit("discord.press_ack_failed", interaction_id=interaction_id, error=describe(exc))
            return
        metrics.labelled(metrics.PRESS_ACKS, PLATFORM, "ok").inc()
        log.info("discord.press_acked", interaction_id=interaction_id, duplicate=not fresh)
