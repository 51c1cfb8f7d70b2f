"""The plain-message fast path (adapters/telegram/plain.py) against PTB's reading.

:func:`read_plain` reads the common update (a person's text message or its edit) without
PTB, for speed. Its one promise: whenever it answers, the answer is the one the PTB path
(:func:`read_with_ptb`) gives for the same update — the same ``Event`` field for field, or
the same ``Dropped`` — and for anything else it declines (None). Hypothesis generates
updates in and near the plain shape: commands with and without ``@botname``, mentions of
the bot and of others (with and without entities, duplicated, with emoji that make UTF-16
offsets differ from string indexes), groups under both ``answer_groups`` policies, bots,
edits, topics, fields of the wrong type, missing required fields, and the keys that must
send an update to PTB (replies, captions, forwards, a sender chat...). The shared corpus
of real payloads, when present, is run through both too. The plain shapes a bot sees
most must actually take the fast path, or it is not one.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.config import CORPUS as SHARED_CORPUS
from tether.adapters.kit import Dropped
from tether.adapters.telegram.normalize import normalize, read_with_ptb, update_id
from tether.adapters.telegram.plain import read_plain
from tether.adapters.telegram.recipient import Recipient
from tether.events import Event, Kind

BOT_ID = 5550001
USERNAME = "Lantern_bot"
WHEN = 1_750_000_000
CORPUS = SHARED_CORPUS / "telegram"

RECIPIENTS = [
    Recipient(bot_id=BOT_ID, username=USERNAME),
    Recipient(bot_id=BOT_ID),  # before getMe answered
    Recipient(bot_id=BOT_ID, username=USERNAME, answer_groups="all"),
    Recipient(bot_id=BOT_ID, username=USERNAME, ignore_bots=False),
    Recipient(bot_id=123456789, username="tethercorpusbot"),
    Recipient(bot_id=BOT_ID, username="hermes_bot"),
]


def agreed(data: Any, recipient: Recipient) -> Event | Dropped | None:
    """The fast path's answer, after checking it is PTB's (None: it declined)."""
    number = update_id(data)
    assert number is not None
    fast = read_plain(data, number, recipient)
    if fast is None:
        return None
    slow = read_with_ptb(data, number, recipient)
    if isinstance(fast, Event):
        assert isinstance(slow, Event), (slow, data)
        assert fast.model_dump() == slow.model_dump(), data
        assert fast.raw == data
    else:
        assert fast == slow, data
    return fast


# -- generated updates -----------------------------------------------------------------------

WORDS = st.sampled_from(
    [
        "hi",
        "/start",
        "/ping@Lantern_bot",
        "/ping@lantern_BOT",
        "/ping@echo_bot",
        "@Lantern_bot",
        "@lantern_bot,",
        "@Lantern_botty",
        "@mad_hatter",
        "mail@Lantern_bot",
        "/",
        "/ ",
        "👋",
        "日本",
        "\U0001f600@Lantern_bot",
        "\ud800",
        "",
        "  ",
        "\n/help",
    ]
)
TEXTS = st.lists(WORDS, min_size=1, max_size=5).map(" ".join)
#: Values of the wrong type for any field: what PTB keeps as is or fails on.
ODD = st.sampled_from([None, True, 1.5, "7", [], {}, -1, 2**70])


def _entities(text: str, extra: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Entities as a client sends them (by string index, so wrong after an emoji)."""
    out: list[dict[str, Any]] = []
    at = 0
    for word in text.split(" "):
        if word.startswith("@"):
            out.append({"type": "mention", "offset": at, "length": len(word)})
        elif word.startswith("/") and at == 0:
            out.append({"type": "bot_command", "offset": 0, "length": len(word)})
        at += len(word) + 1
    return out + extra


