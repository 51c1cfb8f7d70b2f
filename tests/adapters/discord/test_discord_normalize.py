"""Discord's pure normalize step, fed payload dicts directly: no server, no adapter.

Each shape the gateway (or REST history) sends is built here from our own values and
its event asserted field by field; malformed payloads must come back as a skip with a
reason, never an exception — checked by hand, by Hypothesis, and over the collected
corpus of real payloads (../shared/corpus/discord, when present).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, TypeVar

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.fakes.discord_api import snowflake_at
from tests.support.config import CORPUS as SHARED_CORPUS
from tether.adapters.discord.content import FORWARDED
from tether.adapters.discord.normalize import (
    IGNORED,
    INTERACTION_TTL,
    SKIPPED,
    Bot,
    Channel,
    interaction,
    location,
    message,
    normalize,
)
from tether.adapters.discord.servers import Role
from tether.adapters.kit import Dropped
from tether.events import REPLY_META, Event, Kind

T = TypeVar("T")


def snowflake(ms: int, counter: int = 0) -> str:
    """An id made at ``ms`` (Unix milliseconds), as the API writes ids: a string."""
    return str(snowflake_at(ms, counter))


BOT_ID, OTHER_BOT_ID, USER_ID, FRIEND_ID = (snowflake(1_700_000_000_000, n) for n in range(1, 5))
GUILD_ID, CHANNEL_ID, THREAD_ID, DM_ID = (snowflake(1_700_000_000_000, n) for n in range(10, 14))
BOT_ROLE_ID, STAFF_ROLE_ID = (snowflake(1_700_000_000_000, n) for n in (20, 21))
WHEN_MS = 1_712_345_678_901
MESSAGE_ID = snowflake(WHEN_MS, 7)
WHEN = datetime.fromtimestamp(WHEN_MS / 1000, UTC)

BOT = Bot(id=BOT_ID)


def user(uid: str, username: str, global_name: str | None = None, **extra: Any) -> dict[str, Any]:
    return {"id": uid, "username": username, "global_name": global_name, **extra}


BOT_USER = user(BOT_ID, "quill", "Quill", bot=True)
OTHER_BOT = user(OTHER_BOT_ID, "dicebot", "Dice", bot=True)
PERSON = user(USER_ID, "grace_h", "Grace")
FRIEND = user(FRIEND_ID, "linus", None)


@dataclass(frozen=True)
class Cached:
    """A server as a gateway cache would know it (normalize's Server protocol)."""

    members: Mapping[str, str] = field(default_factory=dict)
    roles: Mapping[str, Role] = field(default_factory=dict)
    channels: Mapping[str, Channel] = field(default_factory=dict)

    def member_name(self, user_id: str) -> str | None:
        return self.members.get(user_id)

    def role(self, role_id: str) -> Role | None:
        return self.roles.get(role_id)

    def channel(self, channel_id: str) -> Channel | None:
        return self.channels.get(channel_id)


SERVER = Cached(
    roles={BOT_ROLE_ID: Role("Quill", bot_id=BOT_ID), STAFF_ROLE_ID: Role("Staff")},
    channels={CHANNEL_ID: Channel("lobby"), THREAD_ID: Channel("plans", parent_id=CHANNEL_ID)},
)
SERVERS = {GUILD_ID: SERVER}


def dm(content: str, **fields: Any) -> dict[str, Any]:
    """A MESSAGE_CREATE ``d`` in a DM channel (no guild_id, no member)."""
    return {
        "id": MESSAGE_ID,
        "channel_id": DM_ID,
        "author": PERSON,
        "content": content,
        "timestamp": WHEN.isoformat(),
        "edited_timestamp": None,
        "type": 0,
        "mentions": [],
        "mention_roles": [],
        "attachments": [],
        "embeds": [],
        **fields,
    }


def in_server(content: str, *, nick: str | None = "Gracie", **fields: Any) -> dict[str, Any]:
    """A MESSAGE_CREATE ``d`` in a server channel: guild_id and the author's member."""
    server_fields = {
        "channel_id": CHANNEL_ID,
        "guild_id": GUILD_ID,
        "member": {"nick": nick, "roles": [], "joined_at": "2024-01-01T00:00:00+00:00"},
    }
    return dm(content, **{**server_fields, **fields})


def mentioning_bot(content: str, **fields: Any) -> dict[str, Any]:
    fields.setdefault("mentions", [BOT_USER])
    return in_server(f"<@{BOT_ID}> {content}", **fields)


def scribble(value: Any) -> None:
    """Change every object and list inside ``value`` in place, as discord.py's parser
    changes a payload after Tether has read it (a member gains ``user``, a mention loses
    its ``member``), and more."""
    if isinstance(value, dict):
        for inner in list(value.values()):
            scribble(inner)
        value["scribbled"] = True
    elif isinstance(value, list):
        for inner in value:
            scribble(inner)
        value.append("scribbled")


def outcome_of(payload: Any, expected: type[T], **kwargs: Any) -> T:
    """``message()`` of ``payload``; an event's ``raw`` is checked to be the payload as
    sent, sharing nothing with it: whatever changes the payload afterwards leaves it."""
    given = copy.deepcopy(payload)
    outcome = message(given, kwargs.pop("bot", BOT), kwargs.pop("servers", SERVERS), **kwargs)
    assert isinstance(outcome, expected), outcome
    if isinstance(outcome, Event):
        scribble(given)
        assert outcome.raw == payload
    return outcome


def event_of(payload: Any, **kwargs: Any) -> Event:
    return outcome_of(payload, Event, **kwargs)


def dropped(payload: Any, **kwargs: Any) -> Dropped:
    return outcome_of(payload, Dropped, **kwargs)


# -- text in a DM and in a server ------------------------------------------------------


def test_text_in_a_dm_becomes_a_message_with_every_field() -> None:
    event = event_of(dm("hello there"))
    assert event.key == f"dc:msg:{MESSAGE_ID}"
    assert (event.platform, event.kind) == ("discord", Kind.MESSAGE)
    assert event.conversation.key == f"discord:{DM_ID}"
    assert (event.conversation.chat_id, event.conversation.chat_type) == (DM_ID, "dm")
    assert event.conversation.thread_id is None
    assert event.sender is not None
    assert (event.sender.id, event.sender.name, event.sender.is_bot) == (USER_ID, "Grace", False)
    assert (event.message_id, event.text, event.command, event.args) == (
        MESSAGE_ID,
        "hello there",
        None,
        "",
    )
    assert (event.reply_to, event.reply_to_bot, event.mentions, event.mentions_bot) == (
        None,
        False,
        [],
        False,
    )
    assert event.attachments == []
    assert event.timestamp == WHEN  # from the id, as discord.py's created_at
    assert event.meta == {"channel_id": DM_ID}
    assert event.raw == dm("hello there")  # the payload as sent, for handlers and dead letters


def test_a_user_without_a_global_name_is_named_by_username() -> None:
    event = event_of(dm("hi", author=FRIEND))
    assert event.sender is not None and event.sender.name == "linus"


def test_a_server_message_that_mentions_the_bot_is_a_group_message_for_it() -> None:
    event = event_of(mentioning_bot("what's up?"))
    assert event.key == f"dc:msg:{MESSAGE_ID}"
    assert event.kind is Kind.MESSAGE
    assert (event.conversation.chat_id, event.conversation.chat_type) == (CHANNEL_ID, "group")
    assert event.sender is not None
    assert (event.sender.id, event.sender.name) == (USER_ID, "Gracie")  # the server nickname
    assert event.text == "@Quill what's up?"
    assert (event.mentions, event.mentions_bot) == ([BOT_ID], True)
    assert event.meta == {"channel_id": CHANNEL_ID, "guild_id": GUILD_ID}
    assert event.session("per_user") == f"discord:{CHANNEL_ID}:u{USER_ID}"


def test_without_a_nickname_the_global_name_counts() -> None:
    event = event_of(mentioning_bot("hey", nick=None))
    assert event.sender is not None and event.sender.name == "Grace"


def test_a_cached_member_names_the_author_when_the_payload_has_no_member() -> None:
    payload = mentioning_bot("from history")
    del payload["member"]  # REST history items carry no member
    servers = {GUILD_ID: Cached(members={USER_ID: "Cached Grace"})}
    event = event_of(payload, servers=servers)
    assert event.sender is not None and event.sender.name == "Cached Grace"


def test_a_server_message_not_addressed_to_the_bot_is_ignored() -> None:
    assert dropped(in_server("just chatting")) == Dropped(
        IGNORED, "server message not addressed to the bot"
    )
    lenient = Bot(id=BOT_ID, require_mention=False)
    event = event_of(in_server("just chatting"), bot=lenient)
    assert (event.text, event.conversation.chat_type, event.mentions_bot) == (
        "just chatting",
        "group",
        False,
    )


def test_a_mention_of_the_bots_role_addresses_the_bot() -> None:
    event = event_of(
        in_server(f"<@&{BOT_ROLE_ID}> status?", mention_roles=[BOT_ROLE_ID, STAFF_ROLE_ID])
    )
    assert event.text == "@Quill status?"
    assert (event.mentions, event.mentions_bot) == ([], True)
    # Another role is not the bot; an uncached server's roles are unknown.
    staff = in_server(f"<@&{STAFF_ROLE_ID}> status?", mention_roles=[STAFF_ROLE_ID])
    assert dropped(staff).reason == "server message not addressed to the bot"
    uncached = in_server(f"<@&{BOT_ROLE_ID}> status?", mention_roles=[BOT_ROLE_ID])
    assert dropped(uncached, servers={}).log_event == IGNORED
    lenient = Bot(id=BOT_ID, require_mention=False)
    assert event_of(uncached, servers={}, bot=lenient).text == "@deleted-role status?"


def test_mentions_channels_and_pings_read_as_a_client_shows_them() -> None:
    payload = mentioning_bot(
        f"ask <@!{FRIEND_ID}> in <#{THREAD_ID}> or <#{snowflake(WHEN_MS, 99)}>,"
        f" not <@{snowflake(WHEN_MS, 98)}> — @everyone @here",
        mentions=[BOT_USER, {**FRIEND, "member": {"nick": "Lin"}}],
    )
    event = event_of(payload)
    assert event.text == (
        "@Quill ask @Lin in #plans or #deleted-channel, not @deleted-user — @everyone @here"
    )
    assert event.mentions == [BOT_ID, FRIEND_ID]
    # In a DM there is no server: the user's own name, no channel names.
    direct = dm(
        f"<@{FRIEND_ID}> and <#{CHANNEL_ID}>", mentions=[{**FRIEND, "member": {"nick": "x"}}]
    )
    assert event_of(direct).text == "@linus and #deleted-channel"


# -- commands --------------------------------------------------------------------------


def test_a_command_in_a_dm() -> None:
    event = event_of(dm("/Weather  Berlin, tomorrow"))
    assert (event.kind, event.command, event.args) == (Kind.COMMAND, "weather", "Berlin, tomorrow")
    assert event.text == "/Weather  Berlin, tomorrow"


def test_a_command_after_the_bots_mention_is_addressed_to_us() -> None:
    event = event_of(mentioning_bot("/remind me at 5"))
    assert (event.kind, event.command, event.args) == (Kind.COMMAND, "remind", "me at 5")
    assert event.text == "@Quill /remind me at 5"
    nickname_form = in_server(f"<@!{BOT_ID}>/help", mentions=[BOT_USER])
    assert (event_of(nickname_form).command, event_of(nickname_form).args) == ("help", "")


def test_a_command_after_another_bots_mention_is_not_ours() -> None:
    to_other = in_server(f"<@{OTHER_BOT_ID}> /roll d20", mentions=[OTHER_BOT])
    assert dropped(to_other).reason == "server message not addressed to the bot"
    # In a DM it is still a message, but not our command.
    event = event_of(dm(f"<@{OTHER_BOT_ID}> /roll d20", mentions=[OTHER_BOT]))
    assert (event.kind, event.command, event.text) == (Kind.MESSAGE, None, "@Dice /roll d20")


def test_a_command_with_a_bot_suffix_is_a_command_discord_has_no_addressee_syntax() -> None:
    event = event_of(dm("/start@dicebot now"))
    assert (event.kind, event.command, event.args) == (Kind.COMMAND, "start", "now")


def test_text_that_only_looks_like_a_command_is_a_message() -> None:
    for text in ("a /help in the middle", "/", "/ space", "/with-dash"):
        event = event_of(dm(text))
        assert (event.kind, event.command, event.text) == (Kind.MESSAGE, None, text)


# -- replies, threads, edits -----------------------------------------------------------


def test_a_reply_to_the_bot_addresses_it_and_a_reply_to_a_person_does_not() -> None:
    earlier = snowflake(WHEN_MS - 60_000, 1)
    to_bot = in_server(
        "and then?",
        type=19,
        message_reference={"type": 0, "message_id": earlier, "channel_id": CHANNEL_ID},
        referenced_message={"id": earlier, "author": BOT_USER, "content": "first"},
    )
    event = event_of(to_bot)
    assert (event.reply_to, event.reply_to_bot, event.mentions_bot) == (earlier, True, False)
    to_person = dict(to_bot, referenced_message={"id": earlier, "author": FRIEND, "content": "x"})
    assert dropped(to_person).reason == "server message not addressed to the bot"
    deleted = dict(to_bot, referenced_message=None)  # the quoted message was deleted
    assert dropped(deleted).log_event == IGNORED
    assert event_of(dm("sure", **{k: to_bot[k] for k in ("type", "message_reference")})).reply_to


def test_a_forward_is_not_a_reply() -> None:
    forward = dm(
        "look at this",
        message_reference={"type": 1, "message_id": snowflake(WHEN_MS, 2), "channel_id": DM_ID},
    )
    assert event_of(forward).reply_to is None


def test_a_forward_carries_the_forwarded_text_and_files_and_is_not_a_reply() -> None:
    source_channel = snowflake(WHEN_MS - 3_600_000, 5)
    source_id = snowflake(WHEN_MS - 3_600_000, 6)
    picture = {
        "id": snowflake(WHEN_MS, 64),
        "filename": "map.png",
        "size": 812,
        "url": "https://cdn.example/map.png",
        "content_type": "image/png",
    }
    forward = dm(
        "",
        flags=1 << 14,  # HAS_SNAPSHOT
        message_reference={
            "type": 1,
            "channel_id": source_channel,
            "message_id": source_id,
            "guild_id": GUILD_ID,
        },
        message_snapshots=[
            {
                "message": {
                    "type": 0,
                    "content": f"/deploy at noon, <@{FRIEND_ID}> knows",
                    "mentions": [FRIEND],
                    "attachments": [picture],
                    "timestamp": WHEN.isoformat(),
                }
            }
        ],
    )
    event = event_of(forward)
    assert event.text == f"{FORWARDED}\n/deploy at noon, @linus knows"
    assert (event.kind, event.command) == (Kind.MESSAGE, None)  # someone else's words
    assert (event.reply_to, event.reply_to_bot) == (None, False)
    assert [(a.kind, a.name, a.url) for a in event.attachments] == [
        ("image", "map.png", "https://cdn.example/map.png")
    ]
    assert event.meta["forwarded_from"] == {
        "guild_id": GUILD_ID,
        "channel_id": source_channel,
        "message_id": source_id,
    }
    assert event.mentions == []  # who the forwarded message mentions is not addressed
    # A comment sent with the forward comes first; a forward of a file alone still says so.
    commented = dict(forward, content="look")
    assert event_of(commented).text == f"look\n{FORWARDED}\n/deploy at noon, @linus knows"
    only_file = dict(forward, message_snapshots=[{"message": {"attachments": [picture]}}])
    assert (event_of(only_file).text, len(event_of(only_file).attachments)) == (FORWARDED, 1)


def test_a_malformed_forward_is_skipped_with_the_field_named() -> None:
    bad = dm("", message_snapshots=[{"message": {"content": 5}}])
    assert dropped(bad).reason == (
        "malformed: message_snapshots[0].message.content: expected a string, got int 5"
    )
    assert dropped(dm("", message_snapshots=[7])).reason == (
        "malformed: message_snapshots[0]: expected an object, got int 7"
    )


def test_a_crosspost_is_not_a_reply_to_a_message_in_another_server() -> None:
    other_guild, other_channel = snowflake(WHEN_MS, 80), snowflake(WHEN_MS, 81)
    original = snowflake(WHEN_MS - 1000, 82)
    reference = {"channel_id": other_channel, "guild_id": other_guild, "message_id": original}
    crosspost = mentioning_bot("release 2.0 is out", flags=2, message_reference=reference)
    event = event_of(crosspost)
    assert (event.reply_to, event.reply_to_bot) == (None, False)
    assert event.meta["crossposted_from"] == reference
    # Either sign alone is enough: the flag, or a reference into another server.
    without_flag = dict(crosspost, flags=0)
    assert event_of(without_flag).reply_to is None
    flagged = dict(crosspost, message_reference={**reference, "guild_id": GUILD_ID})
    assert event_of(flagged).reply_to is None
    # The crossposting channel's own server is not the bot's concern: require_mention holds.
    assert dropped(in_server("release 2.0", flags=2, message_reference=reference)).log_event == (
        IGNORED
    )
    # A reply in the same server stays a reply.
    same = mentioning_bot("re", type=19, message_reference={**reference, "guild_id": GUILD_ID})
    assert event_of(same).reply_to == original


def test_everyone_and_here_read_as_typed() -> None:
    event = event_of(dm("@everyone @here lunch?", mention_everyone=True))
    assert event.text == "@everyone @here lunch?"
    assert "\u200b" not in event_of(mentioning_bot("ping @everyone")).text


def test_a_sticker_is_described_and_kept_as_an_attachment() -> None:
    sticker_id = snowflake(WHEN_MS, 90)
    event = event_of(dm("", sticker_items=[{"id": sticker_id, "name": "wave", "format_type": 1}]))
    assert (event.kind, event.text) == (Kind.MESSAGE, "[sticker: wave]")
    (sticker,) = event.attachments
    assert (sticker.kind, sticker.file_id, sticker.name) == ("sticker", sticker_id, "wave")
    assert sticker.url == f"https://cdn.discordapp.com/stickers/{sticker_id}.png"
    animated = dm(
        "nice",
        sticker_items=[
            {"id": sticker_id, "name": "party", "format_type": 3},
            {"id": snowflake(WHEN_MS, 91), "format_type": 4},
        ],
    )
    event = event_of(animated)
    assert event.text == "nice\n[sticker: party]\n[sticker]"
    assert [a.url.rsplit(".", 1)[-1] for a in event.attachments if a.url] == ["json", "gif"]


def test_a_poll_is_described_with_its_question_and_answers() -> None:
    poll = {
        "question": {"text": "Lunch?"},
        "answers": [
            {"answer_id": 1, "poll_media": {"text": "pizza", "emoji": {"id": None, "name": "🍕"}}},
            {
                "answer_id": 2,
                "poll_media": {"text": "salad", "emoji": {"id": "77", "name": "leaf"}},
            },
            {"answer_id": 3, "poll_media": {"text": "soup"}},
            {"answer_id": 4, "poll_media": {}},
        ],
        "allow_multiselect": False,
    }
    event = event_of(dm("", poll=poll))
    assert event.text == "[poll: Lunch? — 🍕 pizza, :leaf: salad, soup]"
    assert event_of(dm("", poll={"answers": "none"})).text == "[poll]"
    assert event_of(dm("vote!", poll={"question": {"text": "Q"}})).text == "vote!\n[poll: Q]"


def test_an_embed_only_message_reads_as_its_embeds() -> None:
    relay = Bot(id=BOT_ID, ignore_bots=False)
    embeds = [
        {
            "type": "rich",
            "title": "Build failed",
            "description": f"on main, see <#{CHANNEL_ID}>",
            "fields": [{"name": "Job", "value": "tests"}, {"name": "", "value": "42s"}],
        },
        {"type": "image", "url": "https://img.example/graph.png"},
        {"type": "rich"},
    ]
    event = event_of(dm("", author=OTHER_BOT, embeds=embeds), bot=relay)
    assert event.text == (
        "Build failed\non main, see #deleted-channel\nJob: tests\n42s\n"
        "[embed: https://img.example/graph.png]"
    )
    # Beside text an embed is that text's link preview: the text is the message.
    unfurled = dm("see https://img.example/graph.png", embeds=embeds[1:2])
    assert event_of(unfurled).text == "see https://img.example/graph.png"


def test_a_thread_is_its_own_conversation_with_its_parent_in_meta() -> None:
    event = event_of(mentioning_bot("in the thread", channel_id=THREAD_ID))
    assert event.conversation.key == f"discord:{THREAD_ID}"
    assert (event.conversation.chat_id, event.conversation.thread_id) == (THREAD_ID, None)
    assert event.meta == {"channel_id": THREAD_ID, "guild_id": GUILD_ID, "parent_id": CHANNEL_ID}
    # A thread the cache does not hold (archived): the backfill says what it fetched.
    archived = snowflake(WHEN_MS, 55)
    payload = mentioning_bot("old thread", channel_id=archived)
    assert "parent_id" not in event_of(payload).meta
    fetched = Channel("old", parent_id=CHANNEL_ID)
    assert event_of(payload, channel=fetched).meta["parent_id"] == CHANNEL_ID


def test_an_edit_has_its_own_key_kind_and_time_and_is_never_a_command() -> None:
    edited_at = "2024-04-05T20:00:00.123000+00:00"
    event = event_of(dm("/help again", edited_timestamp=edited_at), edited=edited_at)
    assert event.key == f"dc:edit:{MESSAGE_ID}:{edited_at}"
    assert (event.kind, event.command, event.args, event.text) == (
        Kind.EDIT,
        None,
        "",
        "/help again",
    )
    assert event.timestamp == datetime.fromisoformat(edited_at)
    assert event.meta == {"channel_id": DM_ID, "edited_timestamp": edited_at}


def test_a_message_update_frame_is_an_edit_only_with_an_edited_timestamp() -> None:
    edited_at = "2024-04-05T20:00:00+00:00"
    frame = {"op": 0, "t": "MESSAGE_UPDATE", "d": dm("fixed", edited_timestamp=edited_at)}
    event = normalize(frame, BOT)
    assert isinstance(event, Event) and event.key == f"dc:edit:{MESSAGE_ID}:{edited_at}"
    unfurl = {"op": 0, "t": "MESSAGE_UPDATE", "d": {"id": MESSAGE_ID, "embeds": [{}]}}
    assert normalize(unfurl, BOT) == Dropped(
        IGNORED, "an update that is not an edit (an embed unfurl, flags)"
    )
    created = normalize({"op": 0, "t": "MESSAGE_CREATE", "d": dm("hi")}, BOT)
    assert isinstance(created, Event) and created.key == f"dc:msg:{MESSAGE_ID}"


# -- interactions (/ask) ---------------------------------------------------------------


def ask_payload(question: Any = "what is tether?", **fields: Any) -> dict[str, Any]:
    interaction_id = snowflake(WHEN_MS, 42)
    return {
        "id": interaction_id,
        "application_id": BOT_ID,
        "type": 2,
        "token": "interaction-token-1",
        "version": 1,
        "channel_id": CHANNEL_ID,
        "channel": {"id": CHANNEL_ID, "type": 0, "name": "lobby"},
        "guild_id": GUILD_ID,
        "member": {"user": PERSON, "nick": "Gracie", "roles": []},
        "data": {
            "id": "1",
            "name": "ask",
            "type": 1,
            "options": [{"name": "question", "type": 3, "value": question}],
        },
        **fields,
    }


def test_ask_in_a_server_is_a_command_whose_reply_edits_the_deferred_response() -> None:
    payload = ask_payload()
    event = interaction(payload, BOT, deferred=True)
    assert isinstance(event, Event)
    assert event.key == f"dc:int:{payload['id']}"
    assert (event.kind, event.command, event.args, event.text) == (
        Kind.COMMAND,
        "ask",
        "what is tether?",
        "what is tether?",
    )
    assert (event.conversation.chat_id, event.conversation.chat_type) == (CHANNEL_ID, "group")
    assert event.sender is not None
    assert (event.sender.id, event.sender.name, event.sender.is_bot) == (USER_ID, "Gracie", False)
    assert event.mentions_bot and event.message_id is None
    assert event.timestamp == WHEN
    assert event.meta == {
        "interaction_id": payload["id"],
        "guild_id": GUILD_ID,
        REPLY_META: {
            "interaction": {
                "application_id": BOT_ID,
                "token": "interaction-token-1",
                "expires": WHEN.timestamp() + INTERACTION_TTL,
            }
        },
    }
    framed = normalize({"op": 0, "t": "INTERACTION_CREATE", "d": payload}, BOT, deferred=True)
    assert framed == event


def test_ask_in_a_dm_that_could_not_be_deferred_is_answered_in_the_channel() -> None:
    payload = ask_payload("hi?", channel={"id": DM_ID, "type": 1}, user=FRIEND)
    del payload["guild_id"], payload["member"]
    event = interaction(payload, BOT, deferred=False)
    assert isinstance(event, Event)
    assert (event.conversation.chat_id, event.conversation.chat_type) == (DM_ID, "dm")
    assert event.sender is not None and (event.sender.id, event.sender.name) == (FRIEND_ID, "linus")
    assert event.meta == {"interaction_id": payload["id"]}


def test_ask_names_its_chat_by_the_payloads_channel_id_whatever_the_channel_object() -> None:
    """discord.py may not resolve the channel (a type it does not know): the payload's
    ``channel_id`` is the chat then, never "None"."""
    for channel in ({"type": 99}, None, {"id": None, "type": 0}):
        payload = ask_payload(channel=channel)
        event = interaction(payload, BOT, deferred=True)
        assert isinstance(event, Event), (channel, event)
        assert event.conversation.chat_id == CHANNEL_ID
    lost = ask_payload(channel={"type": 99}, channel_id=None)
    assert interaction(lost, BOT, deferred=True) == Dropped(
        SKIPPED, "malformed: channel_id: expected an id, got nothing"
    )


@pytest.mark.parametrize(
    ("fields", "reason"),
    [
        ({"type": 3}, "unsupported interaction type 3"),
        ({"type": 4}, "unsupported interaction type 4"),
        (
            {"data": {"name": "ask", "type": 1, "options": []}},
            "malformed: data.options: no 'question'",
        ),
        ({"data": None}, "malformed: data: expected an object, got nothing"),
        ({"data": {"type": 1, "options": []}}, "malformed: data.name: empty"),
        ({"data": {"name": "", "type": 1}}, "malformed: data.name: empty"),
        ({"member": None}, "malformed: user: expected an object, got nothing"),
        ({"id": "x"}, "malformed: id: expected an id, got str 'x'"),
    ],
)
def test_other_interactions_are_skipped_with_their_reason(
    fields: dict[str, Any], reason: str
) -> None:
    assert interaction(ask_payload(**fields), BOT, deferred=True) == Dropped(SKIPPED, reason)


# -- attachments -----------------------------------------------------------------------


def test_attachments_become_typed_files_and_an_attachment_alone_is_a_message() -> None:
    files = [
        {
            "id": snowflake(WHEN_MS, 60),
            "filename": "cat.webp",
            "size": 4096,
            "url": "https://cdn.example/cat.webp",
            "proxy_url": "https://media.example/cat.webp",
            "content_type": "image/webp",
        },
        {
            "id": snowflake(WHEN_MS, 61),
            "filename": "notes.pdf",
            "size": 10,
            "url": "u",
            "content_type": "application/pdf",
        },
        {
            "id": snowflake(WHEN_MS, 62),
            "filename": "voice.ogg",
            "size": 3,
            "url": "v",
            "content_type": "audio/ogg",
        },
        {"id": snowflake(WHEN_MS, 63), "filename": "clip", "size": 5, "url": "w"},
    ]
    event = event_of(dm("", attachments=files))
    assert event.text == "" and event.kind is Kind.MESSAGE
    assert [(a.kind, a.mime, a.name, a.size) for a in event.attachments] == [
        ("image", "image/webp", "cat.webp", 4096),
        ("file", "application/pdf", "notes.pdf", 10),
        ("audio", "audio/ogg", "voice.ogg", 3),
        ("file", None, "clip", 5),
    ]
    first = event.attachments[0]
    assert (first.file_id, first.url) == (files[0]["id"], "https://cdn.example/cat.webp")


# -- what is ignored and what is skipped -----------------------------------------------


def test_our_own_messages_are_ignored_even_when_bots_are_answered() -> None:
    payload = dm("an answer", author=BOT_USER)
    expected = Dropped(IGNORED, "our own message")
    assert dropped(payload) == expected
    assert dropped(payload, bot=Bot(id=BOT_ID, ignore_bots=False)) == expected


def test_other_bots_and_webhooks_are_ignored_unless_configured_otherwise() -> None:
    from_bot = mentioning_bot("ping", author=OTHER_BOT)
    from_hook = mentioning_bot("ping", webhook_id=snowflake(WHEN_MS, 70))
    for payload in (from_bot, from_hook):
        assert dropped(payload) == Dropped(IGNORED, "from a bot or webhook")
    event = event_of(from_bot, bot=Bot(id=BOT_ID, ignore_bots=False))
    assert event.sender is not None
    assert (event.sender.id, event.sender.name, event.sender.is_bot) == (
        OTHER_BOT_ID,
        "Gracie",
        True,
    )


@pytest.mark.parametrize(
    ("kind", "name"),
    [
        (6, "pins_add"),
        (7, "new_member"),
        (18, "thread_created"),
        (20, "chat_input_command"),
        (21, "thread_starter_message"),
        (46, "poll_result"),
        (99, "unknown_99"),
    ],
)
def test_system_messages_are_skipped_with_their_type(kind: int, name: str) -> None:
    assert dropped(dm("joined", type=kind)) == Dropped(SKIPPED, f"system message ({name})")


def test_a_message_without_text_or_attachments_is_skipped() -> None:
    expected = Dropped(SKIPPED, "no text or attachments (is message_content on?)")
    assert dropped(dm("")) == expected
    nothing_to_say = dm("", sticker_items=[{}, 3], poll=[], embeds=[{"type": "rich"}, None])
    assert dropped(nothing_to_say) == expected
    no_content = dm("x")
    del no_content["content"]  # without the message_content intent the field may be empty
    assert dropped(no_content) == expected


def test_unsupported_gateway_events_and_non_frames_are_skipped() -> None:
    typing = {"op": 0, "t": "TYPING_START", "d": {"channel_id": DM_ID, "user_id": USER_ID}}
    assert normalize(typing, BOT) == Dropped(SKIPPED, "unsupported gateway event 'TYPING_START'")
    assert normalize({"op": 11}, BOT) == Dropped(SKIPPED, "unsupported gateway event None")
    not_frames: list[Any] = [None, [], "MESSAGE_CREATE", 7]
    for frame in not_frames:
        assert normalize(frame, BOT) == Dropped(SKIPPED, "not a gateway frame (expected an object)")


# -- malformed payloads ----------------------------------------------------------------


def _set(payload: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    *parents, last = path.split(".")
    target = payload
    for key in parents:
        target[key] = dict(target[key])
        target = target[key]
    if value is _MISSING:
        del target[last]
    else:
        target[last] = value
    return payload


_MISSING = object()


@pytest.mark.parametrize(
    ("path", "value", "reason"),
    [
        ("id", _MISSING, "malformed: id: expected an id, got nothing"),
        ("id", "12ab", "malformed: id: expected an id, got str '12ab'"),
        ("id", -5, "malformed: id: -5 is out of range for an id"),
        ("id", "1" * 21, f"malformed: id: expected an id, got str '{'1' * 21}'"),
        ("id", True, "malformed: id: expected an id, got bool True"),
        ("channel_id", None, "malformed: channel_id: expected an id, got nothing"),
        ("channel_id", 3.5, "malformed: channel_id: expected an id, got float 3.5"),
        ("author", _MISSING, "malformed: author: expected an object, got nothing"),
        ("author", ["x"], "malformed: author: expected an object, got list ['x']"),
        ("author.id", _MISSING, "malformed: author.id: expected an id, got nothing"),
        ("author.bot", "yes", "malformed: author.bot: expected true or false, got str 'yes'"),
        ("type", _MISSING, "malformed: type: expected an integer, got nothing"),
        ("type", "0", "malformed: type: expected an integer, got str '0'"),
        ("guild_id", {"id": 1}, "malformed: guild_id: expected an id, got dict {'id': 1}"),
        ("content", 42, "malformed: content: expected a string, got int 42"),
        ("attachments", "cat.png", "malformed: attachments: expected a list, got str 'cat.png'"),
        ("attachments", [7], "malformed: attachments[]: expected an object, got int 7"),
        (
            "message_reference",
            {"message_id": "nope"},
            "malformed: message_reference.message_id: expected an id, got str 'nope'",
        ),
    ],
)
def test_malformed_fields_are_skipped_with_the_field_named(
    path: str, value: Any, reason: str
) -> None:
    payload = _set(dm("hello"), path, value)
    assert dropped(payload) == Dropped(SKIPPED, reason)


def test_a_wrongly_typed_attachment_field_or_edit_time_is_skipped() -> None:
    bad_size = dm("", attachments=[{"id": snowflake(WHEN_MS, 1), "size": "big"}])
    assert (
        dropped(bad_size).reason
        == "malformed: attachments[].size: expected an integer, got str 'big'"
    )
    bad_time = dropped(dm("x"), edited="yesterday")
    assert bad_time.reason == "malformed: edited_timestamp: not an ISO 8601 time: 'yesterday'"


def test_odd_lists_of_mentions_are_read_as_far_as_they_go() -> None:
    payload = mentioning_bot(
        "hi", mentions=[None, 5, {"id": "bad"}, BOT_USER, {"username": "no id"}], mention_roles=7
    )
    event = event_of(payload)
    assert (event.mentions, event.mentions_bot) == ([BOT_ID], True)


@pytest.mark.parametrize("payload", [None, [], "text", 12, 1.5, True])
def test_a_payload_that_is_not_an_object_is_skipped(payload: Any) -> None:
    assert dropped(payload).reason.startswith("malformed: message: expected an object")
    assert interaction(payload, BOT, deferred=True).reason.startswith(  # type: ignore[union-attr]
        "malformed: interaction: expected an object"
    )


def test_location_is_the_channel_and_message_id_or_nothing() -> None:
    assert location(dm("x")) == (int(DM_ID), int(MESSAGE_ID))
    assert location(dm("x", channel_id="oops")) is None
    assert location({"id": MESSAGE_ID}) is None
    assert location([1, 2]) is None


# -- never raises: Hypothesis and the corpus -------------------------------------------

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=30),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4)
    ),
    max_leaves=20,
)
#: Words without ``<`` (no mention to resolve) or ``[`` (no description to mimic), so a
#: property can find them verbatim in the text.
words = st.text(st.characters(exclude_characters="<["), max_size=40)
ids = st.integers(min_value=10**15, max_value=2**63).map(str)
attachments = st.fixed_dictionaries(
    {"id": ids, "filename": words, "size": st.integers(0, 2**31)},
    optional={"content_type": st.sampled_from(["image/png", "video/mp4", "text/plain"])},
)
stickers = st.fixed_dictionaries(
    {"id": ids, "name": words}, optional={"format_type": st.integers(0, 6)}
)
polls = st.fixed_dictionaries(
    {"question": st.fixed_dictionaries({"text": words})},
    optional={
        "answers": st.lists(
            st.fixed_dictionaries(
                {"poll_media": st.fixed_dictionaries({"text": words})},
                optional={"answer_id": st.integers(1, 10)},
            ),
            max_size=4,
        )
    },
)
embeds = st.fixed_dictionaries(
    {},
    optional={
        "title": words,
        "description": words,
        "url": words,
        "fields": st.lists(st.fixed_dictionaries({"name": words, "value": words}), max_size=3),
    },
)
#: One forwarded message, as ``message_snapshots[].message`` holds it.
snapshots = st.fixed_dictionaries(
    {"content": words},
    optional={
        "attachments": st.lists(attachments, max_size=2),
        "sticker_items": st.lists(stickers, max_size=1),
        "embeds": st.lists(embeds, max_size=2),
        "poll": polls,
    },
)
#: Values a field of a real payload might wrongly hold, including well-formed ids and
#: well-formed parts of the shapes normalize reads beyond ``content``.
field_values = (
    json_values
    | st.sampled_from([MESSAGE_ID, BOT_ID, "0", "", [BOT_USER], BOT_USER, 2, 1 << 14])
    | st.lists(st.fixed_dictionaries({"message": snapshots}), max_size=2)
    | st.lists(stickers | embeds | attachments, max_size=2)
    | polls
)
message_fields = st.sampled_from(
    sorted(
        set(mentioning_bot("x", referenced_message={}, message_reference={}, webhook_id=1))
        | {"flags", "message_snapshots", "sticker_items", "stickers", "poll", "embeds"}
    )
)
author_fields = st.sampled_from(sorted(set(PERSON) | {"bot"}))
#: The suite's Hypothesis profile (tests/conftest.py) sets how many examples.
NEVER_RAISES = settings(
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)


