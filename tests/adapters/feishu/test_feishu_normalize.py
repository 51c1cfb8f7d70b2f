"""The Feishu normalizer on its own: payload dicts in, an Event or a Dropped out.

No server, no adapter, no SDK: :func:`normalize` is pure, so every shape it handles is
fed to it directly, with the key, conversation, kind, text, command and sender asserted.
Then it is fuzzed (Hypothesis: arbitrary JSON, and the right shape with wrong types)
and run over the collected corpus of real payloads: it must never raise.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.config import CORPUS as SHARED_CORPUS
from tether.adapters.feishu.normalize import (
    IGNORED,
    SKIPPED,
    THREAD_MESSAGE,
    Bot,
    event_id_of,
    normalize,
)
from tether.adapters.kit import Dropped
from tether.events import REPLY_META, Attachment, Event, Kind, OutMessage

T = TypeVar("T", Event, Dropped)

BOT = Bot(open_id="ou_tether", name="Tether")
ALL_GROUPS = Bot(open_id="ou_tether", name="Tether", answer_groups="all")
CREATED_MS = "1767225600000"  # 2026-01-01T00:00:00Z
CREATED = datetime(2026, 1, 1, tzinfo=UTC)


def receive(
    message_id: str = "om_100",
    *,
    text: str | None = "hello there",
    content: Any = None,
    message_type: str = "text",
    chat_id: str = "oc_room",
    chat_type: str = "p2p",
    sender: Any = None,
    mentions: Any = None,
    event_id: str = "ev_100",
    **message_fields: Any,
) -> dict[str, Any]:
    """An ``im.message.receive_v1`` event (schema 2.0), written for these tests."""
    if content is None:
        content = {"text": text}
    message: dict[str, Any] = {
        "message_id": message_id,
        "chat_id": chat_id,
        "chat_type": chat_type,
        "message_type": message_type,
        "content": content if isinstance(content, str) else json.dumps(content),
        "create_time": CREATED_MS,
        **message_fields,
    }
    if mentions is not None:
        message["mentions"] = mentions
    if sender is None:
        sender = {
            "sender_id": {"open_id": "ou_mei", "union_id": "on_mei", "user_id": "u_mei"},
            "sender_type": "user",
            "tenant_key": "tk_sender",
        }
    return {
        "schema": "2.0",
        "header": {
            "event_id": event_id,
            "event_type": "im.message.receive_v1",
            "create_time": "1767225601000",
            "token": "secret-verification-token",
            "app_id": "cli_tests",
            "tenant_key": "tk_header",
        },
        "event": {"sender": sender, "message": message},
    }


def other(event_type: str, event: Any, event_id: str = "ev_200") -> dict[str, Any]:
    """Any other v2 event: a header and an event body."""
    header = {"event_id": event_id, "event_type": event_type, "create_time": CREATED_MS}
    return {"schema": "2.0", "header": {**header, "token": "tok"}, "event": event}


def at(key: str, open_id: str, name: str, **ids: str) -> dict[str, Any]:
    return {"key": key, "id": {"open_id": open_id, **ids}, "name": name}


def outcome_of(payload: Any, expected: type[T], bot: Bot) -> T:
    outcome = normalize(payload, bot)
    assert isinstance(outcome, expected), outcome
    return outcome


def event_of(payload: dict[str, Any], bot: Bot = BOT) -> Event:
    return outcome_of(payload, Event, bot)


def dropped(payload: Any, bot: Bot = BOT) -> Dropped:
    return outcome_of(payload, Dropped, bot)


# -- text, DMs and groups ----------------------------------------------------------------


def test_text_in_a_dm_becomes_a_message_with_every_field() -> None:
    event = event_of(receive("om_dm", text="hello there"))
    assert event.key == "fs:msg:om_dm" and event.message_id == "om_dm"
    assert (event.platform, event.kind, event.text) == ("feishu", Kind.MESSAGE, "hello there")
    assert event.conversation.key == "feishu:oc_room"
    assert (event.conversation.chat_type, event.conversation.thread_id) == ("dm", None)
    assert event.sender is not None
    assert (event.sender.id, event.sender.is_bot) == ("ou_mei", False)
    assert (event.command, event.args, event.reply_to) == (None, "", None)
    assert (event.mentions, event.mentions_bot, event.attachments) == ([], False, [])
    assert event.timestamp == CREATED  # the message's create_time, not the header's
    assert event.meta == {
        "event_id": "ev_100",
        "message_type": "text",
        "tenant_key": "tk_header",
        "open_id": "ou_mei",
        "union_id": "on_mei",
        "user_id": "u_mei",
    }
    assert event.raw is not None
    assert "token" not in event.raw["header"] and event.raw["header"]["app_id"] == "cli_tests"
    assert "secret-verification-token" not in json.dumps(event.raw)


def test_the_key_is_the_message_not_the_event() -> None:
    first = event_of(receive("om_same", event_id="ev_1"))
    again = event_of(receive("om_same", event_id="ev_2"))  # Feishu's retry: a new event id
    assert first.key == again.key == "fs:msg:om_same"
    assert (first.meta["event_id"], again.meta["event_id"]) == ("ev_1", "ev_2")


def test_a_group_message_that_mentions_the_bot() -> None:
    mentions = [at("@_user_1", "ou_tether", "Tether"), at("@_user_2", "ou_lin", "Lin")]
    payload = receive(
        "om_g", text="@_user_1 ask @_user_2", chat_type="group", chat_id="oc_g", mentions=mentions
    )
    event = event_of(payload)
    assert (event.kind, event.text) == (Kind.MESSAGE, "@Tether ask @Lin")
    assert event.conversation.key == "feishu:oc_g" and event.conversation.chat_type == "group"
    assert (event.mentions, event.mentions_bot) == (["ou_tether", "ou_lin"], True)
    assert event.session() == "feishu:oc_g:uou_mei"  # per user in groups, by default


def test_a_group_message_without_the_bot_is_ignored_unless_all_groups_are_answered() -> None:
    payload = receive(
        "om_g",
        text="@_user_1 lunch?",
        chat_type="group",
        mentions=[at("@_user_1", "ou_lin", "Lin")],
    )
    assert dropped(payload) == Dropped(IGNORED, "group message does not mention the bot")
    event = event_of(payload, ALL_GROUPS)
    assert (event.text, event.mentions, event.mentions_bot) == ("@Lin lunch?", ["ou_lin"], False)
    # A chat type Feishu may add later is treated as a group, not as a DM.
    assert event_of(receive(chat_type="topic_group"), ALL_GROUPS).conversation.chat_type == "group"


def test_without_a_known_open_id_nothing_mentions_the_bot() -> None:
    mentions = [at("@_user_1", "", "Tether")]
    event = event_of(receive(text="@_user_1 hi", mentions=mentions), Bot(open_id=None))
    assert (event.mentions, event.mentions_bot) == ([], False)


def test_mention_placeholders_and_names() -> None:
    mentions = [
        at("@_user_1", "ou_x", "$& the \\1 user"),  # no regex replacement syntax applies
        {"key": "@_user_2", "id": "ou_plain", "name": ""},  # no name: the placeholder stays
        {"key": "@_user_3", "id": {"union_id": "on_only"}, "name": "Union"},
        "not a mention",
    ]
    text = "@_user_1 @_user_2 @_user_3 @_user_9 @_all"
    event = event_of(receive(text=text, mentions=mentions))
    assert event.text == "@$& the \\1 user @_user_2 @Union @_user_9 @all"
    assert event.mentions == ["ou_x", "ou_plain", "on_only"]


def test_placeholders_other_than_user_n_are_resolved_and_everyone_is_nobody() -> None:
    mentions = [
        at("@_user_lin", "ou_lin", "林"),
        at("@_bot_1", "ou_tether", "Tether"),
        {"key": "@_all", "id": {"open_id": "all"}, "name": "所有人"},
    ]
    text = "@_user_lin看一下 @_bot_1, @_all @_user_lint"
    event = event_of(receive(text=text, chat_type="group", mentions=mentions))
    # Resolved only as a whole placeholder: @_user_lint is not @_user_lin.
    assert event.text == "@林看一下 @Tether, @all @_user_lint"
    assert (event.mentions, event.mentions_bot) == (["ou_lin", "ou_tether"], True)


def test_at_all_alone_does_not_address_the_bot() -> None:
    mentions = [{"key": "@_all", "id": {"open_id": "all"}, "name": "all"}]
    payload = receive(text="@_all standup in 5", chat_type="group", mentions=mentions)
    assert dropped(payload) == Dropped(IGNORED, "group message does not mention the bot")
    event = event_of(payload, ALL_GROUPS)
    assert (event.text, event.mentions, event.mentions_bot) == ("@all standup in 5", [], False)


# -- commands ------------------------------------------------------------------------------


def test_a_command_in_a_dm() -> None:
    event = event_of(receive(text="/Weather   Berlin  Mitte "))
    assert (event.kind, event.command, event.args) == (Kind.COMMAND, "weather", "Berlin  Mitte")
    assert event.text == "/Weather   Berlin  Mitte "


def test_a_command_addressed_to_the_bot_by_its_mention() -> None:
    # The mention shows the bot's name in that chat, which may differ from the app name.
    mentions = [at("@_user_1", "ou_tether", "Helper")]
    payload = receive(text="@_user_1  /help me", chat_type="group", mentions=mentions)
    event = event_of(payload)
    assert (event.text, event.kind, event.command, event.args) == (
        "@Helper  /help me",
        Kind.COMMAND,
        "help",
        "me",
    )


def test_a_command_after_the_app_name_typed_as_text() -> None:
    event = event_of(receive(text="@Tether /ping"))
    assert (event.command, event.args, event.mentions_bot) == ("ping", "", False)


def test_a_command_addressed_to_another_bot_is_not_ours() -> None:
    mentions = [at("@_user_1", "ou_other_bot", "Other")]
    payload = receive(text="@_user_1 /help", chat_type="group", mentions=mentions)
    assert dropped(payload) == Dropped(IGNORED, "group message does not mention the bot")
    event = event_of(payload, ALL_GROUPS)
    assert (event.kind, event.command, event.text) == (Kind.MESSAGE, None, "@Other /help")


def test_a_command_with_a_bot_suffix_is_still_a_command() -> None:
    # Feishu has no /cmd@botname convention; the suffix is not checked against a name.
    event = event_of(receive(text="/start@SomeBot now"))
    assert (event.command, event.args) == ("start", "now")


def test_text_that_only_looks_like_a_command() -> None:
    for text in ("/", "a /ping", "/ping-pong", "//ping"):
        event = event_of(receive(text=text))
        assert (event.kind, event.command) == (Kind.MESSAGE, None), text


# -- threads, topics, replies ----------------------------------------------------------------


def test_a_message_in_a_thread_is_its_own_conversation_named_by_the_thread_id() -> None:
    mentions = [at("@_user_1", "ou_tether", "Tether")]
    payload = receive(
        "om_reply",
        text="@_user_1 and then?",
        chat_type="group",
        chat_id="oc_g",
        mentions=mentions,
        thread_id="omt_7",
        root_id="om_root",
        parent_id="om_prev",
    )
    event = event_of(payload)
    assert event.conversation.key == "feishu:oc_g:omt_7"
    assert event.conversation.target().thread_id == "omt_7"
    assert event.reply_to == "om_prev"
    assert (event.meta["thread_id"], event.meta["root_id"]) == ("omt_7", "om_root")
    # A thread id is not a message id: a reply that quotes nothing answers this message
    # inside the thread, and the event says which one.
    assert event.meta[REPLY_META] == {THREAD_MESSAGE: "om_reply"}


def test_every_message_of_a_topic_is_one_conversation_whatever_its_root_id() -> None:
    def in_topic(message_id: str, **fields: str) -> Event:
        payload = receive(message_id, chat_type="group", thread_id="omt_t", **fields)
        return event_of(payload, ALL_GROUPS)

    starter = in_topic("om_first")
    follow_up = in_topic("om_second", root_id="om_first", parent_id="om_first")
    # Quoting a message in the middle of the topic points root_id at that message.
    quoted = in_topic("om_quote", root_id="om_second", parent_id="om_second")
    keys = {e.conversation.key for e in (starter, follow_up, quoted)}
    assert keys == {"feishu:oc_room:omt_t"}
    sessions = {e.session("shared") for e in (starter, follow_up, quoted)}
    assert sessions == {"feishu:oc_room:omt_t"}
    assert (starter.reply_to, quoted.reply_to) == (None, "om_second")


def test_the_first_message_of_a_topic_names_the_thread() -> None:
    event = event_of(receive("om_starter", thread_id="omt_new"))
    assert event.conversation.thread_id == "omt_new" and "root_id" not in event.meta
    assert event.meta[REPLY_META] == {THREAD_MESSAGE: "om_starter"}


def test_a_reply_in_a_topic_that_quotes_nothing_answers_inside_the_topic() -> None:
    from tether.adapters.feishu.send import request_for  # lark-oapi: only for this one

    event = event_of(receive("om_in_topic", thread_id="omt_5", root_id="om_top"))
    meta = event.meta[REPLY_META]
    target = event.conversation.target()
    unquoted = OutMessage(key="fs:msg:om_in_topic#0", target=target, text="hi", meta=meta)
    path, query, body = request_for(unquoted)
    assert (path, query) == ("/open-apis/im/v1/messages/om_in_topic/reply", {})
    assert body["reply_in_thread"] is True
    quoted = unquoted.model_copy(update={"reply_to": "om_in_topic"})
    assert request_for(quoted)[0] == path


def test_a_quoting_reply_outside_a_thread_stays_in_the_chat() -> None:
    event = event_of(receive("om_q", root_id="om_root", parent_id="om_root"))
    assert (event.conversation.thread_id, event.reply_to) == (None, "om_root")
    assert event.meta["root_id"] == "om_root" and "thread_id" not in event.meta
    assert REPLY_META not in event.meta


# -- rich text and files ---------------------------------------------------------------------


def test_a_post_becomes_lines_of_text_with_its_images_and_videos() -> None:
    post = {
        "title": "Release",
        "content": [
            [
                {"tag": "text", "text": "read "},
                {"tag": "a", "text": "notes", "href": "https://example.org/n"},
                {
                    "tag": "a",
                    "text": "https://example.org/same",
                    "href": "https://example.org/same",
                },
                {"tag": "at", "user_id": "@_user_1", "user_name": "Tether"},
                {"tag": "at", "user_id": "all"},
                {"tag": "emotion", "emoji_type": "SMILE"},
            ],
            [{"tag": "img", "image_key": "img_a"}, {"tag": "media", "file_key": "file_v"}],
            [{"tag": "code_block", "language": "py", "text": "x = 1\n"}],
            [{"tag": "hr"}, {"tag": "md", "text": "**done** @_user_1"}],
            [{"tag": "unknown", "text": "kept"}, "not an element"],
            "not a paragraph",
        ],
    }
    mentions = [at("@_user_1", "ou_tether", "Tether")]
    event = event_of(receive(message_type="post", content=post, mentions=mentions))
    assert event.text == (
        "Release\n"
        "read notes (https://example.org/n)https://example.org/same@Tether@all:SMILE:\n"
        "\n"
        "\n```py\nx = 1\n```\n\n"
        "\n---\n**done** @Tether\n"
        "kept"
    )
    assert event.attachments == [
        Attachment(kind="image", file_id="img_a"),
        Attachment(kind="video", file_id="file_v"),
    ]
    assert event.meta["message_type"] == "post" and event.mentions_bot


def test_a_post_wrapped_in_a_locale() -> None:
    post = {
        "en_us": {
            "title": "",
            "content": [[{"tag": "text", "text": "hi "}, {"tag": "at", "user_name": "Lin"}]],
        }
    }
    assert event_of(receive(message_type="post", content=post)).text == "hi @Lin"


def post(*paragraphs: list[Any], **fields: Any) -> dict[str, Any]:
    """A received ``post``'s content: paragraphs of elements, and any other fields."""
    return {"title": "", "content": list(paragraphs), **fields}


