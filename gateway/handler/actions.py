"""``ctx.edit``, ``delete``, ``react``, ``pin`` and ``answer``: acting on messages in the chat.

What aiogram's ``message.edit_text``/``delete``/``react``/``pin`` and
``callback.answer`` do (PTB's ``query.edit_message_text``, ``query.answer``), but
durably: each call queues an outbox row, committed with the event's checkpoint and
performed after it, like a reply. A re-run of the turn (a retry, a crash) queues the same
rows under the same keys, so the inbox's one run per event makes it one edit, one
deletion, one answer; the outbox repeats them safely after a crash, since each is
idempotent (``gateway/core/edits.py``).

The message acted on is the event's own unless ``message_id`` says otherwise: for a
button press, the message the button sits under (so ``await ctx.edit("Booked ✓")``
changes the pressed message); for a message, the person's message (delete, react, pin).
What a platform cannot do is refused here, when it is called, with
:class:`~tether.errors.ActionUnsupported` naming the platform and the action, before
anything is queued.
"""

from __future__ import annotations

from typing import Any

from tether.adapters.base import Adapter
from tether.buttons import ButtonsSpec, keyboard
from tether.errors import ActionUnsupported
from tether.events import ACTION_META, EDIT_META, Event, Kind, OutMessage

#: What each verb says in an error: "telegram cannot {this} messages".
_SAID = {"delete": "delete", "react": "react to", "pin": "pin", "answer": "answer presses on"}


class Actions:
    """The context's platform actions; :class:`~tether.gateway.handler.context.Context`
    supplies the event, its outbox and the adapters (:meth:`_adapter_for`)."""

    event: Event
    outbox: list[OutMessage]

    def _adapter_for(self, platform: str) -> Adapter:
        raise NotImplementedError

    async def edit(
        self,
        text: str,
        *,
        message_id: str | None = None,
        format: str = "plain",
        buttons: ButtonsSpec | None = None,
    ) -> None:
        """Replace the text (and the buttons: none unless ``buttons``) of one of the bot's
        messages, by default the one whose button was pressed. An edit the platform
        refuses (the message was deleted) is sent as a new message instead."""
        adapter = self._adapter_for(self.event.platform)
        if "edit" not in adapter.actions:  # can_edit alone may be for a preview only (web)
            raise ActionUnsupported(f"{self.event.platform} cannot edit messages")
        if not text:
            raise ValueError("ctx.edit needs the new text")
        target_id = self._message("edit", message_id, pressed_only=True)
        if format not in ("plain", "html", "markdown"):
            raise ValueError(f"format must be plain, html or markdown, not {format!r}")
        self.outbox.append(
            OutMessage(
                target=self.event.conversation.target(),
                text=text,
                format=format,  # type: ignore[arg-type]  # checked above
                meta={EDIT_META: target_id},
                buttons=keyboard(buttons),
            )
        )

    async def delete(self, message_id: str | None = None) -> None:
        """Delete a message: by default the event's (the pressed message, or the
        person's, where the bot may delete it)."""
        self._queue("delete", message_id)

    async def react(self, emoji: str, *, message_id: str | None = None) -> None:
        """Put the bot's reaction ``emoji`` (``"👍"``) on the event's message (or
        ``message_id``). Telegram takes only its own set of reaction emoji."""
        if not emoji.strip():
            raise ValueError("ctx.react needs an emoji")
        self._queue("react", message_id, emoji=emoji)

    async def pin(self, message_id: str | None = None, *, unpin: bool = False) -> None:
        """Pin the event's message (or ``message_id``) in its chat; ``unpin=True`` undoes it."""
        self._queue("pin", message_id, do="unpin" if unpin else "pin")

    async def answer(self, text: str = "", *, alert: bool = False) -> None:
        """Answer the button press this event is: ``text`` as a toast over the chat, or a
        dialog the person closes when ``alert``. Presses are answered without text when
        the handler does not; one answered too late for the platform (Telegram, after a
        grace of about a second) gets ``text`` as a message instead."""
        event = self.event
        if event.kind is not Kind.CALLBACK:
            said = f"ctx.answer answers a button press; this event is a {event.kind}"
            raise ActionUnsupported(said)
        adapter = self._adapter_for(event.platform)
        if "answer" not in adapter.actions:
            raise ActionUnsupported(f"{event.platform} cannot answer presses on messages")
        adapter.claim_press(event)
        action = {"do": "answer", "alert": alert, "press": dict(event.meta)}
        self.outbox.append(
            OutMessage(target=event.conversation.target(), text=text, meta={ACTION_META: action})
        )

    def _queue(self, verb: str, message_id: str | None, **action: Any) -> None:
        platform = self.event.platform
        if verb not in self._adapter_for(platform).actions:
            raise ActionUnsupported(f"{platform} cannot {_SAID[verb]} messages")
        action = {"do": verb, "message_id": self._message(verb, message_id), **action}
        self.outbox.append(
            OutMessage(target=self.event.conversation.target(), text="", meta={ACTION_META: action})
        )

    def _message(self, verb: str, message_id: str | None, *, pressed_only: bool = False) -> str:
        """The message ``verb`` acts on: ``message_id``, or the event's own."""
        if message_id:
            return str(message_id)
        event = self.event
        if pressed_only and event.kind is not Kind.CALLBACK:
            raise ActionUnsupported(
                f"ctx.{verb} edits the pressed message of a button press; "
                f"for a {event.kind}, pass message_id= (one of the bot's messages)"
            )
        if not event.message_id:
            said = f"this {event.kind} names no message to {verb}; pass message_id="
            raise ActionUnsupported(said)
        return event.message_id
