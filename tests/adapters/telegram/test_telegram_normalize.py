"""Telegram's pure normalize step, fed Bot API update dicts directly: no server, no adapter.

Every shape the adapter reads (text in DMs and groups, commands, mentions — typed ones
without an entity too —, replies, topics, edits, channel posts, button presses, media,
forwards, content without text, payloads older than ``file_unique_id``, users without a
first name) is built here from small helpers, with the exact key, conversation, kind,
text and sender asserted; so is every reason an update is left out (a bot, a group
message not for us, a service message, an update type Tether does not handle, a
malformed payload). Hypothesis then checks the promise the poll loop relies on —
normalize never raises, so one bad update cannot pin the offset — and the parsing this
file adds (typed mentions, old payloads). The last tests run it over the shared corpus of
real payloads, when it is present, and check the files that once showed a bug by name.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from tests.support.config import CORPUS as SHARED_CORPUS
from tests.support.config import ROOT
from tether.adapters.kit import Dropped
from tether.adapters.telegram.normalize import normalize, update_id
from tether.adapters.telegram.recipient import Recipient
from tether.events import Event, Kind

BOT_ID = 5550001
USERNAME = "Lantern_bot"
US = Recipient(bot_id=BOT_ID, username=USERNAME)
WHEN = 1_750_000_000
ALICE = {"id": 31337, "is_bot": False, "first_name": "Alice", "last_name": "Liddell"}
OTHER_BOT = {"id": 8080, "is_bot": True, "first_name": "Echo", "username": "echo_bot"}
GROUP = {"id": -1009001, "type": "supergroup", "title": "Tea party"}
DM = {"id": 31337, "type": "private", "first_name": "Alice"}
REPO = ROOT
#: Third-party payloads beside the repository (../shared/corpus); absent on some machines.
CORPUS = SHARED_CORPUS / "telegram"


# -- builders -----------------------------------------------------------------------------


def message(
    text: str | None = "hello",
    *,
    chat: dict[str, Any] = DM,
    sender: dict[str, Any] | None = ALICE,
    message_id: int = 10,
    **fields: Any,
) -> dict[str, Any]:
    """A Message as the Bot API sends it; ``/command`` and ``@name`` get their entities."""
    body: dict[str, Any] = {"message_id": message_id, "date": WHEN, "chat": chat}
    if sender is not None:
        body["from"] = sender
    if text is not None:
        body["text"] = text
        entities = [
            {
                "type": "bot_command" if word.startswith("/") else "mention",
                "offset": at,
                "length": n,
            }
            for word, at, n in _words(text)
            if word.startswith(("/", "@")) and (word[0] == "@" or at == 0)
        ]
        if entities:
            body["entities"] = entities
    body.update(fields)
    return body


def _words(text: str) -> list[tuple[str, int, int]]:
    out, at = [], 0
    for word in text.split(" "):
        out.append((word, at, len(word)))
        at += len(word) + 1
    return out


def update(number: int = 700, **fields: Any) -> dict[str, Any]:
    return {"update_id": number, **fields}


def event(data: dict[str, Any], recipient: Recipient = US) -> Event:
    outcome = normalize(data, recipient)
    assert isinstance(outcome, Event), outcome
    return outcome


def dropped(data: Any, recipient: Recipient = US) -> Dropped:
    outcome = normalize(data, recipient)
    assert isinstance(outcome, Dropped), outcome
    return outcome


# -- text and commands ----------------------------------------------------------------------


def test_a_dm_is_a_message_in_the_users_chat() -> None:
    data = update(701, message=message("hello there"))
    got = event(data)
    assert got.key == f"tg:{BOT_ID}:701"
    assert (got.platform, got.kind, got.text, got.message_id) == (
        "telegram",
        Kind.MESSAGE,
        "hello there",
        "10",
    )
    conv = got.conversation
    assert (conv.platform, conv.chat_id, conv.thread_id, conv.chat_type) == (
        "telegram",
        "31337",
        None,
        "dm",
    )
    assert conv.key == "telegram:31337"
    assert got.sender is not None
    assert (got.sender.id, got.sender.name, got.sender.is_bot) == ("31337", "Alice Liddell", False)
    assert (got.command, got.args, got.reply_to, got.reply_to_bot) == (None, "", None, False)
    assert (got.mentions, got.mentions_bot, got.attachments, got.meta) == ([], False, [], {})
    assert got.timestamp == datetime.fromtimestamp(WHEN, UTC)
    assert got.raw == data


def test_the_key_is_the_bots_id_and_the_update_id() -> None:
    other = Recipient(bot_id=42)
    assert event(update(9, message=message()), other).key == "tg:42:9"
    assert event(update(-3, message=message()), other).key == "tg:42:-3"


def test_a_command_in_a_dm_has_its_name_and_args() -> None:
    got = event(update(message=message("/Start  deep-link  payload ")))
    assert (got.kind, got.command, got.args) == (Kind.COMMAND, "start", "deep-link  payload")
    assert got.text == "/Start  deep-link  payload "


def test_a_command_addressed_to_us_in_a_group_is_ours_in_any_letter_case() -> None:
    got = event(update(message=message("/Ping@lantern_BOT now", chat=GROUP)))
    assert (got.kind, got.command, got.args) == (Kind.COMMAND, "ping", "now")
    conv = got.conversation
    assert (conv.chat_id, conv.chat_type, conv.thread_id) == ("-1009001", "group", None)


def test_a_command_without_an_addressee_in_a_group_is_ours() -> None:
    got = event(update(message=message("/help", chat=GROUP)))
    assert (got.kind, got.command, got.args) == (Kind.COMMAND, "help", "")


def test_a_command_for_another_bot_is_ignored_in_a_group_and_plain_text_in_a_dm() -> None:
    group = dropped(update(message=message("/ping@echo_bot", chat=GROUP)))
    assert group == Dropped("telegram.ignored", "command for another bot")
    dm = event(update(message=message("/ping@echo_bot hi")))
    assert (dm.kind, dm.command, dm.args, dm.text) == (Kind.MESSAGE, None, "", "/ping@echo_bot hi")


def test_before_get_me_answers_every_addressee_counts_as_us() -> None:
    unnamed = Recipient(bot_id=BOT_ID)
    got = event(update(message=message("/ping@echo_bot", chat=GROUP)), unnamed)
    assert (got.kind, got.command) == (Kind.COMMAND, "ping")


def test_a_slash_that_is_not_a_command_is_text() -> None:
    got = event(update(message=message("/ not a command")))
    assert (got.kind, got.command) == (Kind.MESSAGE, None)


def test_a_group_message_not_for_us_is_ignored_unless_answer_groups_is_all() -> None:
    data = update(message=message("lovely weather", chat=GROUP))
    assert dropped(data) == Dropped("telegram.ignored", "group message not addressed to the bot")
    everyone = Recipient(bot_id=BOT_ID, username=USERNAME, answer_groups="all")
    got = event(data, everyone)
    assert (got.kind, got.text, got.conversation.chat_type) == (
        Kind.MESSAGE,
        "lovely weather",
        "group",
    )
    assert got.sender is not None and got.sender.id == "31337"


def test_a_basic_group_is_a_group_too() -> None:
    basic = {"id": -77, "type": "group", "title": "Old group"}
    got = event(update(message=message(f"hi @{USERNAME}", chat=basic)))
    assert (got.conversation.chat_id, got.conversation.chat_type) == ("-77", "group")


# -- mentions and replies -------------------------------------------------------------------


def test_a_mention_of_us_addresses_the_bot_in_a_group() -> None:
    got = event(update(message=message(f"hey @{USERNAME} and @mad_hatter", chat=GROUP)))
    assert (got.kind, got.mentions, got.mentions_bot) == (
        Kind.MESSAGE,
        [USERNAME, "mad_hatter"],
        True,
    )


def test_a_mention_of_someone_else_is_listed_but_does_not_address_us() -> None:
    dm = event(update(message=message("ask @mad_hatter")))
    assert (dm.mentions, dm.mentions_bot) == (["mad_hatter"], False)
    group = dropped(update(message=message("ask @mad_hatter", chat=GROUP)))
    assert group.reason == "group message not addressed to the bot"


def test_a_text_mention_names_the_user_by_id() -> None:
    entity = {"type": "text_mention", "offset": 4, "length": 7}
    ours = message(
        "hey Lantern", chat=GROUP, entities=[{**entity, "user": {**OTHER_BOT, "id": BOT_ID}}]
    )
    got = event(update(message=ours))
    assert (got.mentions, got.mentions_bot) == ([str(BOT_ID)], True)
    theirs = message("hey Someone", entities=[{**entity, "user": ALICE}])
    got = event(update(message=theirs))
    assert (got.mentions, got.mentions_bot) == (["31337"], False)


def test_an_entity_outside_the_text_yields_an_empty_mention() -> None:
    text = message("hi", entities=[{"type": "mention", "offset": 40, "length": 5}])
    got = event(update(message=text))
    assert (got.mentions, got.mentions_bot) == ([""], False)


def test_a_reply_to_the_bot_addresses_it_and_a_reply_to_a_person_does_not() -> None:
    ours = message("earlier", chat=GROUP, sender={**OTHER_BOT, "id": BOT_ID}, message_id=3)
    got = event(update(message=message("thanks", chat=GROUP, reply_to_message=ours)))
    assert (got.reply_to, got.reply_to_bot, got.kind) == ("3", True, Kind.MESSAGE)

    theirs = message("earlier", chat=GROUP, message_id=4)
    in_group = update(message=message("agreed", chat=GROUP, reply_to_message=theirs))
    assert dropped(in_group).reason == "group message not addressed to the bot"
    got = event(update(message=message("agreed", reply_to_message={**theirs, "chat": DM})))
    assert (got.reply_to, got.reply_to_bot) == ("4", False)


def test_a_reply_to_a_message_without_a_sender_is_not_to_the_bot() -> None:
    post = message("channel post", chat=GROUP, sender=None, message_id=5)
    got = event(update(message=message("re", reply_to_message=post)))
    assert (got.reply_to, got.reply_to_bot) == ("5", False)


def typed(text: str, **fields: Any) -> dict[str, Any]:
    """A message whose client sent no mention entity (iOS formatted text, some bridges)."""
    return message(text, chat=GROUP, **{"entities": [], **fields})


@pytest.mark.parametrize(
    "text",
    [
        f"@{USERNAME} what time is it",
        f"what do you think, @{USERNAME.lower()}?",
        f"(@{USERNAME.upper()})",
        f"first line\n@{USERNAME}",
        f"@{USERNAME}",
    ],
)
def test_a_typed_mention_without_an_entity_addresses_the_bot(text: str) -> None:
    got = event(update(message=typed(text)))
    assert got.mentions_bot is True
    (mention,) = got.mentions
    assert mention.lower() == USERNAME.lower()
    assert got.text == text


def test_a_typed_mention_counts_beside_formatting_entities_and_in_a_caption() -> None:
    bold = [{"type": "bold", "offset": 13, "length": 4}]
    got = event(update(message=typed(f"@{USERNAME} bold words", entities=bold)))
    assert (got.mentions, got.mentions_bot) == ([USERNAME], True)
    photo = message(
        None, chat=GROUP, photo=[_file("p", width=1, height=1)], caption=f"look, @{USERNAME}"
    )
    got = event(update(message=photo))
    assert (got.mentions, got.mentions_bot, got.text) == ([USERNAME], True, f"look, @{USERNAME}")


@pytest.mark.parametrize(
    "text",
    [
        f"@{USERNAME}s are everywhere",
        f"@{USERNAME}_2 is another bot",
        f"write to tea{'@'}{USERNAME}",
        f"@@{USERNAME}",
        "@Lantern is not the whole name",
        f"{USERNAME} without the at sign",
    ],
)
def test_a_typed_name_that_is_not_a_whole_mention_does_not_address_the_bot(text: str) -> None:
    assert dropped(update(message=typed(text))).reason == "group message not addressed to the bot"


def test_a_mention_with_an_entity_is_listed_once() -> None:
    got = event(update(message=message(f"@{USERNAME} hi", chat=GROUP)))
    assert (got.mentions, got.mentions_bot) == ([USERNAME], True)


def test_a_typed_mention_needs_the_bots_name() -> None:
    """Before getMe answered the bot has no name to look for, so only entities count."""
    unnamed = Recipient(bot_id=BOT_ID)
    got = dropped(update(message=typed(f"@{USERNAME} hi")), unnamed)
    assert got.reason == "group message not addressed to the bot"


# -- topics and threads ---------------------------------------------------------------------


def test_a_forum_topic_is_its_own_conversation_and_its_root_is_not_a_reply() -> None:
    root = message(
        None, chat=GROUP, message_id=90, forum_topic_created={"name": "T", "icon_color": 1}
    )
    data = update(
        message=message(
            f"@{USERNAME} in the topic",
            chat=GROUP,
            message_id=95,
            message_thread_id=90,
            is_topic_message=True,
            reply_to_message=root,
        )
    )
    got = event(data)
    conv = got.conversation
    assert (conv.chat_id, conv.thread_id, conv.chat_type) == ("-1009001", "90", "group")
    assert conv.key == "telegram:-1009001:90"
    assert (got.reply_to, got.reply_to_bot, got.mentions_bot) == (None, False, True)
    assert conv.target().thread_id == "90"


def test_a_reply_inside_a_topic_keeps_the_reply_and_the_thread() -> None:
    ours = message("answer", chat=GROUP, sender={**OTHER_BOT, "id": BOT_ID}, message_id=96)
    got = event(
        update(
            message=message(
                "follow-up",
                chat=GROUP,
                message_thread_id=90,
                is_topic_message=True,
                reply_to_message=ours,
            )
        )
    )
    assert (got.conversation.thread_id, got.reply_to, got.reply_to_bot) == ("90", "96", True)


def test_a_reply_thread_outside_a_forum_is_not_a_separate_conversation() -> None:
    got = event(update(message=message("/ping", chat=GROUP, message_thread_id=12)))
    assert got.conversation.thread_id is None
    assert got.conversation.key == "telegram:-1009001"


# -- edits, channels, senders -----------------------------------------------------------------


def test_an_edit_is_an_edit_at_its_edit_date_even_when_it_is_a_command() -> None:
    edited = message("/ping fixed", edit_date=WHEN + 60)
    got = event(update(edited_message=edited))
    assert (got.kind, got.text, got.command, got.args, got.message_id) == (
        Kind.EDIT,
        "/ping fixed",
        None,
        "",
        "10",
    )
    assert got.timestamp == datetime.fromtimestamp(WHEN + 60, UTC)
    no_date = event(update(edited_message=message("typo fixed")))
    assert no_date.timestamp == datetime.fromtimestamp(WHEN, UTC)


def test_channel_posts_and_their_edits_come_from_the_channel() -> None:
    channel = {"id": -1004242, "type": "channel", "title": "News", "username": "news"}
    post = message("breaking", chat=channel, sender=None, sender_chat=channel)
    got = event(update(channel_post=post))
    assert (got.kind, got.conversation.chat_type, got.conversation.chat_id) == (
        Kind.MESSAGE,
        "channel",
        "-1004242",
    )
    assert got.sender is not None
    assert (got.sender.id, got.sender.name, got.sender.is_bot) == ("-1004242", "News", False)
    edit = event(update(edited_channel_post={**post, "edit_date": WHEN + 5}))
    assert (edit.kind, edit.text) == (Kind.EDIT, "breaking")
    no_sender = event(update(channel_post=message("anon", chat=channel, sender=None)))
    assert no_sender.sender is None


def test_an_anonymous_admin_speaks_as_the_group() -> None:
    post = message(f"@{USERNAME} status?", chat=GROUP, sender_chat=GROUP)
    got = event(update(message=post))
    assert got.sender is not None
    assert (got.sender.id, got.sender.name) == ("-1009001", "Tea party")


def test_a_sender_chat_without_a_title_is_named_by_its_username() -> None:
    chat = {"id": -1005, "type": "channel", "username": "plain"}
    got = event(update(channel_post=message("x", chat=chat, sender=None, sender_chat=chat)))
    assert got.sender is not None and got.sender.name == "plain"


@pytest.mark.parametrize(
    "user, name",
    [
        ({"id": 4711, "is_bot": False, "first_name": ""}, "4711"),
        ({"id": 4711, "is_bot": False, "first_name": "", "last_name": "Hare"}, "Hare"),
        ({"id": 4711, "is_bot": False, "first_name": "", "username": "march_hare"}, "march_hare"),
        (
            {"id": 4711, "is_bot": False, "first_name": " ", "last_name": "Hare", "username": "h"},
            "Hare",
        ),
        ({"id": 4711, "is_bot": False, "first_name": "March", "last_name": ""}, "March"),
    ],
)
def test_a_user_without_a_first_name_is_named_by_what_they_have(
    user: dict[str, Any], name: str
) -> None:
    """Telegram sends an empty first_name (deleted accounts, some imports); the update is
    still the person's message, and their button presses still count."""
    said = event(update(message=message("/tea", chat=GROUP, sender=user)))
    assert said.sender is not None
    assert (said.kind, said.sender.id, said.sender.name) == (Kind.COMMAND, "4711", name)
    press = {"id": "cq", "from": user, "chat_instance": "c", "data": "more"}
    pressed = event(update(callback_query=press))
    assert pressed.sender is not None
    assert (pressed.kind, pressed.sender.id, pressed.sender.name) == (Kind.CALLBACK, "4711", name)