def text_el(text: str) -> dict[str, Any]:
    return {"tag": "text", "text": text}


@pytest.mark.parametrize(
    "element",
    [
        {"tag": "at", "user_id": "ou_tether", "user_name": "Helper"},  # the id as user_id
        {"tag": "at", "open_id": "ou_tether", "user_name": "Helper"},  # … or as open_id
        {"tag": "at", "user_id": "ou_tether"},  # no name at all
        {"tag": "at", "user_name": "Tether"},  # no id: the bot's name
        {"tag": "at", "user_id": "@_user_1", "user_name": "Tether"},  # a placeholder, unlisted
    ],
)
def test_a_post_that_at_mentions_the_bot_with_an_empty_mentions_list(
    element: dict[str, Any],
) -> None:
    content = post([element, text_el(" /status now")], [text_el("thanks")])
    payload = receive(message_type="post", content=content, chat_type="group", mentions=[])
    event = event_of(payload)
    assert event.mentions_bot
    assert event.mentions == (["ou_tether"] if "ou_tether" in element.values() else [])
    assert (event.kind, event.command, event.args) == (Kind.COMMAND, "status", "now\nthanks")
    assert event.text.endswith(" /status now\nthanks")


@pytest.mark.parametrize(
    ("element", "mentions", "mentioned"),
    [
        # Someone else who happens to share the bot's name: the id decides.
        ({"tag": "at", "user_id": "ou_lin", "user_name": "Tether"}, [], ["ou_lin"]),
        # The placeholder is resolved through the mentions list: it names Lin.
        (
            {"tag": "at", "user_id": "@_user_1", "user_name": "Tether"},
            [at("@_user_1", "ou_lin", "Tether")],
            ["ou_lin"],
        ),
        ({"tag": "at", "user_id": "all", "user_name": "所有人"}, [], []),  # everyone is nobody
        ({"tag": "at", "user_name": "Lin"}, [], []),
    ],
)
def test_a_post_that_at_mentions_someone_else_is_not_for_the_bot(
    element: dict[str, Any], mentions: list[Any], mentioned: list[str]
) -> None:
    content = post([element, text_el(" hi")])
    payload = receive(message_type="post", content=content, chat_type="group", mentions=mentions)
    assert dropped(payload) == Dropped(IGNORED, "group message does not mention the bot")
    event = event_of(payload, ALL_GROUPS)
    assert (event.mentions, event.mentions_bot, event.command) == (mentioned, False, None)


