"""What both readers of an update share (:mod:`.normalize` through PTB, :mod:`.plain`
from the dict): who the bot is, how Telegram's chat types map to Tether's, and which
group messages are not for the bot, and who a message mentions.

Its own module so that the two readers import it rather than each other.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from tether.adapters.kit import Dropped
from tether.adapters.telegram.content import mentioned_by_name
from tether.events import ChatType, parse_command

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


def unaddressed(
    chat_type: ChatType, said: str, addressed: bool, recipient: Recipient
) -> Dropped | None:
    """Why a group message is not for this bot, or None when it is: in a group the bot
    answers only commands, mentions and replies to it, unless ``answer_groups: all``."""
    if chat_type != "group" or recipient.answer_groups != "addressed" or addressed:
        return None
    reason = (
        "command for another bot"
        if said.startswith("/") and parse_command(said) is not None
        else "group message not addressed to the bot"
    )
    return Dropped("telegram.ignored", reason)


def read_mentions(
    found: Iterable[str | int], said: str, recipient: Recipient
) -> tuple[list[str], bool]:
    """Who a message mentions, in entity order, and whether one is us: an ``int`` is a
    text mention's user id, a ``str`` an ``@username`` mention's text (kept without the
    @). A ``@us`` typed without a mention entity counts too (iOS formatted text)."""
    names: list[str] = []
    ours = False
    me = (recipient.username or "").lower()
    for item in found:
        if isinstance(item, int):
            names.append(str(item))
            ours = ours or item == recipient.bot_id
        else:
            name = item.lstrip("@")
            names.append(name)
            ours = ours or (bool(me) and name.lower() == me)
    typed = None if ours else mentioned_by_name(said, recipient.username)
    if typed is not None:
        names.append(typed)
    return names, ours or typed is not None
