"""The keys made and read in one place (tether/keys.py): every shape round-trips.

An outbox key is read from the right because an event key may itself hold ``#`` and
``:`` (a room relay names an outbox key); these tests build event keys the way the
platforms and the rooms do, nested, and check that parsing gives back what was built.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tether import keys
from tether.events import Conversation, Event, Sender
from tether.keys import OutboxKey

_ID = st.text(st.sampled_from("abcdefghijklmnopqrstuvwxyz0123456789-_"), min_size=1, max_size=12)
_PLATFORM_KEY = st.builds(
    lambda prefix, parts: ":".join([prefix, *parts]),
    st.sampled_from(["tg", "dc", "fs", "cron", "sl", "mx", "wa"]),
    st.lists(_ID, min_size=1, max_size=4),
)


@st.composite
def event_keys(draw: st.DrawFn, depth: int = 2) -> str:
    """A platform's key, or a room relay of an outbox key of one (up to ``depth`` deep)."""
    if depth == 0 or not draw(st.booleans()):
        return draw(_PLATFORM_KEY)
    outbox = keys.outbox_key(draw(event_keys(depth - 1)), draw(st.integers(0, 40)))
    return keys.room_key(outbox, draw(_ID))


@given(event_keys(), st.integers(0, 10_000))
def test_an_answer_key_round_trips(event: str, index: int) -> None:
    parsed = OutboxKey.parse(keys.outbox_key(event, index))
    assert (parsed.event, parsed.index, parsed.dead) == (event, index, False)
    assert str(parsed) == keys.outbox_key(event, index)
    assert parsed.first is (index == 0)
    assert keys.first_of_answer(keys.outbox_key(event, index)) is (index == 0)


@given(event_keys(), st.integers(0, 50))
def test_a_dead_notice_key_round_trips_and_is_never_an_answer(event: str, index: int) -> None:
    key = keys.dead_key(event, index)
    parsed = OutboxKey.parse(key)
    assert (parsed.event, parsed.index, parsed.dead) == (event, index, True)
    assert not parsed.first and str(parsed) == key
    assert keys.dead_key(event, index).startswith(keys.dead_prefix(event))


@given(event_keys())
def test_a_preview_key_round_trips(event: str) -> None:
    key = keys.preview_key(event)
    assert keys.is_preview(key) and keys.event_of(key) == event
    assert OutboxKey.parse(key).preview
    assert not keys.first_of_answer(key)


@given(event_keys(), _ID)
def test_a_relay_is_known_by_its_key(event: str, listener: str) -> None:
    relay = keys.room_key(keys.outbox_key(event, 0), listener)
    assert keys.is_relay(relay)
    assert keys.is_relay(event) is event.startswith("room:")
    assert keys.event_of(keys.outbox_key(relay, 3)) == relay


@pytest.mark.parametrize("key", ["", "tg:1:2", "a#", "#3", "a#dead", "a#x1"])
def test_a_key_no_checkpoint_writes_is_refused(key: str) -> None:
    with pytest.raises(ValueError, match="not an outbox key"):
        OutboxKey.parse(key)
    assert not keys.first_of_answer(key)


def test_a_sender_is_named_by_platform_and_id() -> None:
    chat = Conversation(platform="telegram", chat_id="5")
    with_sender = Event(key="k", platform="telegram", conversation=chat, sender=Sender(id="42"))
    assert keys.sender_name(with_sender) == "telegram:42"
    assert keys.sender_name(with_sender.model_copy(update={"sender": None})) == "telegram"