def test_files_beside_a_posts_paragraphs_are_attachments_and_folders_are_named() -> None:
    files = [
        {"file_key": "file_csv", "file_name": "ledger.csv", "is_folder": False},
        {"file_key": "file_dir", "file_name": "Q3 reports", "is_folder": True},
        {"file_name": "no key"},
        "not a file",
    ]
    content = post([text_el("the ledger")], files=files)
    event = event_of(receive(message_type="post", content=content))
    assert event.text == "the ledger\n[folder: Q3 reports]"
    assert event.attachments == [Attachment(kind="file", file_id="file_csv", name="ledger.csv")]


def test_a_post_with_only_files_is_a_message_with_attachments() -> None:
    files = [{"file_key": "file_a", "file_name": "a.zip"}, {"file_key": "file_b"}]
    content = post([], files=files, content_v2=[[]])
    event = event_of(receive("om_files", message_type="post", content=content))
    assert (event.key, event.kind, event.text) == ("fs:msg:om_files", Kind.MESSAGE, "")
    assert event.attachments == [
        Attachment(kind="file", file_id="file_a", name="a.zip"),
        Attachment(kind="file", file_id="file_b"),
    ]
    # A locale-wrapped post carries its files inside the locale.
    wrapped = {"en_us": post([text_el("see")], files=files[:1])}
    assert event_of(receive(message_type="post", content=wrapped)).attachments == [
        Attachment(kind="file", file_id="file_a", name="a.zip")
    ]


