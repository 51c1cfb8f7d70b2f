"""Button presses from outside input, and keyboards the platforms must accept.

Presses are untrusted payloads like any other: the pure normalizers (Telegram's
``callback_query``, Discord's component interaction, Feishu's ``card.action.trigger``)
turn each into a ``callback`` event or a skip with its reason, and never raise — checked
on hand-made shapes, with Hypothesis (arbitrary JSON, and the right shape with wrong
types), and on the real payloads in ../shared/corpus when it is there (read in place,
never copied). The other way round: every keyboard :func:`tether.buttons.keyboard`
accepts renders into markup that each fake platform's own checks accept.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.fakes import discord_api, feishu_api, telegram_api
from tests.support.config import CORPUS as SHARED_CORPUS
from tether.adapters.discord.buttons import components, press
from tether.adapters.feishu.cards import card_body
from tether.adapters.feishu.normalize import Bot
from tether.adapters.feishu.normalize import normalize as feishu_normalize
from tether.adapters.kit import Dropped
from tether.adapters.telegram.buttons import inline_keyboard
from tether.adapters.telegram.normalize import normalize as telegram_normalize
from tether.adapters.telegram.recipient import Recipient
from tether.buttons import Button, keyboard
from tether.errors import ButtonError
from tether.events import Event, Kind

CORPUS = SHARED_CORPUS
TG = Recipient(bot_id=123456, username="tether_test_bot")
FS = Bot(open_id="ou_tether", name="Tether")

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20,
)


def reasoned(outcome: Event | Dropped) -> bool:
    return isinstance(outcome, Event) or bool(outcome.reason)


# -- hand-made shapes ----------------------------------------------------------------------


def discord_press(**overrides: Any) -> dict[str, Any]:
    data: dict[str, Any] = {
        "id": "1300000000000000001",
        "application_id": "1300000000000000002",
        "type": 3,
        "token": "ptoken",
        "channel_id": "1300000000000000003",
        "guild_id": "1300000000000000004",
        "member": {"nick": "Ada L.", "user": {"id": "1300000000000000005", "username": "ada"}},
        "message": {"id": "1300000000000000006", "channel_id": "1300000000000000003"},
        "data": {"custom_id": "vote:yes", "component_type": 2},
    }
    data.update(overrides)
    return data


def test_a_discord_press_is_a_callback_keyed_by_its_interaction() -> None:
    event = press(discord_press())
    assert isinstance(event, Event)
    assert (event.key, event.kind, event.text) == (
        "dc:int:1300000000000000001",
        Kind.CALLBACK,
        "vote:yes",
    )
    assert event.conversation.chat_id == "1300000000000000003"
    assert event.conversation.chat_type == "group"
    assert event.message_id == "1300000000000000006"
    assert event.sender is not None and (event.sender.id, event.sender.name) == (
        "1300000000000000005",
        "Ada L.",
    )
    assert event.raw is not None and "token" not in event.raw  # a credential: not stored
    dm = press(discord_press(guild_id=None, member=None, user={"id": "7", "username": "bo"}))
    assert isinstance(dm, Event) and dm.conversation.chat_type == "dm"


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"type": 2}, "not a component interaction"),
        ({"data": {"custom_id": "x", "component_type": 3}}, "unsupported component type 3"),
        ({"data": {"custom_id": "", "component_type": 2}}, "custom_id: empty"),
        ({"data": {"custom_id": 5, "component_type": 2}}, "data.custom_id: expected a string"),
        ({"id": "x"}, "id: expected an id"),
        ({"token": None, "id": "1"}, "token"),
        ({"channel_id": None}, "channel_id"),
        ({"member": None}, "user: expected an object"),
    ],
)
def test_a_malformed_discord_press_is_skipped_with_its_reason(
    change: dict[str, Any], reason: str
) -> None:
    outcome = press(discord_press(**change))
    assert isinstance(outcome, Dropped) and reason in outcome.reason


def test_a_feishu_card_action_is_a_callback_keyed_by_its_event() -> None:
    payload = feishu_api.card_action_event("vote:no", message_id="om_9", event_id="ev_9")
    event = feishu_normalize(payload, FS)
    assert isinstance(event, Event)
    assert (event.key, event.kind, event.text) == ("fs:evt:ev_9", Kind.CALLBACK, "vote:no")
    assert (event.conversation.chat_id, event.message_id) == ("oc_chat_1", "om_9")
    assert event.sender is not None and event.sender.id == "ou_user_1"
    assert event.raw is not None and "token" not in event.raw["event"]  # the card token
    assert "token" not in event.raw["header"]  # the verification token
    plain = dict(payload, event={**payload["event"], "action": {"value": "raw-value"}})
    assert feishu_normalize(plain, FS).text == "raw-value"  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("event", "reason"),
    [
        ({"action": {"value": {"other": 1}}}, "without button data"),
        ({"action": None}, "without button data"),
        ({"context": {}}, "without context.open_chat_id"),
        ({"operator": {"open_id": ""}}, "without an operator id"),
    ],
)
def test_a_feishu_card_action_we_cannot_use_is_skipped_with_its_reason(
    event: dict[str, Any], reason: str
) -> None:
    payload = feishu_api.card_action_event("vote:yes")
    payload["event"].update(event)
    outcome = feishu_normalize(payload, FS)
    assert isinstance(outcome, Dropped) and reason in outcome.reason


def test_a_telegram_press_is_a_callback_keyed_by_its_update() -> None:
    fake = telegram_api.FakeTelegram()
    update = {
        "update_id": 77,
        "callback_query": {
            "id": "q1",
            "from": {"id": 42, "is_bot": False, "first_name": "Ada"},
            "chat_instance": "c",
            "data": "vote:yes",
            "message": fake.bot_message(42),
        },
    }
    event = telegram_normalize(update, TG)
    assert isinstance(event, Event)
    assert (event.key, event.kind, event.text) == ("tg:123456:77", Kind.CALLBACK, "vote:yes")
    assert event.meta["callback_query_id"] == "q1"


# -- Hypothesis: never raises, whatever arrives --------------------------------------------


@given(JSON)
def test_discord_press_never_raises_on_any_json(data: Any) -> None:
    assert reasoned(press(data))


@pytest.mark.slow
@given(
    st.dictionaries(
        st.sampled_from(["id", "type", "token", "channel_id", "guild_id", "member", "user",
                         "message", "data", "channel"]),
        JSON,
    ),
    st.text(),
)  # fmt: skip
def test_discord_press_with_wrong_types_never_raises(
    fields: dict[str, Any], custom_id: str
) -> None:
    outcome = press(discord_press(**fields))
    assert reasoned(outcome)
    clean = press(discord_press(data={"custom_id": custom_id, "component_type": 2}))
    assert isinstance(clean, Event) == bool(custom_id)


@pytest.mark.slow
@given(JSON, JSON, JSON, JSON)
def test_feishu_card_action_never_raises(
    value: Any, context: Any, operator: Any, event: Any
) -> None:
    payload = feishu_api.card_action_event("x")
    payload["event"].update({"action": {"value": value}, "context": context, "operator": operator})
    assert reasoned(feishu_normalize(payload, FS))
    payload["event"] = event if isinstance(event, dict) else {"weird": event}
    assert reasoned(feishu_normalize(payload, FS))


@given(JSON, st.text(), JSON)
def test_telegram_callback_query_never_raises(query: Any, data: str, message: Any) -> None:
    assert reasoned(telegram_normalize({"update_id": 1, "callback_query": query}, TG))
    shaped = {
        "id": "q",
        "from": {"id": 5, "is_bot": False, "first_name": "A"},
        "chat_instance": "c",
        "data": data,
        "message": message,
    }
    assert reasoned(telegram_normalize({"update_id": 2, "callback_query": shaped}, TG))


# -- what keyboard() accepts, every platform accepts ---------------------------------------

BUTTON = st.builds(
    Button,
    st.text(min_size=0, max_size=90),
    data=st.one_of(st.none(), st.text(max_size=70)),
    url=st.one_of(
        st.none(), st.sampled_from(["https://example.com/a", "tg://user?id=1", "ftp://x"])
    ),
)


@given(st.lists(st.lists(BUTTON, max_size=6), max_size=6))
def test_every_accepted_keyboard_is_one_each_fake_platform_accepts(
    spec: list[list[Button]],
) -> None:
    try:
        rows = keyboard(spec)
    except ButtonError as exc:
        assert str(exc).startswith("buttons")  # names where the problem is
        return
    telegram_api._check_markup(inline_keyboard(rows))  # raises what Telegram would answer
    assert discord_api._components_problem(components(rows)) is None
    assert feishu_api.card_problem(card_body("pick", False, rows)) is None or not rows


# -- the corpus: real payloads, read in place ----------------------------------------------


@pytest.mark.skipif(not CORPUS.is_dir(), reason=f"no corpus at {CORPUS}")
def test_corpus_presses_become_callbacks_and_nothing_raises() -> None:
    callbacks = 0
    for path in sorted((CORPUS / "telegram").glob("*.json")):
        outcome = telegram_normalize(json.loads(path.read_text()), TG)
        assert reasoned(outcome), path.name
        if "callback_query" in json.loads(path.read_text()):
            assert isinstance(outcome, Event) and outcome.kind is Kind.CALLBACK, path.name
            callbacks += 1
    assert callbacks >= 1
    for path in sorted((CORPUS / "discord").glob("*.json")):
        frame = json.loads(path.read_text())
        outcome = press(frame.get("d") if isinstance(frame, dict) else frame)
        assert reasoned(outcome), path.name
    for path in sorted((CORPUS / "feishu").glob("*.json")):
        data = json.loads(path.read_text())
        if isinstance(data, dict) and isinstance(data.get("header"), dict):
            data["header"] = {**data["header"], "event_type": "card.action.trigger"}
            assert reasoned(feishu_normalize(data, FS)), path.name