def _is_outcome(value: object) -> bool:
    return isinstance(value, Event | Dropped)


@pytest.mark.slow
@NEVER_RAISES
@given(
    payload=json_values,
    name=st.sampled_from(["MESSAGE_CREATE", "MESSAGE_UPDATE", "INTERACTION_CREATE", "READY"]),
)
def test_arbitrary_json_never_makes_normalize_raise(payload: Any, name: str) -> None:
    assert _is_outcome(normalize({"op": 0, "t": name, "d": payload}, BOT, SERVERS))
    assert _is_outcome(normalize(payload, BOT, SERVERS))
    assert _is_outcome(message(payload, BOT, SERVERS, edited="2024-01-01T00:00:00+00:00"))
    assert _is_outcome(interaction(payload, BOT, deferred=True))
    location(payload)


@NEVER_RAISES
@given(
    changes=st.dictionaries(message_fields, field_values, max_size=4),
    author=st.dictionaries(author_fields, field_values, max_size=2),
    edited=st.none() | st.text(max_size=30),
)
def test_a_message_of_the_right_shape_with_wrong_types_never_raises(
    changes: dict[str, Any], author: dict[str, Any], edited: str | None
) -> None:
    payload = mentioning_bot(
        "hi <@&1234567890123456> <#1234567890123456>", mention_roles=[BOT_ROLE_ID]
    )
    payload.update(changes)
    if author and isinstance(payload.get("author"), dict):
        payload["author"] = {**payload["author"], **author}
    for bot in (BOT, Bot(), Bot(id=BOT_ID, require_mention=False, ignore_bots=False)):
        assert _is_outcome(message(payload, bot, SERVERS, edited=edited))
        assert _is_outcome(message(payload, bot))