def test_inline_code_in_a_post_keeps_its_backticks() -> None:
    content = post(
        [text_el("run "), {"tag": "code", "text": "make fuzz"}, {"tag": "code", "text": ""}],
        [{"tag": "code_block", "language": "sh", "text": "make test"}],
    )
    event = event_of(receive(message_type="post", content=content))
    assert event.text == "run `make fuzz`\n\n```sh\nmake test\n```"


@pytest.mark.parametrize(
    ("message_type", "content", "attachment"),
    [
        ("image", {"image_key": "img_1"}, Attachment(kind="image", file_id="img_1")),
        (
            "file",
            {"file_key": "file_1", "file_name": "plan.pdf"},
            Attachment(kind="file", file_id="file_1", name="plan.pdf"),
        ),
        (
            "audio",
            {"file_key": "file_2", "duration": 1200},
            Attachment(kind="audio", file_id="file_2"),
        ),
        (
            "media",
            {"file_key": "file_3", "image_key": "img_cover", "file_name": "clip.mp4"},
            Attachment(kind="video", file_id="file_3", name="clip.mp4"),
        ),
        ("sticker", {"file_key": "stk_1"}, Attachment(kind="sticker", file_id="stk_1")),
    ],
)
def test_files_become_attachments_without_text(
    message_type: str, content: dict[str, Any], attachment: Attachment
) -> None:
    event = event_of(receive(f"om_{message_type}", message_type=message_type, content=content))
    assert (event.kind, event.text, event.attachments) == (Kind.MESSAGE, "", [attachment])
    assert event.meta["message_type"] == message_type


# -- bots ------------------------------------------------------------------------------------


@pytest.mark.parametrize("sender_type", ["app", "bot", "anything-but-user"])
def test_messages_from_bots_are_ignored_by_default(sender_type: str) -> None:
    sender = {"sender_id": {"open_id": "ou_peer"}, "sender_type": sender_type}
    payload = receive(sender=sender, chat_type="group", mentions=[at("@_user_1", "ou_tether", "T")])
    assert dropped(payload) == Dropped(IGNORED, "from a bot")
    event = event_of(payload, Bot(open_id="ou_tether", ignore_bots=False))
    assert event.sender is not None and (event.sender.id, event.sender.is_bot) == ("ou_peer", True)


@pytest.mark.parametrize("sender_type", [None, "", "user"])
def test_a_missing_or_user_sender_type_is_a_person(sender_type: str | None) -> None:
    sender = {"sender_id": {"user_id": "u_only"}, "sender_type": sender_type}
    event = event_of(receive(sender=sender))
    assert event.sender is not None and (event.sender.id, event.sender.is_bot) == ("u_only", False)
    assert event.meta["tenant_key"] == "tk_header" and "open_id" not in event.meta


# -- other events ----------------------------------------------------------------------------


def test_an_event_about_a_chat_becomes_a_system_event() -> None:
    payload = other("im.chat.member.bot.added_v1", {"chat_id": "oc_new", "name": "Team"})
    event = event_of(payload)
    assert (event.key, event.kind, event.platform) == ("fs:evt:ev_200", Kind.SYSTEM, "feishu")
    assert event.conversation.key == "feishu:oc_new" and event.conversation.chat_type == "group"
    assert event.meta == {"event_type": "im.chat.member.bot.added_v1", "event_id": "ev_200"}
    assert (event.sender, event.text, event.timestamp) == (None, "", CREATED)
    assert event.raw is not None and "token" not in event.raw["header"]


