"""The keys everything durable is found by, made and read in one place.

An inbound event's key is the platform's (``tg:{bot}:{update}``, ``dc:msg:{id}``, …,
DESIGN.md §3); what Tether derives from it is written here, so that no module splits a
key string on its own:

- an outbound message is ``{event}#{n}``, the ``n``-th platform message the event's
  checkpoint wrote (after splitting and files);
- the notice that an event was given up on is ``{event}#dead#{n}``: never ``#n``, which a
  successful re-run after ``tether dead retry`` writes;
- a streamed reply's preview is sent under ``{event}#preview`` (a platform that dedups on
  a key returns the same message for it);
- a room relay (an agent hearing another agent's reply) is the event
  ``room:{outbox key}:{listener}``;
- a sender is ``{platform}:{sender id}``, the name access and the flood limit know them by;
- a background task is the event ``task:{id}``, run in the lane (and with the memory) of
  the conversation ``task:{id}`` (``task@{agent}:{id}`` when it runs as another agent).

Outbox keys are parsed from the right: an event key may itself hold ``#`` (a room relay
names an outbox key), the part after the event's key never does.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from tether.events import Event

PREVIEW = "preview"
DEAD = "dead"
ROOM = "room:"
#: The platform of every task event (gateway/tasks/).
TASK_PLATFORM = "task"
#: Platforms whose "senders" are the operator or the gateway itself (the terminal, the
#: console's web chat, a cron fire): trusted by access, never flood-limited.
TRUSTED_PLATFORMS = frozenset({"console", "cron", "web"})

_OUTBOX = re.compile(r"(?P<event>.+?)(?P<dead>#dead)?#(?P<n>\d+)")
_PREVIEW = re.compile(r"(?P<event>.+)#preview")


@dataclass(frozen=True, slots=True)
class OutboxKey:
    """An outbox row's key read back: the event it answers and which message it is."""

    event: str
    #: Position among the event's messages (``#n``); None for a preview.
    index: int | None
    #: The dead-letter notice (``#dead#n``), not an answer.
    dead: bool = False

    @classmethod
    def parse(cls, key: str) -> OutboxKey:
        """ValueError for a key no checkpoint writes."""
        found = _OUTBOX.fullmatch(key)
        if found:
            return cls(found["event"], int(found["n"]), dead=found["dead"] is not None)
        found = _PREVIEW.fullmatch(key)
        if found:
            return cls(found["event"], None)
        raise ValueError(f"not an outbox key: {key!r}")

    @property
    def preview(self) -> bool:
        return self.index is None

    @property
    def first(self) -> bool:
        """The first message of an answer: the one that quotes, or edits a preview."""
        return self.index == 0 and not self.dead

    def __str__(self) -> str:
        if self.index is None:
            return preview_key(self.event)
        return dead_key(self.event, self.index) if self.dead else outbox_key(self.event, self.index)


def outbox_key(event: str, index: int) -> str:
    return f"{event}#{index}"


def dead_key(event: str, index: int) -> str:
    """Where the notice of a given-up event goes: ``dead_key(event, n)``."""
    return f"{event}#{DEAD}#{index}"


def dead_prefix(event: str) -> str:
    """The prefix :func:`dead_key` numbers from (the pipeline splits the notice like any
    reply, then numbers its chunks)."""
    return f"{event}#{DEAD}"


def preview_key(event: str) -> str:
    return f"{event}#{PREVIEW}"


def event_of(outbox: str) -> str:
    """The event key an outbox key answers (``{event}#{n}`` → ``{event}``)."""
    return OutboxKey.parse(outbox).event


def is_preview(key: str) -> bool:
    """Is this outbox key a streamed reply's preview (sent before the checkpoint)?"""
    return _PREVIEW.fullmatch(key) is not None


def first_of_answer(key: str) -> bool:
    """Is this the first message of an answer (``#0``): the one that quotes the message
    answered, edits a preview, or completes a Discord interaction? False for any key no
    checkpoint writes (a preview, a test's own)."""
    try:
        return OutboxKey.parse(key).first
    except ValueError:
        return False


def room_key(outbox: str, listener: str) -> str:
    """The relay event that lets agent ``listener`` hear the reply sent as ``outbox``."""
    return f"{ROOM}{outbox}:{listener}"


def is_task(event: str) -> bool:
    """Is this a background task's own event (started by an admitted turn, not a person)?"""
    return event.startswith(f"{TASK_PLATFORM}:")


def is_task_lane(conversation: str) -> bool:
    """Is this lane (a conversation's key) a background task's (``task:{id}``, or
    ``task@{agent}:{id}``)? Its work is memoized steps: a stop may cut it off at once,
    and the next start resumes it, where a chat's turn is let finish."""
    platform = conversation.split(":", 1)[0]
    return platform.partition("@")[0] == TASK_PLATFORM and ":" in conversation


def is_relay(event: str) -> bool:
    """Is this event another agent's reply relayed in a room (not a person's message)?"""
    return event.startswith(ROOM)


def sender_name(event: Event) -> str:
    """``platform:sender id``, the name access and the flood limit know a sender by."""
    return f"{event.platform}:{event.sender.id}" if event.sender else event.platform


def owner_of(event: Event, session: str) -> str | None:
    """Whose conversation ``session`` is, for recall's scope (DESIGN §13): the person of a
    DM or of their own session in a group (``platform:user``); a task's, its starter;
    None for a chat several people share, or an event without a person (a cron fire).

    What a person said in their own conversations is searchable from any of them and
    from nowhere else; a shared chat's turns only from within that chat."""
    if is_task(event.key):
        spec = event.meta.get(TASK_PLATFORM)
        sender = spec.get("sender") if isinstance(spec, dict) else None
        return sender if isinstance(sender, str) and sender else None
    if event.sender is None or event.sender.is_bot:
        return None
    if event.conversation.chat_type == "dm" or session != event.conversation.key:
        return sender_name(event)
    return None


def writer_of(event: Event) -> str | None:
    """Who is writing ``event`` (``platform:user``), the person whose person-facts its turn
    sees (:mod:`tether.memory.people`): the sender; a task's, its starter; None for an
    event without a person (a cron fire) or from a bot."""
    if is_task(event.key):
        spec = event.meta.get(TASK_PLATFORM)
        sender = spec.get("sender") if isinstance(spec, dict) else None
        return sender if isinstance(sender, str) and sender else None
    if event.sender is None or event.sender.is_bot or event.platform == "cron":
        return None
    return sender_name(event)


def task_key(task_id: str) -> str:
    """The key of task ``task_id``'s event (DESIGN §13)."""
    return f"{TASK_PLATFORM}:{task_id}"