def test_a_sender_chat_without_a_title_or_username_is_named_by_its_id() -> None:
    chat = {"id": -1006, "type": "channel"}
    got = event(update(channel_post=message("x", chat=chat, sender=None, sender_chat=chat)))
    assert got.sender is not None and got.sender.name == "-1006"


def test_messages_from_bots_are_ignored_unless_ignore_bots_is_off() -> None:
    data = update(message=message("beep", sender=OTHER_BOT))
    assert dropped(data) == Dropped("telegram.ignored", "from a bot")
    listening = Recipient(bot_id=BOT_ID, username=USERNAME, ignore_bots=False)
    got = event(data, listening)
    assert got.sender is not None
    assert (got.sender.id, got.sender.name, got.sender.is_bot) == ("8080", "Echo", True)


def test_an_unknown_chat_type_is_treated_as_a_group() -> None:
    odd = {"id": -5, "type": "sender", "title": "?"}
    assert dropped(update(message=message("hi", chat=odd))).log_event == "telegram.ignored"
    assert event(update(message=message("/ping", chat=odd))).conversation.chat_type == "group"


# -- button presses ---------------------------------------------------------------------------


def test_a_button_press_is_a_callback_in_the_messages_chat() -> None:
    shown = message("Pick one", sender={**OTHER_BOT, "id": BOT_ID}, message_id=55)
    query = {
        "id": "cq-1",
        "from": ALICE,
        "chat_instance": "ci-1",
        "data": "pick:2",
        "message": {**shown, "chat": GROUP},
    }
    data = update(711, callback_query=query)
    got = event(data)
    assert (got.key, got.kind, got.text, got.message_id) == (
        f"tg:{BOT_ID}:711",
        Kind.CALLBACK,
        "pick:2",
        "55",
    )
    assert got.meta == {"callback_query_id": "cq-1"}
    conv = got.conversation
    assert (conv.chat_id, conv.chat_type, conv.thread_id) == ("-1009001", "group", None)
    assert got.sender is not None
    assert (got.sender.id, got.sender.name) == ("31337", "Alice Liddell")
    assert got.raw == data


