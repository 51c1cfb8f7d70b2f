"""The epoch rule of adapters/telegram/epochs.py, against a model of Telegram's ids.

Telegram's side, as its docs and PLATFORMS.md state it: update ids go up by one (or more)
from one update to the next, but after a week without updates the next id is anyone's
guess; an update is delivered within a day of being made (or never), and an unconfirmed
one may be delivered again within that day. Hypothesis draws such histories, with ids
drawn from a small range so that a restarted id often meets an old one, and runs the
store's side of them through :func:`choose` as the ingress does. Two promises must hold:
every delivery of one update gets one key, and two updates never share a key.
"""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import given
from hypothesis import strategies as st

from tether.adapters.telegram.epochs import QUIET, REFRESH, Epoch, choose, dump, parse, update_key

HOUR = 3600.0
DAY = 24 * HOUR
WEEK = 7 * DAY
#: Telegram keeps an unconfirmed update this long: deliveries end with it.
KEPT = DAY

gaps = st.one_of(
    st.floats(0, 2 * HOUR),  # a chat going on
    st.floats(2 * HOUR, 4 * DAY),  # quiet for hours, or days short of a week
    st.floats(WEEK, 3 * WEEK),  # a week or more: the next id is random
)


@dataclass(frozen=True)
class Update:
    number: int  # which update (the model's own name for it)
    update_id: int
    made: float


@st.composite
def histories(draw: st.DrawFn) -> list[tuple[float, Update]]:
    """Deliveries of updates, in the order they reach the store: (when, update)."""
    made, update_id, last_delivery = 0.0, draw(st.integers(1, 50)), 0.0
    deliveries: list[tuple[float, Update]] = []
    for number in range(draw(st.integers(1, 25))):
        gap = draw(gaps) if number else 0.0
        made += gap
        if gap >= WEEK:
            update_id = draw(st.integers(1, 50))  # random: often one seen before
        elif number:
            update_id += draw(st.integers(1, 3))  # ids go up, and can jump
        update = Update(number, update_id, made)
        # Delivered in order, within the day it is kept (a backlog after downtime lags).
        first = max(last_delivery, made + draw(st.floats(0, KEPT)))
        if first > made + KEPT:
            continue  # expired before anyone polled: Telegram's loss, not the store's
        last_delivery = first
        deliveries.append((first, update))
        for _ in range(draw(st.integers(0, 2))):  # committed, not confirmed: handed over again
            deliveries.append((draw(st.floats(first, made + KEPT)), update))
    return sorted(deliveries, key=lambda delivery: delivery[0])


@given(histories())
def test_every_delivery_of_an_update_keeps_its_key_and_no_two_updates_share_one(
    history: list[tuple[float, Update]],
) -> None:
    stored: Epoch | None = None
    keys: dict[int, set[str]] = {}
    for when, update in history:
        epoch, write = choose(stored, when)
        if write:  # committed with the update, read back as the next choice reads it
            stored = parse(dump(epoch))
        keys.setdefault(update.number, set()).add(update_key(7, update.update_id, epoch.number))
    assert all(len(found) == 1 for found in keys.values()), keys
    every = [key for found in keys.values() for key in found]
    assert len(every) == len(set(every)), keys


def test_keys_of_epoch_zero_are_the_keys_tether_always_made() -> None:
    assert update_key(123456, 1000) == "tg:123456:1000"
    assert update_key(123456, 1000, 0) == "tg:123456:1000"
    assert update_key(123456, 1000, 2) == "tg:123456:e2:1000"


def test_an_epoch_starts_after_three_quiet_days_and_is_rewritten_hourly() -> None:
    assert choose(None, 100.0) == (Epoch(0, 100.0), True)
    known = Epoch(4, 100.0)
    assert choose(known, 100.0 + REFRESH - 1) == (known, False)
    assert choose(known, 100.0 + REFRESH) == (Epoch(4, 100.0 + REFRESH), True)
    assert choose(known, 100.0 + QUIET - 1) == (Epoch(4, 100.0 + QUIET - 1), True)
    assert choose(known, 100.0 + QUIET) == (Epoch(5, 100.0 + QUIET), True)
    assert choose(known, 50.0) == (known, False)  # a clock set back starts nothing
    assert DAY < QUIET < WEEK - KEPT


@given(st.text())
def test_any_cursor_value_is_read_as_an_epoch_or_as_none(value: str) -> None:
    found = parse(value)
    assert found is None or (found.number >= 0 and found.seen == found.seen)


@given(st.integers(0, 2**40), st.floats(0, 2e9))
def test_an_epoch_reads_back_as_written(number: int, seen: float) -> None:
    back = parse(dump(Epoch(number, seen)))
    assert back is not None and back.number == number and abs(back.seen - seen) < 1e-3


def test_values_tether_never_writes_are_not_epochs() -> None:
    for value in ("", "7", "[]", '{"epoch": -1, "seen": 5}', '{"epoch": true, "seen": 5}'):
        assert parse(value) is None, value
    for value in ('{"epoch": 1.0, "seen": 5}', '{"epoch": 1, "seen": "5"}', '{"epoch": 1}'):
        assert parse(value) is None, value
    assert parse('{"epoch": 1, "seen": NaN}') is None
