"""Slack payloads → events, pure: the payloads are the fake's builders (tests/fakes/slack_api.py),
written from Slack's documented shapes, and Hypothesis over anything JSON can hold."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.fakes.slack_api import (
    APP_ID,
    BOT_ID,
    BOT_USER_ID,
    CHANNEL_ID,
    DM_CHANNEL_ID,
    OTHER_BOT_ID,
    USER_ID,
)
from tests.fakes.slack_events import (
    block_actions,
    edit_event,
    message_event,
    slash_command,
)
from tether.adapters.kit import Dropped
from tether.adapters.slack.normalize import IGNORED, SKIPPED, Bot, normalize
from tether.events import Event, Kind

BOT = Bot(user_id=BOT_USER_ID, bot_id=BOT_ID)


def event_of(payload: dict[str, Any], bot: Bot = BOT) -> Event:
    outcome = normalize(payload, bot)
    assert isinstance(outcome, Event), outcome
    return outcome


def dropped_of(payload: dict[str, Any], bot: Bot = BOT) -> Dropped:
    outcome = normalize(payload, bot)
    assert isinstance(outcome, Dropped), outcome
    return outcome


def test_a_dm_is_a_message_keyed_by_the_app_channel_and_ts() -> None:
    event = event_of(message_event("hello there", ts="1712345678.000100"))
    assert event.key == f"sl:{APP_ID}:msg:{DM_CHANNEL_ID}:1712345678.000100"
    assert event.kind == Kind.MESSAGE and event.text == "hello there"
    assert event.conversation.chat_type == "dm" and event.conversation.thread_id is None
    assert event.sender is not None and event.sender.id == USER_ID
    assert event.message_id == "1712345678.000100"
    assert event.raw is not None and "token" not in event.raw  # the verification token


def test_a_channel_message_is_for_the_bot_only_when_it_mentions_it() -> None:
    plain = message_event("lunch?", channel=CHANNEL_ID, channel_type="channel")
    assert dropped_of(plain) == Dropped(IGNORED, "channel message does not mention the bot")
    other = message_event("<@U0SOMEONE1> lunch?", channel=CHANNEL_ID, channel_type="channel")
    assert dropped_of(other).log_event == IGNORED
    mention = message_event(f"<@{BOT_USER_ID}> lunch?", channel=CHANNEL_ID, channel_type="channel")
    event = event_of(mention)
    assert event.mentions_bot and event.conversation.chat_type == "group"
    assert event.mentions == [BOT_USER_ID]
    assert event_of(plain, Bot(user_id=BOT_USER_ID, answer_channels="all")).text == "lunch?"


def test_app_mention_and_the_message_event_of_one_message_share_a_key() -> None:
    """An app subscribed to both gets one message as two events with two event ids: one
    key, so the inbox admits it once and it is answered once."""
    text = f"<@{BOT_USER_ID}|tether> status"
    as_message = message_event(text, channel=CHANNEL_ID, channel_type="channel", event_id="Ev1")
    as_mention = message_event(text, channel=CHANNEL_ID, kind="app_mention", event_id="Ev2")
    assert event_of(as_message).key == event_of(as_mention).key
    assert event_of(as_mention).mentions_bot


def test_a_command_after_the_mention_is_a_command() -> None:
    event = event_of(
        message_event(f"<@{BOT_USER_ID}> /help me", channel=CHANNEL_ID, kind="app_mention")
    )
    assert (event.kind, event.command, event.args) == (Kind.COMMAND, "help", "me")


def test_a_thread_is_its_own_conversation_and_its_first_message_is_the_channels() -> None:
    reply = event_of(message_event("in thread", ts="1712345690.000300", thread_ts="1712345678.1"))
    assert reply.conversation.thread_id == "1712345678.1"
    assert reply.meta["thread_ts"] == "1712345678.1"
    top = event_of(message_event("top", ts="1712345678.1", thread_ts="1712345678.1"))
    assert top.conversation.thread_id is None


def test_the_bots_own_and_other_bots_messages_are_ignored() -> None:
    own = message_event("I said this", user=BOT_USER_ID, bot_id=BOT_ID)
    assert dropped_of(own) == Dropped(IGNORED, "the bot's own message")
    other = message_event("beep", user="U0OTHERBOT1", bot_id=OTHER_BOT_ID)
    assert dropped_of(other) == Dropped(IGNORED, "from another bot")
    assert event_of(other, Bot(user_id=BOT_USER_ID, bot_id=BOT_ID, ignore_bots=False)).text
    # ...but our own never, whatever ignore_bots says
    assert dropped_of(own, Bot(user_id=BOT_USER_ID, bot_id=BOT_ID, ignore_bots=False))


def test_joins_and_deletions_are_not_messages() -> None:
    joined = message_event("<@U1> has joined", subtype="channel_join")
    assert dropped_of(joined) == Dropped(IGNORED, "message subtype 'channel_join'")


def test_an_edit_is_keyed_by_the_message_and_the_edit() -> None:
    event = event_of(edit_event("fixed", ts="1712345678.000100", edited_ts="1712345699.000000"))
    assert event.kind == Kind.EDIT and event.text == "fixed"
    assert event.key == f"sl:{APP_ID}:edit:{DM_CHANNEL_ID}:1712345678.000100:1712345699.000000"
    assert event.message_id == "1712345678.000100"
    unfurl = edit_event("same", edited_ts="")  # Slack adding a link preview: no edit
    assert dropped_of(unfurl).log_event == IGNORED


def test_files_are_attachments() -> None:
    files = [
        {"id": "F1", "name": "cat.png", "mimetype": "image/png", "size": 12,
         "url_private": "https://files.slack.com/cat.png"},
        {"id": "F2", "name": "notes.txt", "mimetype": "text/plain", "size": "big"},
        {"name": "no id"},
    ]  # fmt: skip
    event = event_of(message_event("", subtype="file_share", files=files))
    assert [(a.kind, a.file_id, a.size) for a in event.attachments] == [
        ("image", "F1", 12),
        ("file", "F2", None),
    ]
    assert event.attachments[0].url == "https://files.slack.com/cat.png"


def test_a_slash_command_is_a_command_keyed_by_its_trigger() -> None:
    event = event_of(slash_command("/ask", "what now", trigger_id="111.222.abc"))
    assert event.key == f"sl:{APP_ID}:cmd:111.222.abc"
    assert (event.kind, event.command, event.args, event.text) == (
        Kind.COMMAND,
        "ask",
        "what now",
        "/ask what now",
    )
    assert event.conversation.chat_id == CHANNEL_ID
    assert event.raw is not None and "response_url" not in event.raw and "token" not in event.raw


def test_a_button_press_is_a_callback_keyed_by_its_trigger() -> None:
    event = event_of(block_actions("vote:yes", trigger_id="7.8.x"))
    assert event.key == f"sl:{APP_ID}:act:7.8.x"
    assert (event.kind, event.text) == (Kind.CALLBACK, "vote:yes")
    assert event.message_id == "1712345680.000200"
    assert event.raw is not None and "response_url" not in event.raw


def test_two_apps_in_one_channel_each_have_their_own_key() -> None:
    text = f"<@{BOT_USER_ID}> hi"
    ours = event_of(message_event(text, channel=CHANNEL_ID, channel_type="channel"))
    theirs = event_of(message_event(text, channel=CHANNEL_ID, channel_type="channel", app="A2"))
    assert ours.key != theirs.key and theirs.key.startswith("sl:A2:")


@pytest.mark.parametrize(
    ("payload", "reason"),
    [
        ({"type": "url_verification"}, "unsupported payload type 'url_verification'"),
        ({"type": "event_callback"}, "event_callback without event, event_id or app id"),
        ({"type": "block_actions", "actions": []}, "block_actions without an action"),
    ],
)
def test_what_cannot_be_an_event_is_skipped_with_a_reason(
    payload: dict[str, Any], reason: str
) -> None:
    assert normalize(payload, BOT) == Dropped(SKIPPED, reason)


# -- never raises ----------------------------------------------------------------------------

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=20,
)
FUZZ = settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])
VALID = [
    message_event("hi"),
    message_event(f"<@{BOT_USER_ID}> hi", channel=CHANNEL_ID, kind="app_mention"),
    message_event("in a thread", thread_ts="1712345600.000001", files=[{"id": "F1"}]),
    edit_event("fixed"),
    slash_command("/ask", "x"),
    block_actions("vote:yes"),
]


def _normalizes(payload: Any, bot: Bot) -> None:
    outcome = normalize(payload, bot)
    assert isinstance(outcome, Event | Dropped)
    if isinstance(outcome, Event):
        Event.from_json(outcome.to_json())  # what the inbox stores, it can read back
    else:
        assert outcome.log_event in (IGNORED, SKIPPED) and outcome.reason
        # every shape is read by the normalizer itself, not by its last-resort catch
        assert not outcome.reason.startswith("cannot normalize"), outcome


@FUZZ
@given(JSON)
def test_arbitrary_json_never_raises(payload: Any) -> None:
    _normalizes(payload, BOT)


def _paths(value: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    found = [path] if path else []
    if isinstance(value, dict):
        for key, inner in value.items():
            found += _paths(inner, (*path, key))
    elif isinstance(value, list):
        for index, inner in enumerate(value):
            found += _paths(inner, (*path, index))
    return found


@st.composite
def _mutated(draw: st.DrawFn) -> dict[str, Any]:
    """A valid payload with some of its fields replaced by anything JSON can hold, or
    removed."""
    payload = copy.deepcopy(draw(st.sampled_from(VALID)))
    for _ in range(draw(st.integers(1, 4))):
        paths = _paths(payload)
        if not paths:
            break
        *parent_path, last = draw(st.sampled_from(paths))
        parent: Any = payload
        for step in parent_path:
            parent = parent[step]
        if draw(st.booleans()) and isinstance(parent, dict):
            del parent[last]
        else:
            parent[last] = draw(JSON)
    return payload


@FUZZ
@given(_mutated(), st.sampled_from([BOT, Bot(), Bot(answer_channels="all", ignore_bots=False)]))
def test_mutated_valid_payloads_never_raise(payload: dict[str, Any], bot: Bot) -> None:
    _normalizes(payload, bot)
