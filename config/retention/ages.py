"""``memory.retention``: how long each class of stored data is kept, and the floor that
keeps dedup's promise.

Every class is kept forever unless given an age (``30d``, ``12h``, ``90m``, ``1d12h`` or
seconds): an install that says nothing loses nothing. The background pruner
(gateway/ops/pruner.py) deletes what is older, in small batches; the store's side is
memory/retention/.

The inbox's keys are what refuses a platform's redelivery, so a finished inbox row may
not go before the longest redelivery window of the platforms enabled (the table below,
from PLATFORMS.md): a shorter ``memory.retention.inbox`` is refused at load, and so by
``tether check``, at that key.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Annotated, Any

from pydantic import BeforeValidator, Field, ValidationError
from pydantic_core import InitErrorDetails, PydanticCustomError

from tether.config.section import Section

_DURATION = re.compile(r"(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?")
HOUR = 3600.0

#: How long after an event a platform may deliver it again, seconds: what a finished
#: inbox row (its key) must outlive. Telegram keeps an unconfirmed update 24 h (getUpdates)
#: and retries a webhook until it is answered; Discord replays a session's events on a
#: RESUME (minutes) and a backfill reads after the stored cursor, kept to the same day as
#: its ``backfill_hours``; Feishu retries after 15 s, 5 min, 1 h and 6 h (and duplicates
#: after success: its docs ask for keys kept 8 h); Slack retries an unanswered Events API
#: post three times (at once, after 1 and 5 minutes) and resends an unacknowledged Socket
#: Mode envelope until it is acknowledged or the app is disabled for failing (within the
#: hour), so an hour; the console and the web chat read what is typed once, in this
#: process, and never send it again.
REDELIVERY_WINDOWS: dict[str, float] = {
    "telegram": 24 * HOUR,
    "discord": 24 * HOUR,
    "feishu": 8 * HOUR,
    "slack": 1 * HOUR,
    "console": 0.0,
    "web": 0.0,
    "loopback": 0.0,
}


def duration(value: Any) -> Any:
    """Seconds from ``30d``, ``12h``, ``90m``, ``45s`` or a combination (``1d12h``); a
    number is seconds already, and anything else is left for the type to refuse."""
    if not isinstance(value, str) or not value.strip():
        return value
    match = _DURATION.fullmatch(value.strip())
    if not match or not any(match.groups()):
        raise ValueError("expected seconds or a duration like 90s, 30m, 12h, 30d, 1d12h")
    days, hours, minutes, seconds = (int(group or 0) for group in match.groups())
    return float(((days * 24 + hours) * 60 + minutes) * 60 + seconds)


#: An age in seconds, written as a duration; ``null``: kept forever. The ``gt`` sits on the
#: number alone: on the union, pydantic applied it to ``null`` too and raised a bare
#: TypeError (a traceback from ``tether check`` for the documented ``inbox: null``).
Age = Annotated[
    Annotated[float, Field(gt=0)] | None, BeforeValidator(duration), Field(default=None)
]

#: The classes, in the order a pass prunes them: dead letters before the inbox rows they
#: hold, the inbox rows (with their steps) before the payloads and steps of the rows that
#: stay, outbox rows before the blobs they name.
CLASSES = (
    "outbox",
    "history",
    "dead_letters",
    "inbox",
    "payloads",
    "steps",
    "blobs",
    "audit",
)


class RetentionConfig(Section):
    """Per class of data, the age past which it is deleted; ``null`` (the default):
    kept forever. Nothing still in flight is ever touched (docs/operations.md)."""

    #: The platform's payload of a finished event (``raw``: names, contacts, locations,
    #: and its text and attachments): reduced to its key, kinds and ids; the row stays.
    payloads: Age = None
    #: Finished inbox rows (done, or dead with no dead letter left): the dedup keys. At
    #: least the longest redelivery window of the platforms enabled.
    inbox: Age = None
    #: The memoized steps of finished events (model outputs, tool results).
    steps: Age = None
    #: Outbox rows sent.
    outbox: Age = None
    #: Stored files no outbox row names any more (never within an hour of being stored:
    #: a running handler stores its files before the rows that name them).
    blobs: Age = Field(default=None, ge=HOUR)
    #: Turns that compaction has folded into their conversation's summary (the summary
    #: stays); turns not yet summarized are kept whatever their age.
    history: Age = None
    #: Dead letters (their snapshot and traceback).
    dead_letters: Age = None
    #: The record of inbox moves (retries, dead letters, requeues), ended waits and
    #: finished tasks, and erasure records.
    audit: Age = None
    #: Seconds between pruning passes (a pass deletes all that is due, in batches).
    interval: Annotated[float, BeforeValidator(duration)] = Field(default=300.0, gt=0)
    #: Rows one statement deletes at most: each batch is one short transaction.
    batch: int = Field(default=500, ge=1, le=5000)

    def ages(self) -> dict[str, float]:
        """The classes with an age, in pruning order."""
        found = {name: getattr(self, name) for name in CLASSES}
        return {name: age for name, age in found.items() if age is not None}


def longest_window(platforms: Iterable[str]) -> tuple[float, str]:
    """The longest redelivery window of ``platforms`` and whose it is (``0.0, ""`` when
    none redelivers)."""
    best, whose = 0.0, ""
    for platform in platforms:
        window = REDELIVERY_WINDOWS.get(platform, 24 * HOUR)  # an unknown one: a day
        if window > best:
            best, whose = window, platform
    return best, whose


def enabled_platforms(settings: Any) -> set[str]:
    """The platforms ``settings`` (a :class:`~tether.config.schema.Settings`) receive
    from: its ``platforms:`` and every agent's accounts."""
    platforms = settings.platforms
    found = {name for name in ("console", "web") if getattr(platforms, name).enabled}
    chats = ("telegram", "discord", "feishu", "slack")
    found |= {name for name in chats if getattr(platforms, name)}
    for agent in settings.agents:
        found |= set(agent.platforms.enabled())
    return found


def check_inbox_retention(retention: RetentionConfig, platforms: Iterable[str]) -> None:
    """Raise a :class:`ValidationError` at ``memory.retention.inbox`` when it is shorter
    than the longest redelivery window of ``platforms``: a redelivery after its key is
    gone would be answered again."""
    if retention.inbox is None:
        return
    window, whose = longest_window(platforms)
    if retention.inbox >= window:
        return
    reason = (
        f"{_spell(retention.inbox)} is shorter than {whose}'s redelivery window of"
        f" {_spell(window)}: a redelivery after its key is pruned would be answered again"
        f" (at least {_spell(window)}; docs/operations.md#retention)"
    )
    raise ValidationError.from_exception_data(
        "Settings",
        [
            InitErrorDetails(
                type=PydanticCustomError("retention_window", "{reason}", {"reason": reason}),
                loc=("memory", "retention", "inbox"),
                input=retention.inbox,
            )
        ],
    )


def _spell(seconds: float) -> str:
    if seconds >= HOUR and seconds % HOUR == 0:
        return f"{int(seconds // HOUR)}h"
    return f"{seconds:g}s"