@NEVER_RAISES
@given(
    own=words,
    forwarded=st.lists(snapshots, max_size=3),
    sticker_items=st.lists(stickers, max_size=2),
    poll=st.none() | polls,
    files=st.lists(attachments, max_size=2),
)
def test_everything_a_message_carries_reaches_the_event(
    own: str,
    forwarded: list[dict[str, Any]],
    sticker_items: list[dict[str, Any]],
    poll: dict[str, Any] | None,
    files: list[dict[str, Any]],
) -> None:
    """Own text, each forward's text and files, stickers and a poll: none is lost."""
    payload = dm(
        own,
        attachments=files,
        sticker_items=sticker_items,
        message_snapshots=[{"message": snapshot} for snapshot in forwarded],
        **({"poll": poll} if poll is not None else {}),
    )
    outcome = message(payload, BOT, SERVERS)
    if not isinstance(outcome, Event):
        assert outcome == Dropped(SKIPPED, "no text or attachments (is message_content on?)")
        assert not (own or forwarded or sticker_items or poll or files)
        return
    assert outcome.text.startswith(own)
    assert outcome.text.count(FORWARDED) == len(forwarded)
    for snapshot in forwarded:
        assert snapshot["content"] in outcome.text
    assert outcome.text.count("[sticker") == len(sticker_items) + sum(
        len(snapshot.get("sticker_items", [])) for snapshot in forwarded
    )
    assert ("[poll" in outcome.text) >= (poll is not None)
    carried = len(files) + len(sticker_items)
    carried += sum(
        len(snapshot.get("attachments", [])) + len(snapshot.get("sticker_items", []))
        for snapshot in forwarded
    )
    assert len(outcome.attachments) == carried
    assert outcome.reply_to is None and outcome.raw == payload