ENTITY_EXTRAS = st.lists(
    st.one_of(
        st.fixed_dictionaries(
            {
                "type": st.sampled_from(["mention", "bold", "url", "hashtag", "text_link"]),
                "offset": st.integers(-2, 30),
                "length": st.integers(-1, 30),
            },
            optional={"url": st.just("https://example.org"), "language": ODD},
        ),
        st.just({"type": "mention", "offset": 0, "length": 5}),  # duplicated below
        st.just({"type": "text_mention", "offset": 0, "length": 2, "user": {"id": BOT_ID}}),
        st.just({"type": "mention", "offset": "0", "length": 2}),
        st.just({"type": "mention", "offset": 0}),
    ),
    max_size=3,
).map(lambda extra: extra + [e for e in extra if e.get("length") == 5])
USERS = st.fixed_dictionaries(
    {
        "id": st.sampled_from([31337, BOT_ID, 8080]),
        "is_bot": st.booleans(),
        "first_name": st.sampled_from(["Alice", "", " ", "Ада"]),
    },
    optional={
        "last_name": st.sampled_from(["Liddell", ""]),
        "username": st.sampled_from(["alice", "Lantern_bot"]),
        "language_code": st.just("en"),
        "is_premium": st.booleans(),
    },
)
CHATS = st.fixed_dictionaries(
    {
        "id": st.sampled_from([31337, -1009001, -77]),
        "type": st.sampled_from(["private", "group", "supergroup", "channel", "sender"]),
    },
    optional={"title": st.just("Tea party"), "is_forum": st.booleans()},
)
#: Keys a plain message may have besides the required ones.
OPTIONAL = {
    "edit_date": st.just(WHEN + 60),
    "message_thread_id": st.integers(0, 99),
    "is_topic_message": st.booleans(),
}
#: Keys that send a message to PTB.
FOREIGN = {
    "reply_to_message": {"message_id": 3, "date": WHEN, "chat": {"id": 1, "type": "private"}},
    "caption": "a caption",
    "sender_chat": {"id": -100, "type": "channel", "title": "News"},
    "forward_origin": {"type": "hidden_user", "date": WHEN, "sender_user_name": "Bob"},
    "link_preview_options": {"is_disabled": True},
    "sticker": {"file_id": "f"},
}
#: Where a mutation of a plain message strikes: a field of it, of its sender or its chat.
PLACES = [
    *[(None, key) for key in ["message_id", "date", "text", "from", "chat", "entities"]],
    *[(None, key) for key in OPTIONAL],
    *[("from", key) for key in ["id", "is_bot", "first_name", "last_name"]],
    *[("chat", key) for key in ["id", "type"]],
]
#: Keys PTB keeps in ``api_kwargs``: a user's ``title`` is one that ``name_of`` would
#: read from a dict, and PTB's object does not have.
STRAY = [("from", "title", "Sir"), ("chat", "bio", "x"), ("from", "can_join_groups", True)]


@st.composite
def messages(draw: st.DrawFn) -> dict[str, Any]:
    """A plain text message, then up to three mutations: a field deleted or given an odd
    value, or a key that is not plain added."""
    text = draw(TEXTS)
    body: dict[str, Any] = {
        "message_id": draw(st.integers(1, 10**6)),
        "date": draw(st.sampled_from([WHEN, 0, -1, 2**40])),
        "chat": draw(CHATS),
        "from": draw(USERS),
        "text": text,
    }
    if draw(st.booleans()):
        body["entities"] = _entities(text, draw(ENTITY_EXTRAS))
    for key, strategy in OPTIONAL.items():
        if draw(st.integers(0, 3)) == 0:
            body[key] = draw(strategy)
    for _ in range(draw(st.integers(0, 3))):
        what = draw(st.integers(0, 3))
        if what == 0:
            key = draw(st.sampled_from(sorted(FOREIGN)))
            body[key] = FOREIGN[key]
            continue
        if what == 1:
            inside, key, value = draw(st.sampled_from(STRAY))
            if isinstance(body.get(inside), dict):
                body[inside][key] = value
            continue
        inside, key = draw(st.sampled_from(PLACES))
        target = body if inside is None else body.get(inside)
        if not isinstance(target, dict):
            continue
        if draw(st.booleans()):
            target.pop(key, None)
        else:
            target[key] = draw(ODD)
    return body


@st.composite
def updates(draw: st.DrawFn) -> dict[str, Any]:
    field = draw(st.sampled_from(["message", "message", "edited_message", "channel_post"]))
    data: dict[str, Any] = {"update_id": draw(st.integers(-5, 10**9)), field: draw(messages())}
    if draw(st.integers(0, 9)) == 0:
        other = draw(st.sampled_from(["message", "edited_message", "callback_query"]))
        data[other] = draw(st.one_of(messages(), st.none()))
    return data


@pytest.mark.slow
@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=updates(), recipient=st.sampled_from(RECIPIENTS))
def test_the_fast_path_answers_what_ptb_answers_or_declines(
    data: dict[str, Any], recipient: Recipient
) -> None:
    agreed(data, recipient)


# -- the shapes that must take the fast path ------------------------------------------------