def test_a_button_press_in_a_topic_stays_in_the_topic() -> None:
    shown = message("Pick", chat=GROUP, message_thread_id=90, is_topic_message=True)
    query = {"id": "cq-2", "from": ALICE, "chat_instance": "c", "data": "x", "message": shown}
    assert event(update(callback_query=query)).conversation.thread_id == "90"


def test_a_button_on_an_inline_message_is_answered_in_the_users_dm() -> None:
    query = {
        "id": "cq-3",
        "from": ALICE,
        "chat_instance": "c",
        "inline_message_id": "inl-9",
        "data": "vote",
    }
    got = event(update(callback_query=query))
    assert got.meta == {"callback_query_id": "cq-3", "inline_message_id": "inl-9"}
    conv = got.conversation
    assert (conv.chat_id, conv.chat_type, got.message_id, got.text) == ("31337", "dm", None, "vote")


def test_a_game_button_carries_the_game_name_and_a_bare_press_no_text() -> None:
    game = {"id": "cq-4", "from": ALICE, "chat_instance": "c", "game_short_name": "snake"}
    assert event(update(callback_query=game)).text == "snake"
    bare = {"id": "cq-5", "from": ALICE, "chat_instance": "c"}
    assert event(update(callback_query=bare)).text == ""


def test_a_button_on_a_message_too_old_to_read_still_has_its_chat() -> None:
    inaccessible = {"message_id": 66, "date": 0, "chat": GROUP}
    query = {
        "id": "cq-6",
        "from": ALICE,
        "chat_instance": "c",
        "data": "d",
        "message": inaccessible,
    }
    got = event(update(callback_query=query))
    assert (got.conversation.chat_id, got.message_id, got.conversation.thread_id) == (
        "-1009001",
        "66",
        None,
    )