@pytest.mark.slow
@NEVER_RAISES
@given(
    changes=st.dictionaries(st.sampled_from(sorted(ask_payload())), field_values, max_size=4),
    question=field_values,
)
def test_an_interaction_of_the_right_shape_with_wrong_types_never_raises(
    changes: dict[str, Any], question: Any
) -> None:
    payload = {**ask_payload(question), **changes}
    for deferred in (True, False):
        assert _is_outcome(interaction(payload, BOT, deferred=deferred))


CORPUS = SHARED_CORPUS / "discord"


@pytest.mark.skipif(not CORPUS.is_dir(), reason=f"no corpus at {CORPUS}")
def test_every_corpus_payload_becomes_an_event_or_a_reasoned_skip() -> None:
    files = sorted(CORPUS.glob("*.json"))
    assert files
    events = 0
    for path in files:
        frame = json.loads(path.read_text())
        for bot in (BOT, Bot(id=BOT_ID, require_mention=False, ignore_bots=False)):
            for servers in ({}, {str((frame.get("d") or {}).get("guild_id")): Cached()}):
                outcome = normalize(frame, bot, servers, deferred=True)
                assert _is_outcome(outcome), path.name
                if isinstance(outcome, Dropped):
                    assert outcome.log_event in (IGNORED, SKIPPED) and outcome.reason, path.name
                else:
                    events += 1
                    assert outcome.key.startswith(("dc:msg:", "dc:edit:", "dc:int:")), path.name
    assert events > 0  # real messages are read, not all skipped


