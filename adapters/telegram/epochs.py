"""Update ids restart: the epoch an update belongs to, so that its key does not repeat.

Telegram numbers a bot's updates in sequence, except that after a week without updates
the next ``update_id`` is chosen at random (the Bot API's words): it can be below every id
seen before, or equal to one answered long ago. ``update_id`` alone is a dedup key only
within a run of updates without such a pause, so Tether numbers the runs, as epochs:

- Epoch 0 is where every bot starts. Its keys are ``tg:{bot_id}:{update_id}``, the keys
  Tether always made: rows a store holds from before epochs still make a redelivery of
  their update a duplicate.
- After :data:`QUIET` (three days) without an update, the next update starts epoch n+1,
  and its keys are ``tg:{bot_id}:e{n}:{update_id}`` (``tg:7:e1:1000``).

Why three days: a redelivery comes within a day (Telegram keeps an unconfirmed update 24
hours, a webhook's retries end with it), and ids restart only after a week. Three days
is past the first and short of the second even when a commit lagged its update by a day,
so a redelivery always keeps its key and a restarted id never gets an old one.

The epoch and when an update of it was last committed are the cursor
``telegram:{bot_id}:epoch``, JSON ``{"epoch": n, "seen": unix seconds}``, committed in the
transaction of the updates it keys: no crash leaves keys of an epoch the store does not
know, or an epoch that looks older than its updates. ``seen`` is rewritten at most every
:data:`REFRESH`, so a webhook under load commits most updates without a cursor. A store
from before epochs has no such cursor; the last move of its offset cursor stands in.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import structlog

if TYPE_CHECKING:
    from tether.adapters.base import Ingress

log = structlog.get_logger("tether.telegram")

#: Seconds without an update after which the next one starts an epoch.
QUIET = 3 * 24 * 3600.0
#: Seconds between rewrites of an epoch's ``seen`` while updates keep coming.
REFRESH = 3600.0


@dataclass(frozen=True, slots=True)
class Epoch:
    number: int
    #: When an update of this epoch was last committed (to within :data:`REFRESH`).
    seen: float


def update_key(bot_id: int, update_id: int, epoch: int = 0) -> str:
    """An update's inbox key: ``tg:{bot_id}:{update_id}`` in epoch 0, else with the epoch."""
    if epoch == 0:
        return f"tg:{bot_id}:{update_id}"
    return f"tg:{bot_id}:e{epoch}:{update_id}"


def epoch_cursor(bot_id: int) -> str:
    """The store cursor holding the bot's epoch (see the module's docstring)."""
    return f"telegram:{bot_id}:epoch"


def offset_cursor(bot_id: int) -> str:
    """The store cursor holding the top update_id of the last batch the poller committed."""
    return f"telegram:{bot_id}:offset"


def choose(known: Epoch | None, now: float) -> tuple[Epoch, bool]:
    """The epoch of an update committed at ``now``, given the stored one (None before a
    bot's first update), and whether the cursor must be written with the update."""
    if known is None:
        return Epoch(0, now), True
    if now - known.seen >= QUIET:
        return Epoch(known.number + 1, now), True
    if now - known.seen >= REFRESH:
        return Epoch(known.number, now), True
    return known, False


def dump(epoch: Epoch) -> str:
    return json.dumps({"epoch": epoch.number, "seen": round(epoch.seen, 3)})


def parse(value: str) -> Epoch | None:
    """The cursor's value read back, or None when it is not one :func:`dump` writes."""
    try:
        data: Any = json.loads(value)
    except ValueError:
        return None
    if not isinstance(data, dict):
        return None
    number, seen = data.get("epoch"), data.get("seen")
    if type(number) is not int or number < 0:
        return None
    if not isinstance(seen, int | float) or isinstance(seen, bool) or seen != seen:
        return None  # a bool is no time, nor is NaN
    return Epoch(number, float(seen))


@dataclass(frozen=True, slots=True)
class Choice:
    """What :meth:`Epochs.choose` decided for the updates committed now."""

    epoch: Epoch
    #: Commit these with the updates (the epoch cursor, when it must be written).
    cursors: dict[str, str] = field(default_factory=dict)
    #: The stored epoch it was decided from, if there was one.
    before: Epoch | None = None


class Epochs:
    """One bot's epoch, kept as it was last read or committed.

    The copy decides while it says the bot was active lately. Once it looks quiet it is
    read again first: another instance (a webhook behind a load balancer, the poller
    after a takeover) may have committed updates, or started an epoch, since.
    """

    def __init__(self, bot_id: int) -> None:
        self.bot_id = bot_id
        self._cursor = epoch_cursor(bot_id)
        self._known: Epoch | None = None

    async def choose(self, inbox: Ingress, now: float) -> Choice:
        """The epoch for updates committed at ``now``; commit ``cursors`` with them."""
        known = self._known
        if known is None or now - known.seen >= QUIET:
            known = await self._load(inbox, now)
        epoch, write = choose(known, now)
        return Choice(epoch, {self._cursor: dump(epoch)} if write else {}, known)

    def committed(self, choice: Choice) -> None:
        """``choice``'s updates and cursors are in the store."""
        self._known = choice.epoch
        before = choice.before
        if before is not None and choice.epoch.number != before.number:
            log.info(
                "telegram.epoch_started",
                bot_id=self.bot_id,
                epoch=choice.epoch.number,
                # None: a store from before epochs, whose last update is not known exactly
                quiet_s=round(choice.epoch.seen - before.seen) if before.seen else None,
                reason="no update for days: Telegram may have restarted its update ids",
            )

    async def _load(self, inbox: Ingress, now: float) -> Epoch | None:
        value = await inbox.cursor(self._cursor)
        if value is not None:
            stored = parse(value)
            if stored is not None:
                return stored
            # Not a value Tether writes: nothing says which keys are taken, so start an
            # epoch no earlier one can have had (at worst a redelivery is answered again).
            log.error(
                "telegram.epoch_unreadable",
                cursor=self._cursor,
                value=value[:80],
                action="starting a new epoch",
            )
            return Epoch(int(now), 0.0)
        # A store from before epochs keyed its updates as epoch 0. Its offset cursor moved
        # with every batch: within QUIET its updates may still come again; before, not.
        offset = offset_cursor(self.bot_id)
        if await inbox.cursor(offset) is None:
            return None
        moved = await inbox.recent_cursors(offset, now - QUIET)
        return Epoch(0, now - REFRESH if offset in moved else 0.0)
