"""Telegram's pure normalize step, fed Bot API update dicts directly: no server, no adapter.

Every shape the adapter reads (text in DMs and groups, commands, mentions, replies,
topics, edits, channel posts, button presses, media) is built here from small helpers,
with the exact key, conversation, kind, text and sender asserted; so is every reason an
update is left out (a bot, a group message not for us, a service message, an update type
Tether does not handle, a malformed payload). Hypothesis then checks the promise the
poll loop relies on — normalize never raises, so one bad update cannot pin the offset —
and the last test runs it over the shared corpus of real payloads, when it is present.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tether.adapters.kit import Dropped
from tether.adapters.telegram.normalize import Recipient, normalize, update_id
from tether.events import Event, Kind

BOT_ID = 5550001
USERNAME = "Lantern_bot"
US = Recipient(bot_id=BOT_ID, username=USERNAME)
WHEN = 1_750_000_000
ALICE = {"id": 31337, "is_bot": False, "first_name": "Alice", "last_name": "Liddell"}
OTHER_BOT = {"id": 8080, "is_bot": True, "first_name": "Echo", "username": "echo_bot"}
GROUP = {"id": -1009001, "type": "supergroup", "title": "Tea party"}
DM = {"id": 31337, "type": "private", "first_name": "Alice"}
REPO = Path(__file__).resolve().parent.parent
#: Third-party payloads beside the repository (../shared/corpus); absent on some machines.
CORPUS = REPO.parent / "shared" / "corpus" / "telegram"


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


@pytest.mark.parametrize(
    "field, value",
    [
        ("location", {"latitude": 52.5, "longitude": 13.4}),
        ("contact", {"phone_number": "+100", "first_name": "Bob"}),
        ("dice", {"emoji": "🎲", "value": 6}),
        (
            "poll",
            {
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
            },
        ),
    ],
)
def test_content_without_text_or_file_is_kept_and_named(field: str, value: Any) -> None:
    got = event(update(message=message(None, **{field: value})))
    assert (got.kind, got.text, got.attachments, got.meta) == (
        Kind.MESSAGE,
        "",
        [],
        {"content": field},
    )
    assert got.raw is not None and got.raw["message"][field] == value


def test_a_venue_is_named_venue_though_it_carries_a_location() -> None:
    spot = {"latitude": 1.0, "longitude": 2.0}
    venue = {"location": spot, "title": "Café", "address": "Main St 1"}
    got = event(update(message=message(None, venue=venue, location=spot)))
    assert got.meta == {"content": "venue"}


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


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
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


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_right_shapes_with_wrong_types_never_raise(data: st.DataObject) -> None:
    template = data.draw(st.sampled_from(_TEMPLATES))
    payload = template
    for _ in range(data.draw(st.integers(min_value=1, max_value=3))):
        path = data.draw(st.sampled_from(_paths(payload)))
        payload = _replaced(payload, path, data.draw(JSON))
    _stored(normalize(payload, US))


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
    assert {"message", "command", "edit", "callback"} <= set(outcomes.values())