# -- the corpus files that showed a bug: the right outcome now -------------------------
# Each check reads its expectations from the file itself (no corpus data is copied here).


def _forward_keeps_what_it_forwards(data: Mapping[str, Any], event: Event) -> None:
    forwarded = [snapshot["message"] for snapshot in data["message_snapshots"]]
    assert event.text.count(FORWARDED) == len(forwarded)
    for snapshot in forwarded:
        assert snapshot.get("content", "") in event.text
    assert len(event.attachments) >= sum(len(s.get("attachments", [])) for s in forwarded)
    assert event.reply_to is None


def _crosspost_is_not_a_reply(data: Mapping[str, Any], event: Event) -> None:
    assert (event.reply_to, event.reply_to_bot) == (None, False)
    origin = data["message_reference"]["message_id"]
    assert event.meta["crossposted_from"]["message_id"] == origin


def _everyone_reads_as_typed(data: Mapping[str, Any], event: Event) -> None:
    assert event.text == data["content"] and "\u200b" not in event.text


def _stickers_are_described(data: Mapping[str, Any], event: Event) -> None:
    for sticker in data["sticker_items"]:
        assert f"[sticker: {sticker['name']}]" in event.text
    names = [a.name for a in event.attachments if a.kind == "sticker"]
    assert names == [sticker["name"] for sticker in data["sticker_items"]]