@pytest.mark.parametrize(
    ("event_type", "body"),
    [
        # An edit names the message, not the chat, at the top.
        (
            "im.message.updated_v1",
            {"message": {"message_id": "om_100", "chat_id": "oc_room", "content": "{}"}},
        ),
        ("im.message.reaction.created_v1", {"message_id": "om_100", "reaction_type": {}}),
        ("im.message.message_read_v1", {"reader": {"reader_id": {}}, "message_id_list": []}),
        ("contact.user.created_v3", {"object": {"open_id": "ou_new"}}),
    ],
)
def test_events_without_a_chat_are_skipped_as_unsupported(
    event_type: str, body: dict[str, Any]
) -> None:
    assert dropped(other(event_type, body)) == Dropped(
        SKIPPED, f"unsupported event type {event_type}"
    )


def test_a_press_on_a_card_tether_did_not_make_is_skipped_with_its_reason() -> None:
    body = {
        "operator": {"open_id": "ou_mei"},
        "action": {"value": {"choice": "yes"}, "tag": "button"},
        "context": {"open_message_id": "om_card", "open_chat_id": "oc_room"},
    }
    outcome = dropped(other("card.action.trigger", body))  # our presses: test_buttons*.py
    assert outcome == Dropped(SKIPPED, "card action without button data (not one of our cards)")


CARD_SENT = {
    "header": {"title": {"tag": "plain_text", "content": "Deploy now?"}},
    "elements": [
        {"tag": "div", "text": {"tag": "lark_md", "content": "**prod** at 18:00, @_user_1"}},
        {"tag": "hr"},
        {
            "tag": "action",
            "actions": [
                {"tag": "button", "text": {"content": "Go"}, "value": {"go": "yes"}},
                {"tag": "button", "text": {"content": ""}, "url": "https://example.org/x"},
            ],
        },
    ],
}
CARD_V2 = {
    "schema": "2.0",
    "body": {
        "elements": [
            {"tag": "markdown", "content": "Status: green"},
            {
                "tag": "column_set",
                "columns": [
                    {"elements": [{"tag": "div", "text": {"content": "left column"}}]},
                    {
                        "elements": [
                            {"tag": "img", "img_key": "img_k", "alt": {"content": "a chart"}}
                        ]
                    },
                ],
            },
        ]
    },
}
CARD_RECEIVED = {
    "title": "Weekly",
    "elements": [
        [text_el("Tasks: "), {"tag": "a", "text": "board", "href": "https://example.org/b"}],
        [{"tag": "button", "text": "Open"}],
    ],
}


@pytest.mark.parametrize(
    ("message_type", "content", "text"),
    [
        ("interactive", CARD_SENT, "Deploy now?\n**prod** at 18:00, @Lin\n[Go]\n[button]"),
        ("interactive", CARD_V2, "Status: green\nleft column\na chart"),
        ("interactive", CARD_RECEIVED, "Weekly\nTasks: board (https://example.org/b)\nOpen"),
        ("interactive", {"elements": [{"tag": "hr"}]}, "[card]"),
        ("share_chat", {"chat_id": "oc_elsewhere"}, "[shared chat: oc_elsewhere]"),
        (
            "share_chat",
            {"chat_id": "oc_x", "chat_name": "Launch room"},
            "[shared chat: Launch room]",
        ),
        ("share_chat", {"share_chat_id": "sc_1"}, "[shared chat: sc_1]"),
        ("share_user", {"user_id": "ou_card"}, "[shared contact: ou_card]"),
        ("merge_forward", {"content": "Merged and Forwarded Message"}, "[forwarded messages]"),
        (
            "merge_forward",
            {"title": "Lin and Mei", "content": "Lin: ready?\nMei: yes"},
            "[forwarded messages: Lin and Mei]\nLin: ready?\nMei: yes",
        ),
        (
            "location",
            {"name": "Office", "longitude": "116.3", "latitude": "39.9"},
            "[location: Office (39.9, 116.3)]",
        ),
        ("location", {"latitude": 39.9, "longitude": 116.3}, "[location: (39.9, 116.3)]"),
        (
            "vote",
            {"topic": "Lunch?", "options": ["noodles", "rice", 3, None]},
            "[poll: Lunch? — noodles, rice, 3]",
        ),
        ("vote", {"topic": "Lunch?"}, "[poll: Lunch?]"),
        (
            "todo",
            {"task_id": "t1", "summary": post([text_el("ship")], [text_el("it")])},
            "[task: ship it]",
        ),
        (
            "share_calendar_event",
            {"summary": "Standup", "start_time": "1"},
            "[calendar event: Standup]",
        ),
        ("video_chat", {"topic": "Retro", "start_time": "1"}, "[video call: Retro]"),
        ("share_user", {}, "[shared contact]"),  # nothing to name: still said, not dropped
    ],
)
def test_kinds_without_plain_text_are_described_with_the_payload_kept(
    message_type: str, content: dict[str, Any], text: str
) -> None:
    mentions = [at("@_user_1", "ou_lin", "Lin")]
    payload = receive("om_kind", message_type=message_type, content=content, mentions=mentions)
    event = event_of(payload)
    assert (event.kind, event.text, event.attachments) == (Kind.MESSAGE, text, [])
    assert event.meta["message_type"] == message_type and event.command is None
    assert event.raw is not None
    assert json.loads(event.raw["event"]["message"]["content"]) == content


@pytest.mark.parametrize(
    ("message_type", "content"),
    [
        ("system", {"template": "{from_user} invited {to_chatters}"}),  # not a person's words
        ("hongbao_v9", {"text": "a kind Feishu adds later"}),
        ("text", {"text": ""}),  # nothing to answer
        ("image", {"image_key": ""}),  # a file without its key cannot be fetched
        ("file", {"file_name": "orphan.txt"}),
        ("post", {"title": "", "content": [[]]}),
        ("post", {"title": "", "content": [[]], "files": [{"file_name": "no key"}]}),
    ],
)
def test_messages_without_text_or_files_are_skipped(
    message_type: str, content: dict[str, Any]
) -> None:
    payload = receive(message_type=message_type, content=content)
    assert dropped(payload) == Dropped(SKIPPED, f"unsupported message type {message_type!r}")