# -- media and other content ------------------------------------------------------------------


def _file(file_id: str, **fields: Any) -> dict[str, Any]:
    return {"file_id": file_id, "file_unique_id": f"u-{file_id}", **fields}


def test_a_photo_is_its_largest_size_and_its_caption_the_text() -> None:
    sizes = [
        _file("thumb", width=90, height=60, file_size=900),
        _file("full", width=1280, height=853, file_size=98765),
    ]
    photo = message(None, photo=sizes, caption=f"look @{USERNAME}")
    photo["caption_entities"] = [{"type": "mention", "offset": 5, "length": 12}]
    got = event(update(message=photo))
    assert (got.kind, got.text) == (Kind.MESSAGE, f"look @{USERNAME}")
    assert (got.mentions, got.mentions_bot) == ([USERNAME], True)
    (att,) = got.attachments
    assert (att.kind, att.file_id, att.mime, att.size, att.name) == (
        "photo",
        "full",
        "image/jpeg",
        98765,
        None,
    )


def test_a_caption_command_is_a_command() -> None:
    doc = message(None, document=_file("d1"), caption="/scan fast")
    got = event(update(message=doc))
    assert (got.kind, got.command, got.args) == (Kind.COMMAND, "scan", "fast")


def test_each_media_kind_is_one_attachment_with_its_mime() -> None:
    media = message(
        None,
        document=_file("doc", file_name="notes.pdf", mime_type="application/pdf", file_size=10),
        audio=_file("aud", duration=3, mime_type="audio/mpeg", file_name="a.mp3"),
        video=_file("vid", width=1, height=1, duration=2, mime_type="video/mp4", file_size=30),
        voice=_file("voc", duration=1),
        video_note=_file("note", length=240, duration=4),
    )
    got = event(update(message=media))
    assert {(a.kind, a.file_id, a.mime, a.size, a.name) for a in got.attachments} == {
        ("document", "doc", "application/pdf", 10, "notes.pdf"),
        ("audio", "aud", "audio/mpeg", None, "a.mp3"),
        ("video", "vid", "video/mp4", 30, None),
        ("voice", "voc", "audio/ogg", None, None),
        ("video_note", "note", "video/mp4", None, None),
    }
    assert (got.text, got.kind) == ("", Kind.MESSAGE)


def test_a_gif_is_an_animation_once_not_also_a_document() -> None:
    gif = _file("gif", width=1, height=1, duration=1, mime_type="video/mp4", file_name="a.mp4")
    got = event(update(message=message(None, animation=gif, document=gif)))
    assert [(a.kind, a.file_id, a.mime) for a in got.attachments] == [
        ("animation", "gif", "video/mp4")
    ]


@pytest.mark.parametrize(
    "is_animated, is_video, mime",
    [
        (False, False, "image/webp"),
        (True, False, "application/x-tgsticker"),
        (False, True, "video/webm"),
    ],
)
def test_a_sticker_mime_follows_its_format(is_animated: bool, is_video: bool, mime: str) -> None:
    sticker = _file(
        "stk", type="regular", width=512, height=512, is_animated=is_animated, is_video=is_video
    )
    (att,) = event(update(message=message(None, sticker=sticker))).attachments
    assert (att.kind, att.file_id, att.mime) == ("sticker", "stk", mime)


def _old_file(file_id: str, **fields: Any) -> dict[str, Any]:
    """A file as the Bot API sent it before 4.5 (2019): no ``file_unique_id``."""
    return {"file_id": file_id, **fields}


def test_media_from_before_file_unique_id_is_read() -> None:
    """PTB 22 requires ``file_unique_id``; Tether never uses it, so an old payload (a
    replayed backlog, a self-hosted server, fixtures of other projects) is not skipped."""
    sizes = [_old_file("small", width=90, height=60), _old_file("big", width=900, height=600)]
    data = update(
        message=message(
            None,
            photo=sizes,
            caption="old photo",
            document=_old_file("doc", file_name="a.pdf", mime_type="application/pdf"),
            audio=_old_file("aud", duration=3, mime_type="audio/mpeg"),
            voice=_old_file("voc", duration=1, file_size=5),
            video=_old_file("vid", width=1, height=1, duration=2, thumb=_old_file("t")),
            video_note=_old_file("note", length=1, duration=1),
        )
    )
    before = json.dumps(data, sort_keys=True)
    got = event(data)
    assert got.text == "old photo"
    assert [(a.kind, a.file_id, a.size) for a in got.attachments] == [
        ("photo", "big", None),
        ("document", "doc", None),
        ("voice", "voc", 5),
        ("video", "vid", None),
        ("audio", "aud", None),
        ("video_note", "note", None),
    ]
    assert json.dumps(data, sort_keys=True) == before and got.raw == data