ALICE = {"id": 31337, "is_bot": False, "first_name": "Alice", "last_name": "Liddell"}
GROUP = {"id": -1009001, "type": "supergroup", "title": "Tea party"}
DM = {"id": 31337, "type": "private", "first_name": "Alice"}


def plain(text: str, chat: dict[str, Any] = DM, **fields: Any) -> dict[str, Any]:
    body = {"message_id": 10, "from": ALICE, "chat": chat, "date": WHEN, "text": text}
    return {"update_id": 700, "message": {**body, **fields}}


US = RECIPIENTS[0]
TAKEN: list[tuple[dict[str, Any], Recipient, dict[str, Any]]] = [
    (plain("hello"), US, {"kind": Kind.MESSAGE, "text": "hello", "sender": "Alice Liddell"}),
    (
        plain("/ping@Lantern_bot now", GROUP, entities=_entities("/ping@Lantern_bot now", [])),
        US,
        {"kind": Kind.COMMAND, "command": "ping", "args": "now"},
    ),
    (
        plain("hi @Lantern_bot 👋", GROUP, entities=_entities("hi @Lantern_bot", [])),
        US,
        {"kind": Kind.MESSAGE, "mentions": ["Lantern_bot"], "mentions_bot": True},
    ),
    (
        plain("hi @LANTERN_bot", GROUP),  # typed, no entity (iOS)
        US,
        {"mentions": ["LANTERN_bot"], "mentions_bot": True},
    ),
    (
        plain("lovely weather", GROUP),
        US,
        {"dropped": "group message not addressed to the bot"},
    ),
    (plain("/ping@echo_bot", GROUP), US, {"dropped": "command for another bot"}),
    (
        plain("beep", **{"from": {"id": 8, "is_bot": True, "first_name": "Echo"}}),
        US,
        {"dropped": "from a bot"},
    ),
    (
        {"update_id": 9, "edited_message": plain("/start", edit_date=WHEN + 5)["message"]},
        US,
        {"kind": Kind.EDIT, "command": None, "timestamp": WHEN + 5},
    ),
    (
        plain("in a topic", GROUP, message_thread_id=7, is_topic_message=True),
        RECIPIENTS[2],
        {"thread": "7"},
    ),
]


def _shape(outcome: Event | Dropped) -> dict[str, Any]:
    if isinstance(outcome, Dropped):
        return {"dropped": outcome.reason}
    assert outcome.sender is not None
    return {
        "kind": outcome.kind,
        "text": outcome.text,
        "sender": outcome.sender.name,
        "command": outcome.command,
        "args": outcome.args,
        "mentions": outcome.mentions,
        "mentions_bot": outcome.mentions_bot,
        "thread": outcome.conversation.thread_id,
        "timestamp": int(outcome.timestamp.timestamp()),
    }


@pytest.mark.parametrize("data, recipient, expected", TAKEN)
def test_the_common_shapes_take_the_fast_path(
    data: dict[str, Any], recipient: Recipient, expected: dict[str, Any]
) -> None:
    outcome = agreed(data, recipient)
    assert outcome is not None, "declined a plain message"
    shape = _shape(outcome)
    assert {key: shape[key] for key in expected} == expected
    assert normalize(data, recipient) == outcome


@pytest.mark.parametrize(
    "data",
    [
        plain("hi", reply_to_message={"message_id": 3, "date": WHEN, "chat": DM}),
        plain("@x 😀", entities=[{"type": "mention", "offset": 3, "length": 2}]),
        plain("hi", entities=[{"type": "text_mention", "offset": 0, "length": 2, "user": ALICE}]),
        plain("hi", **{"from": {"id": 1, "first_name": "No is_bot"}}),
        plain("hi", chat={"id": 1}),
        plain("hi", date=1.5),
        plain(""),
        {**plain("hi"), "edited_message": plain("hi")["message"]},
    ],
)
def test_what_is_not_plain_goes_to_ptb(data: dict[str, Any]) -> None:
    assert read_plain(data, 700, US) is None


# -- the corpus: real payloads, read in place -------------------------------------------------


@pytest.mark.skipif(not CORPUS.is_dir(), reason=f"no corpus at {CORPUS}")
def test_every_corpus_payload_the_fast_path_reads_is_read_as_ptb_reads_it() -> None:
    taken = 0
    for path in sorted(CORPUS.glob("*.json")):
        data = json.loads(path.read_text())
        if update_id(data) is None:
            continue
        for recipient in RECIPIENTS:
            taken += agreed(data, recipient) is not None
    assert taken, "no corpus payload took the fast path"