def _poll_is_described(data: Mapping[str, Any], event: Event) -> None:
    poll = data["poll"]
    assert event.text.startswith(f"[poll: {poll['question']['text']} — ")
    for answer in poll["answers"]:
        assert answer["poll_media"]["text"] in event.text


def _embed_is_read(data: Mapping[str, Any], event: Event) -> None:
    for embed in data["embeds"]:
        assert embed["description"].strip() in event.text


def _reply_stays_a_reply(data: Mapping[str, Any], event: Event) -> None:
    assert event.reply_to == data["message_reference"]["message_id"]


CORPUS_FIXED = {
    "ooye_forwarded_image": _forward_keeps_what_it_forwards,
    "ooye_constructed_forwarded_text": _forward_keeps_what_it_forwards,
    "hikari_message_with_snapshot": _forward_keeps_what_it_forwards,
    "docs_example_crossposted_message": _crosspost_is_not_a_reply,
    "ooye_crosspost_announcement": _crosspost_is_not_a_reply,
    "hikari_kitchen_sink_message": _crosspost_is_not_a_reply,
    "ooye_at_everyone": _everyone_reads_as_typed,
    "ooye_lottie_sticker": _stickers_are_described,
    "ooye_sticker": _stickers_are_described,
    "ooye_poll_single_choice": _poll_is_described,
    "ooye_reply_with_only_embed": _embed_is_read,
    "serenity_message_footer_1": _embed_is_read,
    # Not bugs, but next to the crosspost rule: replies in one server stay replies.
    "ooye_simple_reply": _reply_stays_a_reply,
    "ooye_reply_with_missing_referenced_message": _reply_stays_a_reply,
}