def test_a_url_verification_or_a_v1_event_is_not_a_v2_event() -> None:
    challenge = {"challenge": "abc", "token": "t", "type": "url_verification"}
    v1 = {"uuid": "u-1", "token": "t", "ts": "1", "type": "event_callback", "event": {}}
    for payload in (challenge, v1):
        assert dropped(payload) == Dropped(SKIPPED, "not a v2 event (schema 2.0 has a header)")
    assert event_id_of(v1) == "u-1" and event_id_of(receive(event_id="ev_9")) == "ev_9"


# -- malformed payloads: skipped, never raised -------------------------------------------------


def _without(path: tuple[str, ...]) -> dict[str, Any]:
    payload = receive()
    node = payload
    for key in path[:-1]:
        node = node[key]
    del node[path[-1]]
    return payload


@pytest.mark.parametrize(
    ("payload", "reason"),
    [
        ({}, "not a v2 event (schema 2.0 has a header)"),
        ({"header": "oops", "event": {}}, "not a v2 event (schema 2.0 has a header)"),
        (_without(("header", "event_id")), "no event_id or event"),
        (_without(("event",)), "no event_id or event"),
        ({**receive(), "event": ["not", "a", "dict"]}, "no event_id or event"),
        (_without(("event", "message")), "message without message_id"),
        (_without(("event", "message", "message_id")), "message without message_id"),
        ({**receive(), "event": {"message": "text"}}, "message without message_id"),
        (receive(content="{not json"), "unsupported message type 'text'"),
        (receive(content="[1, 2]"), "unsupported message type 'text'"),
        (receive(content=""), "unsupported message type 'text'"),
        (receive(message_type=None), "unsupported message type ''"),  # type: ignore[arg-type]
        (other("im.chat.updated_v1", {"chat_id": 42}), "unsupported event type im.chat.updated_v1"),
        (other("im.chat.updated_v1", {"chat_id": ""}), "unsupported event type im.chat.updated_v1"),
    ],
)
def test_malformed_payloads_are_skipped_with_their_reason(payload: Any, reason: str) -> None:
    assert dropped(payload) == Dropped(SKIPPED, reason)


def test_fields_of_the_wrong_type_are_skipped_or_read_around() -> None:
    not_iterable = dropped(receive(mentions=7))
    assert not_iterable.log_event == SKIPPED
    assert not_iterable.reason.startswith("cannot normalize: TypeError")
    # A sender that is not an object: an unknown person, not a crash.
    nobody = event_of(receive(sender="ou_mei"))
    assert nobody.sender is not None and (nobody.sender.id, nobody.sender.is_bot) == ("", False)
    assert event_of(receive(mentions="@_user_1")).mentions == []
    # An unreadable time is "now": the event is still worth answering.
    before = datetime.now(UTC)
    late = event_of(receive(create_time="yesterday"))
    assert late.timestamp >= before
    assert event_of(receive(12345)).key == "fs:msg:12345"  # type: ignore[arg-type]
    # A time far outside what datetime can hold is skipped, not raised.
    far = dropped(receive(create_time="9" * 30))
    assert far.log_event == SKIPPED and far.reason.startswith("cannot normalize:")


# -- never raises: fuzzed, and over the corpus -------------------------------------------------

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=20,
)


def _either(value: Any) -> st.SearchStrategy[Any]:
    """The field as it should be, or anything JSON can hold in its place."""
    return st.one_of(st.just(value), JSON)


#: Message types whose content is described rather than read as text or files.
DESCRIBED = [
    "interactive",
    "share_chat",
    "share_user",
    "merge_forward",
    "location",
    "vote",
    "todo",
    "share_calendar_event",
    "video_chat",
]
POST_TAGS = ["text", "md", "a", "at", "img", "media", "emotion", "code", "code_block", "hr"]
_ELEMENT = st.fixed_dictionaries(
    {"tag": st.one_of(st.sampled_from([*POST_TAGS, "button", "unknown"]), JSON)},
    optional={
        "text": _either("hi @_user_1 @_all"),
        "href": _either("https://example.org"),
        "user_id": st.one_of(st.sampled_from(["ou_tether", "@_user_1", "@_all", "all"]), JSON),
        "open_id": _either("ou_tether"),
        "user_name": _either("Tether"),
        "image_key": _either("img_k"),
        "file_key": _either("file_k"),
        "language": JSON,
        "emoji_type": JSON,
    },
)
_FILE = st.fixed_dictionaries(
    {},
    optional={
        "file_key": _either("file_k"),
        "file_name": _either("a.txt"),
        "is_folder": _either(True),
    },
)
_POST_BODY = st.fixed_dictionaries(
    {
        "content": st.one_of(
            st.lists(st.one_of(st.lists(st.one_of(_ELEMENT, JSON), max_size=4), JSON), max_size=4),
            JSON,
        )
    },
    optional={
        "title": _either("Title"),
        "files": st.one_of(st.lists(st.one_of(_FILE, JSON), max_size=3), JSON),
    },
)
#: A post's content tree: received, or wrapped in locales; any node of the wrong type.
POST_TREE = st.one_of(
    _POST_BODY, st.dictionaries(st.sampled_from(["zh_cn", "en_us"]), _POST_BODY | JSON, max_size=2)
)
CARD_KEYS = ["tag", "title", "text", "content", "elements", "header", "body", "columns", "actions"]
#: A card's tree: the keys cards use, nested any way, with any leaves.
CARD_TREE = st.recursive(
    st.one_of(st.sampled_from(["button", "div", "Pick one"]), JSON),
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(st.sampled_from([*CARD_KEYS, "value", "href"]), inner, max_size=4)
    ),
    max_leaves=25,
)