def test_an_old_sticker_without_a_type_or_video_flag_is_read() -> None:
    old = _old_file("stk", width=512, height=512, emoji="🫖", set_name="teatime", is_animated=1)
    got = event(update(message=message(None, sticker={**old, "thumb": _old_file("th")})))
    (att,) = got.attachments
    assert (att.kind, att.file_id, att.mime) == ("sticker", "stk", "application/x-tgsticker")
    assert got.text == "[sticker: 🫖 teatime]"
    plain = event(update(message=message(None, sticker=_old_file("s2", width=1, height=1))))
    assert (plain.attachments[0].mime, plain.text) == ("image/webp", "[sticker]")


def test_an_old_file_in_the_replied_to_message_is_read_too() -> None:
    earlier = message(None, message_id=2, document=_old_file("d"))
    got = event(update(message=message("about that file", reply_to_message=earlier)))
    assert (got.text, got.reply_to) == ("about that file", "2")


_DIE = {"emoji": "🎯", "value": 4}
_POLL = {
    "id": "p1",
    "question": "Tea?",
    "options": [
        {"text": "yes", "voter_count": 0, "persistent_id": "a"},
        {"text": "no", "voter_count": 0, "persistent_id": "b"},
    ],
    "total_voter_count": 0,
    "is_closed": False,
    "is_anonymous": True,
    "type": "regular",
    "allows_multiple_answers": False,
    "allows_revoting": False,
    "members_only": False,
}


@pytest.mark.parametrize(
    "field, value, text",
    [
        ("location", {"latitude": 52.5, "longitude": 13.4}, "[location: 52.5, 13.4]"),
        ("contact", {"phone_number": "+100", "first_name": "Bob"}, "[contact: Bob, +100]"),
        (
            "contact",
            {"phone_number": "+200", "first_name": "Bill", "last_name": "Lizard"},
            "[contact: Bill Lizard, +200]",
        ),
        ("dice", {"emoji": "🎲", "value": 6}, "[dice: 🎲 6]"),
        ("poll", _POLL, "[poll: Tea? — yes, no]"),
        ("game", {"title": "Croquet", "description": "d", "photo": []}, "[game: Croquet]"),
        ("story", {"chat": GROUP, "id": 3}, "[story: Tea party]"),
        (
            "chat_shared",
            {"request_id": 1, "chat_id": -1007, "title": "Court"},
            "[chat shared: Court]",
        ),
        ("chat_shared", {"request_id": 1, "chat_id": -1007}, "[chat shared: -1007]"),
        (
            "users_shared",
            {"request_id": 2, "users": [{"user_id": 11, "first_name": "Bill"}, {"user_id": 12}]},
            "[users shared: Bill, 12]",
        ),
    ],
)
def test_content_without_text_or_file_is_described_and_named(
    field: str, value: Any, text: str
) -> None:
    """A location, a poll, a die...: a person meant something, so the text says what,
    for handlers and the model that only read ``text``; the details stay in ``raw``."""
    got = event(update(message=message(None, **{field: value})))
    assert (got.kind, got.text, got.attachments, got.meta) == (
        Kind.MESSAGE,
        text,
        [],
        {"content": field},
    )
    assert got.raw is not None and got.raw["message"][field] == value


def test_a_venue_is_named_venue_though_it_carries_a_location() -> None:
    spot = {"latitude": 1.0, "longitude": 2.0}
    venue = {"location": spot, "title": "Café", "address": "Main St 1"}
    got = event(update(message=message(None, venue=venue, location=spot)))
    assert (got.meta, got.text) == ({"content": "venue"}, "[venue: Café, Main St 1]")


@pytest.mark.parametrize(
    "fields, text",
    [
        ({"emoji": "🫖", "set_name": "teatime"}, "[sticker: 🫖 teatime]"),
        ({"emoji": "🫖"}, "[sticker: 🫖]"),
        ({"set_name": "teatime"}, "[sticker: teatime]"),
        ({}, "[sticker]"),
    ],
)
def test_a_sticker_is_described_by_its_emoji_and_set(fields: dict[str, Any], text: str) -> None:
    sticker = _file("stk", type="regular", width=1, height=1, is_animated=False, is_video=False)
    got = event(update(message=message(None, sticker={**sticker, **fields})))
    assert (got.text, [a.kind for a in got.attachments], got.meta) == (text, ["sticker"], {})


def test_a_description_is_not_a_command_and_does_not_address_the_bot() -> None:
    """A poll in a group is still only for us when it is addressed (here: it is not)."""
    assert dropped(update(message=message(None, chat=GROUP, poll=_POLL))).reason == (
        "group message not addressed to the bot"
    )
    ours = message("q", chat=GROUP, sender={**OTHER_BOT, "id": BOT_ID}, message_id=3)
    got = event(update(message=message(None, chat=GROUP, dice=_DIE, reply_to_message=ours)))
    assert (got.kind, got.text, got.command, got.reply_to_bot) == (
        Kind.MESSAGE,
        "[dice: 🎯 4]",
        None,
        True,
    )


# -- forwarded messages ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "fields, origin",
    [
        (
            {"forward_origin": {"type": "user", "date": WHEN, "sender_user": ALICE}},
            "Alice Liddell",
        ),
        (
            {
                "forward_origin": {
                    "type": "user",
                    "date": WHEN,
                    "sender_user": {"id": 9, "is_bot": False, "first_name": ""},
                }
            },
            "9",
        ),
        (
            {"forward_origin": {"type": "hidden_user", "date": WHEN, "sender_user_name": "Dodo"}},
            "Dodo",
        ),
        (
            {
                "forward_origin": {
                    "type": "chat",
                    "date": WHEN,
                    "sender_chat": GROUP,
                    "author_signature": "Queen",
                }
            },
            "Tea party (Queen)",
        ),
        (
            {
                "forward_origin": {
                    "type": "channel",
                    "date": WHEN,
                    "chat": {"id": -1004242, "type": "channel", "title": "News"},
                    "message_id": 7,
                }
            },
            "News",
        ),
        # Bot API before 7.0 (and the webhook samples Telegram's own docs still show)
        ({"forward_from": {**ALICE, "first_name": "Al"}, "forward_date": WHEN}, "Al Liddell"),
        (
            {
                "forward_from_chat": {"id": -1004242, "type": "channel", "title": "News"},
                "forward_date": WHEN,
            },
            "News",
        ),
        ({"forward_sender_name": "Dodo", "forward_date": WHEN}, "Dodo"),
    ],
)
def test_a_forward_names_where_it_came_from_and_keeps_its_text(
    fields: dict[str, Any], origin: str
) -> None:
    got = event(update(message=message("the trial starts at noon", **fields)))
    assert (got.kind, got.text, got.meta) == (
        Kind.MESSAGE,
        "the trial starts at noon",
        {"forwarded_from": origin},
    )