@pytest.mark.parametrize("name", sorted(CORPUS_FIXED))
def test_a_corpus_payload_that_showed_a_bug_now_reads_right(name: str) -> None:
    path = CORPUS / f"{name}.json"
    if not path.is_file():
        pytest.skip(f"no {path}")
    frame = json.loads(path.read_text())
    # Everything a person or a relay sent is read: no policy drop in the way.
    everything = Bot(id=BOT_ID, require_mention=False, ignore_bots=False)
    event = normalize(frame, everything, deferred=True)
    assert isinstance(event, Event), event
    CORPUS_FIXED[name](frame["d"], event)
    assert event.raw == frame["d"]


def test_a_menu_command_is_a_command_with_its_args_option_or_none() -> None:
    options = [{"name": "args", "type": 3, "value": "Berlin"}]
    used = interaction(
        ask_payload(data={"name": "weather", "type": 1, "options": options}), BOT, deferred=True
    )
    bare = interaction(ask_payload(data={"name": "roll", "type": 1}), BOT, deferred=False)
    assert isinstance(used, Event) and isinstance(bare, Event)
    assert (used.kind, used.command, used.args, used.text) == (
        Kind.COMMAND,
        "weather",
        "Berlin",
        "/weather Berlin",
    )
    assert (bare.command, bare.args, bare.text) == ("roll", "", "/roll")