def _shaped() -> st.SearchStrategy[dict[str, Any]]:
    """A receive_v1 event whose every field may be of the wrong type (or missing)."""
    content = st.one_of(
        st.sampled_from(['{"text": "/ping @_user_1"}', '{"image_key": "img"}', "{}"]),
        JSON.map(json.dumps),
        POST_TREE.map(json.dumps),
        CARD_TREE.map(json.dumps),
        st.text(max_size=30),
    )
    mention = st.fixed_dictionaries(
        {"key": _either("@_user_1"), "id": _either({"open_id": "ou_tether"}), "name": _either("T")}
    )
    message = st.fixed_dictionaries(
        {
            "message_id": _either("om_fuzz"),
            "chat_id": _either("oc_fuzz"),
            "chat_type": st.one_of(st.sampled_from(["p2p", "group"]), JSON),
            "message_type": st.one_of(
                st.sampled_from(["text", "post", "image", "file", "media", "sticker", *DESCRIBED]),
                JSON,
            ),
            "content": _either("{}") | content,
            "create_time": _either(CREATED_MS),
            "mentions": st.one_of(st.lists(st.one_of(mention, JSON), max_size=3), JSON),
        },
        optional={"thread_id": JSON, "root_id": JSON, "parent_id": JSON},
    )
    sender = st.fixed_dictionaries(
        {"sender_id": _either({"open_id": "ou_mei"}), "sender_type": _either("user")}
    )
    event = st.fixed_dictionaries({"sender": _either({}) | sender, "message": message | JSON})
    header = st.fixed_dictionaries(
        {
            "event_id": _either("ev_fuzz"),
            "event_type": st.one_of(
                st.sampled_from(["im.message.receive_v1", "im.chat.member.bot.added_v1"]), JSON
            ),
            "create_time": _either(CREATED_MS),
        },
        optional={"token": JSON, "tenant_key": JSON},
    )
    return st.fixed_dictionaries(
        {"header": header | JSON, "event": event | JSON}, optional={"schema": JSON}
    )


def _normalizes(payload: dict[str, Any], bot: Bot) -> None:
    outcome = normalize(payload, bot)
    assert isinstance(outcome, Event | Dropped)
    if isinstance(outcome, Event):
        Event.from_json(outcome.to_json())  # what the inbox stores, it can read back
    else:
        assert outcome.log_event in (IGNORED, SKIPPED) and outcome.reason


# How many examples: the suite's Hypothesis profile decides (``make fuzz`` runs more).
FUZZ = settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])


@pytest.mark.slow
@FUZZ
@given(st.dictionaries(st.text(max_size=10), JSON, max_size=6))
def test_arbitrary_json_objects_never_raise(payload: dict[str, Any]) -> None:
    _normalizes(payload, BOT)


@pytest.mark.slow
@FUZZ
@given(_shaped(), st.sampled_from([BOT, ALL_GROUPS, Bot(ignore_bots=False)]))
def test_events_of_the_right_shape_with_wrong_types_never_raise(
    payload: dict[str, Any], bot: Bot
) -> None:
    _normalizes(payload, bot)


@FUZZ
@given(st.sampled_from(["post", *DESCRIBED]), st.one_of(POST_TREE, CARD_TREE, JSON))
def test_content_trees_are_read_and_described_kinds_are_never_skipped(
    message_type: str, tree: Any
) -> None:
    outcome = normalize(receive(message_type=message_type, content=json.dumps(tree)), BOT)
    if message_type in DESCRIBED:  # a person sent it on purpose: there is always a message
        assert isinstance(outcome, Event) and outcome.text, outcome
    else:  # read, or skipped for having nothing to read: never an exception on the way
        assert outcome == Dropped(SKIPPED, "unsupported message type 'post'") or (
            isinstance(outcome, Event) and (outcome.text or outcome.attachments)
        ), outcome


_PLAIN_ELEMENT = st.one_of(
    st.builds(text_el, st.text(max_size=12)),
    st.fixed_dictionaries({"tag": st.just("at"), "user_id": st.sampled_from(["ou_lin", "all"])}),
    st.fixed_dictionaries({"tag": st.just("img"), "image_key": st.just("img_k")}),
    st.fixed_dictionaries({"tag": st.sampled_from(POST_TAGS), "text": st.text(max_size=8)}),
)


@FUZZ
@given(
    st.lists(st.lists(_PLAIN_ELEMENT, max_size=4), min_size=1, max_size=3),
    st.integers(min_value=0),
    st.sampled_from(["user_id", "open_id"]),
)
def test_a_post_that_at_mentions_the_bot_anywhere_is_for_the_bot(
    paragraphs: list[list[dict[str, Any]]], where: int, field: str
) -> None:
    paragraph = paragraphs[where % len(paragraphs)]
    paragraph.insert(where % (len(paragraph) + 1), {"tag": "at", field: "ou_tether"})
    content = post(*paragraphs)
    event = event_of(receive(message_type="post", content=content, chat_type="group"))
    assert event.mentions_bot and "ou_tether" in event.mentions and "all" not in event.mentions


CORPUS = SHARED_CORPUS


def _corpus_keys() -> dict[str, str]:
    """Encrypted samples' keys, as SOURCES.md lists them: ``name`` → encrypt key."""
    sources = CORPUS / "SOURCES.md"
    text = sources.read_text() if sources.is_file() else ""
    listed = (
        r"`(enc_\w+)`\s+\((?:verification\s+)?token\s+`[^`]*`,\s+(?:encrypt\s+)?key\s+`([^`]*)`"
    )
    return dict(re.findall(listed, text))


def _corpus_files() -> list[Path]:
    folder = CORPUS / "feishu"
    return sorted(folder.glob("*.json")) if folder.is_dir() else []