def test_a_forwarded_story_is_described_and_a_forwarded_poll_too() -> None:
    channel = {"id": -1004242, "type": "channel", "title": "News"}
    origin = {"type": "channel", "date": WHEN, "chat": channel, "message_id": 7}
    story = event(update(message=message(None, story={"chat": channel, "id": 2})))
    assert (story.text, story.meta) == ("[story: News]", {"content": "story"})
    poll = event(update(message=message(None, poll=_POLL, forward_origin=origin)))
    assert (poll.text, poll.meta) == (
        "[poll: Tea? — yes, no]",
        {"content": "poll", "forwarded_from": "News"},
    )


def test_a_forward_with_an_unreadable_legacy_origin_is_still_the_message() -> None:
    got = event(update(message=message("hi", forward_from="nobody", forward_date=WHEN)))
    assert (got.text, got.meta) == ("hi", {})


# -- what is left out, and why ------------------------------------------------------------------


@pytest.mark.parametrize(
    "service",
    [
        {"new_chat_members": [ALICE]},
        {"left_chat_member": ALICE},
        {"new_chat_title": "Renamed"},
        {"pinned_message": {"message_id": 1, "date": 0, "chat": DM}},
        {"forum_topic_created": {"name": "T", "icon_color": 1}},
        {"migrate_to_chat_id": -100123},
        {"group_chat_created": True},
        {},
    ],
)
def test_service_messages_are_skipped(service: dict[str, Any]) -> None:
    for chat in (DM, GROUP):
        got = dropped(update(message=message(None, chat=chat, **service)))
        assert got == Dropped("telegram.skipped", "service message or unsupported content")


def test_an_empty_text_is_no_content() -> None:
    assert dropped(update(message=message(""))).log_event == "telegram.skipped"


@pytest.mark.parametrize(
    "kind, body",
    [
        ("inline_query", {"id": "iq", "from": ALICE, "query": "tea", "offset": ""}),
        (
            "poll_answer",
            {"poll_id": "p", "option_ids": [0], "option_persistent_ids": ["a"], "user": ALICE},
        ),
        (
            "my_chat_member",
            {
                "chat": GROUP,
                "from": ALICE,
                "date": WHEN,
                "old_chat_member": {"status": "member", "user": ALICE},
                "new_chat_member": {"status": "left", "user": ALICE},
            },
        ),
        ("something_new", {"any": "thing"}),
    ],
)
def test_update_types_tether_does_not_handle_are_skipped_by_name(kind: str, body: Any) -> None:
    got = dropped(update(**{kind: body}))
    assert got == Dropped("telegram.skipped", f"unsupported update type: {kind}")


def test_an_update_with_nothing_in_it_is_skipped_as_empty() -> None:
    assert dropped(update()) == Dropped("telegram.skipped", "unsupported update type: empty")
    names = dropped(update(message=None, zeta={}, alpha=1)).reason
    assert names == "unsupported update type: alpha, message, zeta"


@pytest.mark.parametrize(
    "data",
    [
        None,
        [],
        [{"update_id": 1}],
        "update",
        7,
        {},
        {"message": message()},
        {"update_id": "701", "message": message()},
        {"update_id": 701.0, "message": message()},
        {"update_id": True, "message": message()},
        {"update_id": None},
    ],
)
def test_what_is_not_an_update_is_skipped(data: Any) -> None:
    assert update_id(data) is None
    assert dropped(data) == Dropped("telegram.skipped", "not an update (no integer update_id)")


@pytest.mark.parametrize(
    "body, reason",
    [
        ("a string", "unparsable: "),
        ({}, "unparsable: KeyError: 'date'"),
        ({**message(), "chat": "not a chat"}, "unparsable: TypeError: "),
        ({**message(), "date": "yesterday"}, "unparsable: TypeError: "),
        ({**message(), "from": {"id": 1}}, "unparsable: TypeError: "),
        ({**message(), "entities": "bold"}, "unparsable: "),
        ({**message(), "reply_to_message": 5}, "unparsable: "),
        ({k: v for k, v in message().items() if k != "chat"}, "cannot normalize: AttributeError: "),
        ({**message(), "text": 5}, "cannot normalize: AttributeError: "),
    ],
)
def test_malformed_messages_are_skipped_with_the_reason(body: Any, reason: str) -> None:
    got = dropped(update(message=body))
    assert got.log_event == "telegram.skipped"
    assert got.reason.startswith(reason), got.reason


def test_a_button_press_without_a_presser_is_skipped() -> None:
    got = dropped(update(callback_query={"id": "cq", "chat_instance": "c", "data": "x"}))
    assert got.log_event == "telegram.skipped"
    assert got.reason.startswith("cannot normalize: AttributeError: ")


def test_the_payload_is_not_changed() -> None:
    data = update(message=message(f"/ping@{USERNAME} a", chat=GROUP))
    before = json.dumps(data, sort_keys=True)
    event(data)
    assert json.dumps(data, sort_keys=True) == before


# -- it never raises ----------------------------------------------------------------------------

_SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**63)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=20)
)
#: Field names the parser looks for, so random dicts reach past the first checks.
_NAMES = st.sampled_from(
    [
        "update_id",
        "message",
        "edited_message",
        "channel_post",
        "callback_query",
        "message_id",
        "date",
        "chat",
        "id",
        "type",
        "from",
        "text",
        "caption",
        "entities",
        "photo",
        "sticker",
        "reply_to_message",
        "sender_chat",
        "is_topic_message",
        "message_thread_id",
        "data",
        "first_name",
        "is_bot",
        "file_id",
        "file_unique_id",
        "forward_origin",
        "forward_from",
        "forward_from_chat",
        "forward_sender_name",
        "sender_user",
        "author_signature",
        "last_name",
        "username",
        "title",
        "poll",
        "question",
        "options",
        "story",
        "venue",
        "chat_shared",
        "users_shared",
        "set_name",
        "emoji",
        "is_video",
    ]
)
JSON = st.recursive(
    _SCALARS,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(_NAMES | st.text(max_size=8), inner, max_size=5)
    ),
    max_leaves=25,
)


