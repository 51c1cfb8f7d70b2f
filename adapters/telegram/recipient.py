"""What both readers of an update share (:mod:`.normalize` through PTB, :mod:`.plain`
from the dict): who the bot is, and how Telegram's chat types map to Tether's.

Its own module so that the two readers import it rather than each other.
"""

from __future__ import annotations

from dataclasses import dataclass

from tether.events import ChatType

PLATFORM = "telegram"
CHAT_TYPES: dict[str, ChatType] = {
    "private": "dm",
    "group": "group",
    "supergroup": "group",
    "channel": "channel",
}


@dataclass(frozen=True, slots=True)
class Recipient:
    """The bot the updates are for: what normalizing needs besides the payload.

    ``bot_id`` and ``username`` tell ``/cmd@us`` from ``/cmd@them``, a mention of us from
    one of someone else, and a reply to us from a reply to a person (``username`` is None
    until getMe answered). ``answer_groups`` and ``ignore_bots`` are the config's policy.
    """

    bot_id: int
    username: str | None = None
    answer_groups: str = "addressed"  # or "all"
    ignore_bots: bool = True