def _corpus_payload(path: Path) -> dict[str, Any]:
    """A corpus sample as the webhook hands it to normalize: decrypted if it is not plain."""
    payload = json.loads(path.read_text())
    if "encrypt" in payload:
        from tether.adapters.feishu.webhook import Verifier  # lark-oapi: only for these

        key = _corpus_keys().get(path.stem)
        assert key, f"SOURCES.md names no encrypt key for {path.stem}"
        payload = Verifier(key, None, max_age=300).decrypt(payload["encrypt"])
        assert isinstance(payload, dict), payload
    return dict(payload)


NO_CORPUS = pytest.mark.skipif(not _corpus_files(), reason="no corpus at ../shared/corpus/feishu")


@NO_CORPUS
@pytest.mark.parametrize("path", _corpus_files(), ids=lambda p: p.stem)
def test_the_corpus_never_raises(path: Path) -> None:
    payload = _corpus_payload(path)
    for bot in (BOT, ALL_GROUPS, Bot(open_id="ou_bot", name="Bot", answer_groups="all")):
        _normalizes(payload, bot)
        outcome = normalize(payload, bot)
        header = payload.get("header")
        message = payload.get("event", {}).get("message") if isinstance(header, dict) else None
        if isinstance(outcome, Event) and isinstance(message, dict):
            assert outcome.key == f"fs:msg:{message['message_id']}"
            assert outcome.conversation.chat_id == message["chat_id"]


# -- the corpus samples that showed a wrong result, looked up by name ----------------------------
# Expected values are read from each sample at run time; the samples are not copied here.


def corpus_message(name: str) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """A sample by name: the payload, its message, and the message's parsed content."""
    path = CORPUS / "feishu" / f"{name}.json"
    assert path.is_file(), f"the corpus has no {name}.json (renamed?)"
    payload = _corpus_payload(path)
    message = payload["event"]["message"]
    return payload, message, json.loads(message["content"])


def samples(*names: str) -> Callable[[Callable[..., None]], Callable[..., None]]:
    """Run the test once per named sample (as ``name``), when the corpus is there."""
    return lambda test: NO_CORPUS(pytest.mark.parametrize("name", names)(test))


def elements(content: dict[str, Any], tag: str) -> list[dict[str, Any]]:
    return [e for paragraph in content["content"] for e in paragraph if e.get("tag") == tag]


@samples(
    "oc_post_at_bot_no_top_level_mentions", "oc_post_at_all_and_bot", "mh_post_at_open_id_field"
)
def test_corpus_posts_that_at_mention_the_bot_without_a_mentions_list(name: str) -> None:
    payload, message, content = corpus_message(name)
    assert not message.get("mentions")  # the shape that was missed
    ats = [a for a in elements(content, "at") if "all" not in (a.get("user_id"), a.get("open_id"))]
    (bot_at,) = ats
    bot_id = bot_at.get("open_id") or bot_at["user_id"]
    event = outcome_of(payload, Event, Bot(open_id=bot_id, name="Tether"))
    assert (event.mentions_bot, event.mentions) == (True, [bot_id])
    assert f"@{bot_at['user_name']}" in event.text
    other_bot = Bot(open_id="ou_another_bot", name="Tether")
    assert dropped(payload, other_bot) == Dropped(IGNORED, "group message does not mention the bot")


@samples("oc_post_caption_with_top_level_files", "oc_post_files_only_no_text")
def test_corpus_posts_keep_their_files(name: str) -> None:
    payload, _message, content = corpus_message(name)
    event = outcome_of(payload, Event, BOT)
    assert event.attachments == [
        Attachment(kind="file", file_id=f["file_key"], name=f["file_name"])
        for f in content["files"]
    ]
    assert event.text == "".join(e["text"] for e in elements(content, "text"))


@NO_CORPUS
@pytest.mark.parametrize(
    ("first", "later"),
    [
        ("oc_topic_starter", "oc_topic_quote_reply_mid_topic_root"),
        ("oc_topic_first_message", "oc_topic_follow_up"),
    ],
)
def test_corpus_topics_are_one_conversation(first: str, later: str) -> None:
    samples = [corpus_message(first), corpus_message(later)]
    keys = {outcome_of(payload, Event, ALL_GROUPS).conversation.key for payload, _, _ in samples}
    message = samples[1][1]  # the later one names the topic it is in
    assert keys == {f"feishu:{message['chat_id']}:{message['thread_id']}"}


@samples("mh_group_bot_mention_later_cjk", "mh_group_thread_reply_two_mentions")
def test_corpus_placeholders_of_any_name_are_resolved(name: str) -> None:
    payload, message, _content = corpus_message(name)
    event = outcome_of(payload, Event, ALL_GROUPS)
    for mention in message["mentions"]:
        assert mention["key"] not in event.text and f"@{mention['name']}" in event.text
    assert "@_" not in event.text


@NO_CORPUS
@pytest.mark.parametrize(
    ("name", "shown"),
    [
        ("hermes_interactive_card", lambda c: [c["header"]["title"]["content"]]),
        ("hermes_merge_forward", lambda c: [c["title"], c["content"]]),
        ("hermes_share_chat", lambda c: [c["chat_name"]]),
        ("oc_share_chat_body", lambda c: ["shared chat"]),
        ("oc_post_code_and_code_block", lambda c: [f"`{e['text']}`" for e in elements(c, "code")]),
    ],
)
def test_corpus_kinds_that_were_skipped_or_flattened_are_messages(
    name: str, shown: Callable[[dict[str, Any]], list[str]]
) -> None:
    payload, _message, content = corpus_message(name)
    event = outcome_of(payload, Event, ALL_GROUPS)
    assert event.text and all(part in event.text for part in shown(content)), event.text


@NO_CORPUS
def test_corpus_at_all_in_the_mentions_list_is_nobody() -> None:
    payload, message, _content = corpus_message("oc_text_at_all_and_bot_mentions")
    event = outcome_of(payload, Event, ALL_GROUPS)
    people = [m["id"]["open_id"] for m in message["mentions"] if m["key"] != "@_all"]
    assert event.mentions == people and "all" not in event.mentions