def _stored(outcome: Event | Dropped) -> None:
    """What normalize returns must also be storable: an Event the inbox cannot encode
    would fail the whole batch's accept, and the poll loop would fetch it forever."""
    assert isinstance(outcome, Event | Dropped)
    if isinstance(outcome, Event):
        Event.from_json(outcome.to_json())


@pytest.mark.slow
@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(JSON, st.integers(min_value=-(2**40), max_value=2**40))
def test_arbitrary_json_never_raises(value: Any, number: int) -> None:
    _stored(normalize(value, US))
    if isinstance(value, dict):
        _stored(normalize({**value, "update_id": number}, US))
        for kind in ("message", "callback_query", "edited_channel_post"):
            _stored(normalize({"update_id": number, kind: value}, US))


_TEMPLATES = [
    update(message=message(f"/ping@{USERNAME} a", chat=GROUP, message_thread_id=4)),
    update(message=message(f"hi @{USERNAME}", chat=GROUP, reply_to_message=message("x"))),
    update(
        message=message(
            None,
            caption="c",
            photo=[_file("p", width=1, height=1)],
            sticker=_file(
                "s", type="regular", width=1, height=1, is_animated=False, is_video=False
            ),
        )
    ),
    update(edited_message=message("e", edit_date=WHEN, sender_chat=GROUP)),
    update(
        callback_query={
            "id": "q",
            "from": ALICE,
            "chat_instance": "c",
            "data": "d",
            "message": message("m", chat=GROUP, is_topic_message=True, message_thread_id=2),
        }
    ),
    # shapes of issue 15: typed mentions, nameless users, forwards, old files, descriptions
    update(message=typed(f"so, @{USERNAME}", sender={**ALICE, "first_name": ""})),
    update(
        message=message(
            "fwd",
            forward_origin={
                "type": "chat",
                "date": WHEN,
                "sender_chat": GROUP,
                "author_signature": "Q",
            },
        )
    ),
    update(message=message("fwd", forward_from=ALICE, forward_sender_name="A", forward_date=WHEN)),
    update(
        message=message(
            None,
            sticker=_old_file("s", width=1, height=1, emoji="🫖", set_name="t"),
            reply_to_message=message(None, message_id=2, photo=[_old_file("p", width=1, height=1)]),
        )
    ),
    update(
        message=message(
            None,
            poll=_POLL,
            forward_origin={"type": "hidden_user", "date": WHEN, "sender_user_name": "D"},
        )
    ),
    update(
        message=message(
            None, venue={"location": {"latitude": 1, "longitude": 2}, "title": "C", "address": "M"}
        )
    ),
    update(message=message(None, story={"chat": GROUP, "id": 1})),
    update(
        message=message(
            None, users_shared={"request_id": 2, "users": [{"user_id": 11, "first_name": "B"}]}
        )
    ),
    update(message=message(None, chat_shared={"request_id": 1, "chat_id": -1007, "title": "C"})),
]


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every place in a payload a value sits, nested ones included."""
    out = [prefix] if prefix else []
    if isinstance(value, dict):
        for key, inner in value.items():
            out += _paths(inner, (*prefix, key))
    elif isinstance(value, list):
        for index, inner in enumerate(value):
            out += _paths(inner, (*prefix, index))
    return out


def _replaced(value: Any, path: tuple[Any, ...], new: Any) -> Any:
    if not path:
        return new
    head, rest = path[0], path[1:]
    if isinstance(value, dict):
        return {**value, head: _replaced(value[head], rest, new)}
    copy = list(value)
    copy[head] = _replaced(copy[head], rest, new)
    return copy


def _removed(value: Any, path: tuple[Any, ...]) -> Any:
    head, rest = path[0], path[1:]
    if isinstance(value, dict):
        if not rest:
            return {key: inner for key, inner in value.items() if key != head}
        return {**value, head: _removed(value[head], rest)}
    copy = list(value)
    if not rest:
        del copy[head]
    else:
        copy[head] = _removed(copy[head], rest)
    return copy


@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_right_shapes_with_wrong_types_or_missing_fields_never_raise(data: st.DataObject) -> None:
    """Older and newer Bot API versions leave fields out or change their types: whatever
    is replaced or missing, the outcome is an event or a reason, never an exception."""
    template = data.draw(st.sampled_from(_TEMPLATES))
    payload = template
    for _ in range(data.draw(st.integers(min_value=1, max_value=3))):
        paths = _paths(payload)
        if not paths:
            break
        path = data.draw(st.sampled_from(paths))
        if data.draw(st.booleans()):
            payload = _replaced(payload, path, data.draw(JSON))
        else:
            payload = _removed(payload, path)
    _stored(normalize(payload, US))


def _without_unique_ids(value: Any) -> Any:
    if isinstance(value, dict):
        return {
            key: _without_unique_ids(inner)
            for key, inner in value.items()
            if key not in ("file_unique_id", "is_video", "type") or "file_id" not in value
        }
    if isinstance(value, list):
        return [_without_unique_ids(inner) for inner in value]
    return value


@settings(deadline=None)
@given(st.sampled_from(_TEMPLATES))
def test_a_template_without_the_fields_added_since_2019_reads_the_same(template: Any) -> None:
    """Dropping ``file_unique_id`` (and a sticker's ``type``/``is_video``) from every file
    changes nothing but ``raw``: Tether never reads them."""
    old = _without_unique_ids(template)
    now, then = event(template), event(old)
    assert then.raw == old
    same = {"raw", "timestamp"}  # a button press is stamped when it is read
    assert then.model_dump(exclude=same) == now.model_dump(exclude=same)


_CASES = st.lists(st.booleans(), min_size=len(USERNAME), max_size=len(USERNAME))
_WORD_CHARACTER = st.characters().filter(lambda c: c.isalnum() or c == "_")


def _cased(flags: list[bool]) -> str:
    return "".join(c.upper() if up else c.lower() for c, up in zip(USERNAME, flags, strict=True))


@settings(deadline=None)
@given(st.text(max_size=30), st.text(max_size=30), _CASES, st.sampled_from(" \n,(!?.:;\"'"))
def test_a_typed_mention_between_non_word_characters_addresses_the_bot(
    before: str, after: str, flags: list[bool], edge: str
) -> None:
    text = f"{before} @{_cased(flags)}{edge}{after}"
    got = event(update(message=typed(text)))
    assert got.mentions_bot and got.text == text


@settings(deadline=None)
@given(st.text(max_size=30), st.text(max_size=30), _CASES, _WORD_CHARACTER)
def test_a_typed_mention_running_into_a_word_does_not_address_the_bot(
    before: str, after: str, flags: list[bool], glued: str
) -> None:
    assume(USERNAME.lower() not in (before + after).lower())
    assume(not before.startswith("/"))  # a command addresses the bot by itself
    text = f"{before} @{_cased(flags)}{glued}{after}"
    assert normalize(update(message=typed(text)), US) == Dropped(
        "telegram.ignored", "group message not addressed to the bot"
    )


def test_the_templates_are_events() -> None:
    """The fuzzed shapes start from payloads that normalize reads, not from junk."""
    for template in _TEMPLATES:
        assert isinstance(normalize(template, US), Event)


# -- the shared corpus of real payloads -----------------------------------------------------------


@pytest.mark.skipif(not CORPUS.is_dir(), reason=f"no corpus at {CORPUS}")
def test_every_corpus_payload_is_an_event_or_a_reason() -> None:
    """Payloads written by other projects' fixtures: none may make normalize raise."""
    files = sorted(CORPUS.glob("*.json"))
    assert files
    outcomes: dict[str, str] = {}
    for path in files:
        outcome = normalize(json.loads(path.read_text()), US)
        _stored(outcome)
        outcomes[path.name] = outcome.kind if isinstance(outcome, Event) else outcome.log_event
        if isinstance(outcome, Dropped):  # left out on purpose, never for want of parsing
            assert not outcome.reason.startswith(("unparsable", "cannot normalize")), path.name
    assert {"message", "command", "edit", "callback"} <= set(outcomes.values())


#: Who the corpus's bots are: the iOS samples address ``@hermes_bot``, the PTB samples
#: ``@TetherCorpusBot`` (in another letter case than the bot's own name), id 123456789.
HERMES = Recipient(bot_id=BOT_ID, username="hermes_bot")
CORPUS_BOT = Recipient(bot_id=123456789, username="tethercorpusbot")
EVERY_MESSAGE = Recipient(bot_id=BOT_ID, username=USERNAME, answer_groups="all")

#: Corpus files that showed a bug, and what they must now become (only the fields named).
CORPUS_FIXED: list[tuple[str, Recipient, dict[str, Any]]] = [
    # an empty first_name: was "cannot normalize"
    (
        "ptb_command_for_our_bot_mixed_case.json",
        CORPUS_BOT,
        {"kind": Kind.COMMAND, "command": "test", "args": "with args", "sender": "1"},
    ),
    (
        "ptb_command_for_other_bot.json",
        CORPUS_BOT,
        {"dropped": "telegram.ignored", "reason": "command for another bot"},
    ),
    # text mentions of the bot (right before too)
    ("ptb_text_mention_entities_group.json", CORPUS_BOT, {"mentions_bot": True}),
    ("ptb_caption_text_mention_group.json", CORPUS_BOT, {"mentions_bot": True}),
    # @botname typed without a mention entity: was "not addressed"
    (
        "hermes_ios_formatted_no_mention_entity.json",
        HERMES,
        {"kind": Kind.MESSAGE, "mentions_bot": True, "thread": "77"},
    ),
    (
        "hermes_ios_plain_no_entities.json",
        HERMES,
        {"kind": Kind.MESSAGE, "mentions_bot": True, "thread": "77"},
    ),
    ("hermes_macos_mention_entity.json", HERMES, {"mentions_bot": True, "thread": "77"}),
    # no file_unique_id (or no sticker type): was "unparsable"
    ("aiogram_photo_caption_legacy_no_unique_id.json", US, {"attachments": ["photo"]}),
    ("nb_audio_no_unique_id.json", US, {"attachments": ["audio"]}),
    ("nb_document_no_unique_id.json", US, {"attachments": ["document"]}),
    ("nb_voice_no_unique_id.json", US, {"attachments": ["voice"]}),
    (
        "cw_sticker_legacy_shape.json",
        US,
        {"attachments": ["sticker"], "text_head": "[sticker:", "meta": []},
    ),
    # content without text: was an empty text or skipped
    ("tx_animated_sticker.json", US, {"attachments": ["sticker"], "text_head": "[sticker:"}),
    ("ptba_video_sticker_supergroup.json", EVERY_MESSAGE, {"text_head": "[sticker:"}),
    ("ptba_dice_dart_surrogates.json", US, {"text_head": "[dice:", "meta": ["content"]}),
    ("tx_dice_supergroup.json", EVERY_MESSAGE, {"text_head": "[dice:", "meta": ["content"]}),
    ("ptb_poll_message_group.json", EVERY_MESSAGE, {"text_head": "[poll:", "meta": ["content"]}),
    ("tx_venue.json", US, {"text_head": "[venue:", "meta": ["content"]}),
    ("tx_story_only_supergroup.json", EVERY_MESSAGE, {"text_head": "[story:"}),
    ("tx_chat_shared_no_from.json", US, {"text_head": "[chat", "meta": ["content"]}),
    # forwards: the origin named (old forward_from* fields and forward_origin alike)
    ("nb_forwarded_from_user.json", US, {"meta": ["forwarded_from"]}),
    ("nb_forwarded_from_channel.json", US, {"meta": ["forwarded_from"]}),
    ("tx_anonymous_admin_forward_origin.json", EVERY_MESSAGE, {"meta": ["forwarded_from"]}),
]


def _shape(outcome: Event | Dropped) -> dict[str, Any]:
    """The fields :data:`CORPUS_FIXED` compares, for a readable diff when one differs."""
    if isinstance(outcome, Dropped):
        return {"dropped": outcome.log_event, "reason": outcome.reason}
    return {
        "kind": outcome.kind,
        "command": outcome.command,
        "args": outcome.args,
        "sender": outcome.sender.name if outcome.sender else None,
        "thread": outcome.conversation.thread_id,
        "mentions_bot": outcome.mentions_bot,
        "attachments": [a.kind for a in outcome.attachments],
        "text_head": outcome.text.split(" ")[0],
        "meta": sorted(outcome.meta),
    }


@pytest.mark.skipif(not CORPUS.is_dir(), reason=f"no corpus at {CORPUS}")
@pytest.mark.parametrize(
    "name, recipient, expected", CORPUS_FIXED, ids=[c[0] for c in CORPUS_FIXED]
)
def test_corpus_payloads_that_showed_a_bug_now_normalize_right(
    name: str, recipient: Recipient, expected: dict[str, Any]
) -> None:
    data = json.loads((CORPUS / name).read_text())
    shape = _shape(normalize(data, recipient))
    assert {field: shape.get(field) for field in expected} == expected
