"""The Feishu/Lark adapter: the real lark-oapi client against a fake open platform.

Every gateway test runs the real Gateway (SQLite store in tmp_path) with the adapter
built from config by ``build_adapters``, and a fake open-platform API
(tests/fakes/feishu_api.py) in a thread of its own, because the SDK's token fetch
and endpoint lookup block. Webhook requests are encrypted and signed here the way
Feishu does it and posted to Tether's real HTTP server. Synchronization waits on
conditions (the fake's, or the gateway draining), never on sleeps.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import structlog

from tests.fakes.cluster import free_port
from tests.fakes.feishu_api import (
    APP_ID,
    APP_SECRET,
    BOT_NAME,
    BOT_OPEN_ID,
    ENCRYPT_KEY,
    VERIFICATION_TOKEN,
    FakeFeishu,
    mention,
    message_event,
    signed_request,
)
from tests.support.config import ROOT, events_named, inbox_rows, make_settings, write_config
from tests.support.feishu import feishu_section, feishu_settings, post, post_event
from tests.support.gateway import running
from tests.support.processes import ready, spawn_run, subprocess_env
from tether.adapters.feishu import FeishuAdapter
from tether.adapters.feishu.send import classify, send_uuid
from tether.adapters.feishu.webhook import Rejected
from tether.adapters.kit import Dropped
from tether.errors import ConfigError, GatewayError, SendAmbiguous, SendFatal, SendRetryable
from tether.events import Event, Kind, OutMessage, Target
from tether.gateway.app import Gateway
from tether.gateway.assembly import build_adapters
from tether.gateway.builtin.echo import echo_router
from tether.gateway.handler.context import Context
from tether.gateway.handler.routing import Router

# -- fixtures and helpers ----------------------------------------------------------------


@pytest.fixture
def fake(feishu: FakeFeishu) -> FakeFeishu:
    """The shared fake (feishu, tests/fixtures.py), as this module uses it."""
    return feishu


test_handlers = Router("feishu-tests")


@test_handlers.command("ping")
async def _ping(ctx: Context) -> None:
    await ctx.reply("pong", quote=False)


@test_handlers.text(r"^cjk$")
async def _long_cjk(ctx: Context) -> None:
    await ctx.reply("你好" * 6000, format="markdown")  # 36,000 bytes of UTF-8


@test_handlers.text(r"^md$")
async def _markdown(ctx: Context) -> None:
    await ctx.reply("**bold** and [a link](https://example.com)", format="markdown")


def router() -> Router:
    root = Router("root")
    root.include(test_handlers)
    root.include(echo_router())
    return root


# -- Done when: one message_id, three event_ids → answered once ---------------------------


async def test_redelivered_message_with_new_event_ids_is_answered_once(
    tmp_path: Path, fake: FakeFeishu
) -> None:
    async with running(feishu_settings(tmp_path, fake), router()) as (gateway, adapter):
        assert adapter.bot_open_id == BOT_OPEN_ID
        for n in range(3):  # Feishu's retries carry new event_ids, the same message_id
            event = message_event("om_once", "only once please", event_id=f"ev_{n}")
            assert await post_event(gateway, event) == 200
        await gateway.drain()
        assert adapter.connected
    (sent,) = fake.messages
    assert sent["content"] == {"text": "only once please"}
    assert sent["parent_id"] == "om_once"  # a reply quoting the message
    assert sent["uuid"] == send_uuid("fs:msg:om_once#0")
    assert inbox_rows(tmp_path) == [("fs:msg:om_once", "done")]


# -- Done when: url_verification, plain and encrypted --------------------------------------


@pytest.mark.parametrize("encrypted", [False, True])
async def test_url_verification_returns_the_challenge(
    tmp_path: Path, fake: FakeFeishu, encrypted: bool
) -> None:
    key = ENCRYPT_KEY if encrypted else None
    settings = feishu_settings(tmp_path, fake, encrypt_key=key)
    challenge = {"challenge": "ch-4f2a", "token": VERIFICATION_TOKEN, "type": "url_verification"}
    forged = {**challenge, "token": "not-the-token"}
    async with running(settings, router()) as (gateway, _adapter):
        assert gateway.http is not None
        body, headers = signed_request(challenge, key)
        if encrypted:  # sent while the URL is configured: encrypted, not signed
            assert "encrypt" in json.loads(body)
            headers = {"Content-Type": "application/json"}
        assert await post(gateway.http.port, body, headers) == (200, {"challenge": "ch-4f2a"})
        body, headers = signed_request(forged, key)
        status, answer = await post(gateway.http.port, body, headers)
        assert status == 403 and answer is not None and "challenge" not in answer


# -- Done when: bad signature → 401, nothing stored; missing headers → 401; stale → 401 --


def _tampered(payload: dict[str, Any]) -> tuple[bytes, dict[str, str]]:
    _body, headers = signed_request(payload)
    other, _ = signed_request(message_event("om_other", "forged"))
    return other, headers  # a valid signature, for a different body


def _bad_signature(payload: dict[str, Any]) -> tuple[bytes, dict[str, str]]:
    body, headers = signed_request(payload)
    return body, {**headers, "X-Lark-Signature": "0" * 64}


def _wrong_key(payload: dict[str, Any]) -> tuple[bytes, dict[str, str]]:
    return signed_request(payload, "another-apps-encrypt-key")


def _without(header: str) -> Any:
    def build(payload: dict[str, Any]) -> tuple[bytes, dict[str, str]]:
        body, headers = signed_request(payload)
        return body, {k: v for k, v in headers.items() if k != header}

    return build


def _stale(payload: dict[str, Any]) -> tuple[bytes, dict[str, str]]:
    return signed_request(payload, timestamp=time.time() - 301)  # signed, but 5 min old


def _unencrypted(payload: dict[str, Any]) -> tuple[bytes, dict[str, str]]:
    return signed_request(payload, None)


def _wrong_token(payload: dict[str, Any]) -> tuple[bytes, dict[str, str]]:
    return signed_request(message_event("om_forged", "forged", token="guessed-token"))


def _not_json(_payload: dict[str, Any]) -> tuple[bytes, dict[str, str]]:
    return b"{not json", {"Content-Type": "application/json"}


@pytest.mark.parametrize(
    ("build", "status", "reason"),
    [
        (_bad_signature, 401, "signature does not match"),
        (_tampered, 401, "signature does not match"),
        (_wrong_key, 401, "signature does not match"),
        (_without("X-Lark-Signature"), 401, "missing signature headers"),
        (_without("X-Lark-Request-Timestamp"), 401, "missing signature headers"),
        (_without("X-Lark-Request-Nonce"), 401, "missing signature headers"),
        (_stale, 401, "timestamp is 30"),
        (_unencrypted, 401, "body is not encrypted although encrypt_key is set"),
        (_wrong_token, 403, "verification token does not match"),
        (_not_json, 401, "missing signature headers"),  # unsigned: refused before parsing
    ],
)
async def test_unauthentic_posts_are_refused_and_store_nothing(
    tmp_path: Path, fake: FakeFeishu, build: Any, status: int, reason: str
) -> None:
    body, headers = build(message_event("om_forged", "forged"))
    with structlog.testing.capture_logs() as logs:
        async with running(feishu_settings(tmp_path, fake), router()) as (gateway, _adapter):
            assert gateway.http is not None
            assert (await post(gateway.http.port, body, headers))[0] == status
            await gateway.drain()
            assert await gateway.store.counts() == {"inbox": {}, "outbox": {}}
    assert inbox_rows(tmp_path) == []
    assert fake.messages == []
    (line,) = events_named(logs, "feishu.webhook_rejected")
    assert line["status"] == status and line["reason"].startswith(reason)


async def test_without_encrypt_key_the_token_still_authenticates(
    tmp_path: Path, fake: FakeFeishu
) -> None:
    settings = feishu_settings(tmp_path, fake, encrypt_key=None)
    async with running(settings, router()) as (gateway, _adapter):
        assert await post_event(gateway, message_event("om_plain", "plain"), None) == 200
        forged = message_event("om_forged", "forged", token="guessed")
        assert await post_event(gateway, forged, None) == 403
        await gateway.drain()
    assert [m["content"]["text"] for m in fake.messages] == ["plain"]


# -- Done when: SIGKILL between accept and handling → answered exactly once -------------


class HandlerGate:
    """The test's end of tests/plugins/feishu_block.py: hold handlers, or let them run."""

    def __init__(self) -> None:
        self.entered: asyncio.Queue[str] = asyncio.Queue()
        self.release = False

    async def on_connect(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await self.entered.put((await reader.readline()).decode().strip())
        if self.release:
            writer.write(b"go\n")
            await writer.drain()
        else:
            await reader.read()  # hold until the process dies
        writer.close()


@pytest.mark.crash
@pytest.mark.slow
async def test_sigkill_between_accept_and_handling_is_answered_once_after_restart(
    tmp_path: Path, fake: FakeFeishu
) -> None:
    port = free_port()
    config = write_config(
        tmp_path,
        plugins=["tests.plugins.feishu_block:router"],
        http={"enabled": True, "port": port},
        platforms={"feishu": feishu_section(fake)},
    )
    sock = tmp_path / "gate.sock"
    env = subprocess_env(TETHER_TEST_SOCKET=str(sock))
    gate = HandlerGate()
    server = await asyncio.start_unix_server(gate.on_connect, path=str(sock))
    log = tmp_path / "tether.log"
    body, headers = signed_request(message_event("om_crash", "survive", event_id="ev_1"))
    try:
        first = await spawn_run(config, log, env)
        try:
            await ready(port, first)
            assert (await post(port, body, headers))[0] == 200  # committed, acknowledged
            assert await asyncio.wait_for(gate.entered.get(), 30) == "entered fs:msg:om_crash 1"
        finally:
            first.send_signal(signal.SIGKILL)
            await first.wait()
        assert fake.messages == []
        assert [key for key, _status in inbox_rows(tmp_path)] == ["fs:msg:om_crash"]

        gate.release = True
        second = await spawn_run(config, log, env)
        try:
            await ready(port, second)
            await fake.until(lambda: len(fake.messages) >= 1, timeout=30)
            # Feishu delivers it again anyway (a new event_id): still one answer.
            again = message_event("om_crash", "survive", event_id="ev_2")
            assert (await post(port, *signed_request(again)))[0] == 200
        finally:
            second.send_signal(signal.SIGTERM)
            assert await asyncio.wait_for(second.wait(), 30) == 0
    finally:
        server.close()
    assert [m["content"] for m in fake.messages] == [{"text": "handled:survive"}]
    assert inbox_rows(tmp_path) == [("fs:msg:om_crash", "done")]
    text = log.read_text()
    assert APP_SECRET not in text and ENCRYPT_KEY not in text and VERIFICATION_TOKEN not in text


# -- Done when: a send failed once with 500 is retried with the same uuid ---------------


async def test_send_failed_with_500_is_retried_with_the_same_uuid(
    tmp_path: Path, fake: FakeFeishu
) -> None:
    fake.fail_next(500, 1500, "internal error", deliver=True)  # posted, then a 500 anyway
    async with running(feishu_settings(tmp_path, fake), router()) as (gateway, _adapter):
        assert await post_event(gateway, message_event("om_retry", "once")) == 200
        await fake.until(lambda: len(fake.sends()) >= 2)
        await gateway.drain()
        (row,) = await gateway.store.outbox_rows("fs:msg:om_retry")
    first, second = fake.sends()
    assert (first.status, second.status) == (500, 200)
    assert first.body["uuid"] == second.body["uuid"] == send_uuid("fs:msg:om_retry#0")
    assert len(fake.messages) == 1
    assert row.status == "sent" and row.attempts == 2


@pytest.mark.slow
async def test_429_waits_out_the_reset_and_a_4xx_is_dead(tmp_path: Path, fake: FakeFeishu) -> None:
    reset = {"x-ogw-ratelimit-reset": "0.3"}
    fake.fail_next(429, 99991400, "request trigger frequency limit", headers=reset)
    async with running(feishu_settings(tmp_path, fake), router()) as (gateway, _adapter):
        assert await post_event(gateway, message_event("om_busy", "busy")) == 200
        await fake.until(lambda: len(fake.messages) >= 1)
        fake.fail_next(400, 230002, "Bot/User can NOT be out of the chat.")
        assert await post_event(gateway, message_event("om_gone", "gone", chat_id="oc_2")) == 200
        await fake.until(lambda: len(fake.sends()) >= 3)
        await gateway.drain()
        (busy,) = await gateway.store.outbox_rows("fs:msg:om_busy")
        (gone,) = await gateway.store.outbox_rows("fs:msg:om_gone")
    throttled, sent, refused = fake.sends()
    assert throttled.status == 429 and sent.at - throttled.at >= 0.29
    assert busy.status == "sent" and gone.status == "dead" and refused.status == 400
    assert [m["content"]["text"] for m in fake.messages] == ["busy"]


async def test_a_revoked_token_is_fetched_again_and_the_send_retried(
    tmp_path: Path, fake: FakeFeishu
) -> None:
    def token_calls() -> int:
        return sum(call.path.endswith("/tenant_access_token/internal") for call in fake.calls)

    async with running(feishu_settings(tmp_path, fake), router()) as (gateway, _adapter):
        fetched = token_calls()
        fake.fail_next(401, 99991663, "Invalid access token for authorization")
        assert await post_event(gateway, message_event("om_tok", "token")) == 200
        await fake.until(lambda: len(fake.messages) >= 1)
        await gateway.drain()
    assert [call.status for call in fake.sends()] == [401, 200]
    assert token_calls() == fetched + 1  # the cached token was dropped, a new one fetched


async def test_long_cjk_markdown_fits_feishus_body_cap(tmp_path: Path, fake: FakeFeishu) -> None:
    async with running(feishu_settings(tmp_path, fake), router()) as (gateway, _adapter):
        assert await post_event(gateway, message_event("om_cjk", "cjk")) == 200
        await fake.until(lambda: len(fake.sends()) >= 2)
        await gateway.drain()
    sends = fake.sends()
    assert [call.status for call in sends] == [200, 200]
    assert 24_000 < sends[0].size <= 30 * 1024  # raw UTF-8 under the post cap, not \u escapes
    texts = [m["content"]["zh_cn"]["content"][0][0]["text"] for m in fake.messages]
    assert "".join(texts) == "你好" * 6000


def test_classify_send_failures() -> None:
    limited = classify(429, 99991400, "limit", {"X-Ogw-Ratelimit-Reset": "7"})
    assert isinstance(limited, SendRetryable) and limited.retry_after == 7.0
    assert isinstance(classify(400, 99991400, "limit", {}), SendRetryable)
    assert isinstance(classify(401, 99991663, "Invalid access token", {}), SendRetryable)
    assert isinstance(classify(502, None, "bad gateway", {}), SendAmbiguous)
    assert isinstance(classify(400, 230002, "bot not in chat", {}), SendFatal)
    assert isinstance(classify(403, 99991672, "no permission", {}), SendFatal)
    assert len(send_uuid("fs:msg:" + "x" * 500 + "#12")) <= 50
    assert send_uuid("fs:msg:a#0") == send_uuid("fs:msg:a#0") != send_uuid("fs:msg:a#1")


# -- groups, threads, formats ---------------------------------------------------------------


async def test_groups_answer_mentions_threads_stay_in_their_thread(
    tmp_path: Path, fake: FakeFeishu
) -> None:
    at_bot = [mention("@_user_1", BOT_OPEN_ID, BOT_NAME)]
    at_other = [mention("@_user_1", "ou_someone", "Ann")]
    with structlog.testing.capture_logs() as logs:
        async with running(feishu_settings(tmp_path, fake), router()) as (gateway, _adapter):
            group = {"chat_id": "oc_group", "chat_type": "group"}
            events = [
                message_event("om_g1", "hello everyone", **group),
                message_event("om_g2", "@_user_1 hi Ann", mentions=at_other, **group),
                message_event("om_g3", "@_user_1 /ping", mentions=at_bot, **group),
                message_event(
                    "om_g4",
                    "@_user_1 in a thread",
                    mentions=at_bot,
                    thread_id="omt_1",
                    root_id="om_root",
                    parent_id="om_root",
                    **group,
                ),
                message_event("om_g5", "beep", sender_type="app"),
                message_event("om_g6", "md"),
            ]
            for event in events:
                assert await post_event(gateway, event) == 200
            await fake.until(lambda: len(fake.messages) >= 3)
            await gateway.drain()
    by_text = {json.dumps(m["content"]): m for m in fake.messages}
    assert len(fake.messages) == 3
    pong = by_text[json.dumps({"text": "pong"})]
    assert (pong["chat_id"], pong["parent_id"]) == ("oc_group", None)  # created, not a reply
    threaded = by_text[json.dumps({"text": f"@{BOT_NAME} in a thread"})]
    assert (threaded["parent_id"], threaded["reply_in_thread"]) == ("om_g4", True)
    post = next(m for m in fake.messages if m["msg_type"] == "post")
    assert post["content"] == {
        "zh_cn": {
            "title": "",
            "content": [[{"tag": "md", "text": "**bold** and [a link](https://example.com)"}]],
        }
    }
    reasons = sorted(line["reason"] for line in events_named(logs, "feishu.ignored"))
    assert reasons == ["from a bot"] + ["group message does not mention the bot"] * 2


async def test_answer_groups_all(tmp_path: Path, fake: FakeFeishu) -> None:
    settings = feishu_settings(tmp_path, fake, answer_groups="all")
    async with running(settings, router()) as (gateway, _adapter):
        event = message_event("om_all", "hello everyone", chat_id="oc_g", chat_type="group")
        assert await post_event(gateway, event) == 200
        await gateway.drain()
    assert [m["content"] for m in fake.messages] == [{"text": "hello everyone"}]


# -- normalization -----------------------------------------------------------------------


@pytest.fixture
def adapter(tmp_path: Path, fake: FakeFeishu) -> FeishuAdapter:
    settings = feishu_settings(tmp_path, fake, answer_groups="all")
    assert settings.platforms.feishu is not None
    made = FeishuAdapter(settings.platforms.feishu)
    made.bot_open_id, made.bot_name = BOT_OPEN_ID, BOT_NAME
    return made


def _event(adapter: FeishuAdapter, payload: dict[str, Any]) -> Event:
    outcome = adapter.normalize(payload)
    assert isinstance(outcome, Event), outcome
    return outcome


def test_normalize_text_mentions_ids_threads_and_keys(adapter: FeishuAdapter) -> None:
    mentions = [mention("@_user_1", BOT_OPEN_ID, BOT_NAME), mention("@_user_2", "ou_ann", "Ann")]
    event = _event(
        adapter,
        message_event(
            "om_1",
            "@_user_1 ask @_user_2 and @_all",
            chat_id="oc_g",
            chat_type="group",
            mentions=mentions,
            thread_id="omt_9",
            root_id="om_root",
            parent_id="om_parent",
        ),
    )
    assert event.key == "fs:msg:om_1" and event.message_id == "om_1"
    assert event.text == f"@{BOT_NAME} ask @Ann and @all"
    assert (event.mentions, event.mentions_bot) == ([BOT_OPEN_ID, "ou_ann"], True)
    assert event.conversation.key == "feishu:oc_g:omt_9"  # the topic's id, not its root
    assert event.conversation.chat_type == "group" and event.reply_to == "om_parent"
    assert event.sender is not None and event.sender.id == "ou_user_1"
    assert {event.meta[k] for k in ("open_id", "union_id", "user_id", "thread_id")} == {
        "ou_user_1",
        "on_union_1",
        "u_1",
        "omt_9",
    }
    assert "token" not in json.dumps(event.raw)  # the verification token is not stored

    command = _event(adapter, message_event("om_2", "/weather  Berlin"))
    assert (command.kind, command.command, command.args) == (Kind.COMMAND, "weather", "Berlin")
    # In a group the command follows the mention, which shows the bot's name in that chat.
    renamed = [mention("@_user_1", BOT_OPEN_ID, "Helper Bot")]
    after = _event(adapter, message_event("om_4", "@_user_1 /help me", mentions=renamed))
    assert (after.text, after.command, after.args) == ("@Helper Bot /help me", "help", "me")
    other = [mention("@_user_1", "ou_ann", "Ann")]
    assert _event(adapter, message_event("om_5", "@_user_1 /help", mentions=other)).command is None
    dm = _event(adapter, message_event("om_3", "hi"))
    assert dm.conversation.chat_type == "dm" and dm.conversation.thread_id is None
    assert dm.kind is Kind.MESSAGE and not dm.mentions_bot


def test_normalize_post_files_and_other_events(adapter: FeishuAdapter) -> None:
    post = {
        "title": "Plan",
        "content": [
            [
                {"tag": "text", "text": "see "},
                {"tag": "a", "text": "the doc", "href": "https://example.com/doc"},
                {"tag": "at", "user_id": "@_user_1", "user_name": BOT_NAME},
            ],
            [{"tag": "img", "image_key": "img_1"}, {"tag": "text", "text": "done"}],
        ],
    }
    rich = _event(adapter, message_event("om_p", message_type="post", content=post))
    assert rich.text == f"Plan\nsee the doc (https://example.com/doc)@{BOT_NAME}\ndone"
    assert [(a.kind, a.file_id) for a in rich.attachments] == [("image", "img_1")]

    files = {
        "image": {"image_key": "img_2"},
        "file": {"file_key": "file_1", "file_name": "a.pdf"},
        "audio": {"file_key": "file_2", "duration": 3000},
    }
    for message_type, body in files.items():
        event = _event(
            adapter, message_event(f"om_{message_type}", message_type=message_type, content=body)
        )
        (attachment,) = event.attachments
        assert attachment.kind == message_type and attachment.file_id in (
            "img_2",
            "file_1",
            "file_2",
        )
    assert (
        _event(adapter, message_event("om_f", message_type="file", content=files["file"]))
        .attachments[0]
        .name
        == "a.pdf"
    )

    shared = _event(
        adapter, message_event("om_s", message_type="share_chat", content={"chat_id": "oc"})
    )
    assert shared.text == "[shared chat: oc]"  # described, not dropped (issue 15)
    unsupported = adapter.normalize(
        message_event("om_x", message_type="system", content={"template": "{from_user} joined"})
    )
    assert isinstance(unsupported, Dropped) and "system" in unsupported.reason
    added = {
        "schema": "2.0",
        "header": {"event_id": "ev_added", "event_type": "im.chat.member.bot.added_v1"},
        "event": {"chat_id": "oc_new"},
    }
    system = _event(adapter, added)
    assert (system.key, system.kind, system.conversation.chat_id) == (
        "fs:evt:ev_added",
        Kind.SYSTEM,
        "oc_new",
    )
    assert isinstance(adapter.normalize({"uuid": "v1", "event": {}}), Dropped)


def test_verify_checks_freshness_both_ways(adapter: FeishuAdapter) -> None:
    body, headers = signed_request(message_event("om_t", "t"), timestamp=1_000_000)
    assert isinstance(adapter.verify(body, headers, now=1_000_000 + 299), dict)
    assert isinstance(adapter.verify(body, headers, now=1_000_000 - 299), dict)
    for now in (1_000_000 + 301, 1_000_000 - 301):
        outcome = adapter.verify(body, headers, now=now)
        assert isinstance(outcome, Rejected) and outcome.status == 401
    for stamp in ("nan", "inf", "soon"):
        # A signature over a bogus timestamp is still not a fresh request.
        signature = hashlib.sha256((stamp + "n" + ENCRYPT_KEY).encode() + body).hexdigest()
        bogus = {**headers, "X-Lark-Request-Timestamp": stamp, "X-Lark-Request-Nonce": "n"}
        outcome = adapter.verify(body, {**bogus, "X-Lark-Signature": signature})
        assert outcome == Rejected(401, "timestamp is not a number")


async def test_a_store_failure_is_503_not_500(tmp_path: Path, fake: FakeFeishu) -> None:
    async with running(feishu_settings(tmp_path, fake), router()) as (gateway, _adapter):

        async def broken_accept(events: Any, cursors: Any = None) -> list[bool]:
            raise OSError("disk I/O error")

        gateway.inbox.accept = broken_accept  # type: ignore[method-assign]
        assert await post_event(gateway, message_event("om_disk", "disk")) == 503
    assert inbox_rows(tmp_path) == []


def test_requests_carry_the_uuid_and_choose_create_or_reply(adapter: FeishuAdapter) -> None:
    target = Target(platform="feishu", chat_id="oc_1")
    html = OutMessage(key="k#0", target=target, text="<b>hi</b>", format="html")
    path, query, body = adapter.request_for(html)
    assert (path, query) == ("/open-apis/im/v1/messages", {"receive_id_type": "chat_id"})
    assert body["receive_id"] == "oc_1" and body["uuid"] == send_uuid("k#0")
    assert (body["msg_type"], json.loads(body["content"])) == ("text", {"text": "hi"})
    threaded = Target(platform="feishu", chat_id="oc_1", thread_id="om_root")
    path, _query, body = adapter.request_for(OutMessage(key="k#1", target=threaded, text="x"))
    assert path == "/open-apis/im/v1/messages/om_root/reply" and body["reply_in_thread"] is True
    assert adapter.text_length("你好") == 6 and adapter.limits(target) == []


# -- long connection ---------------------------------------------------------------------


@pytest.mark.slow
async def test_long_connection_acks_only_after_the_commit(tmp_path: Path, fake: FakeFeishu) -> None:
    settings = feishu_settings(
        tmp_path, fake, mode="websocket", verification_token=None, encrypt_key=None
    )
    async with running(settings, router()) as (gateway, adapter):
        await fake.until(lambda: adapter.connected)  # re-checked when the SDK's ping arrives
        real_accept = gateway.inbox.accept
        entered, release = asyncio.Event(), asyncio.Event()

        async def held_accept(events: Any, cursors: Any = None) -> list[bool]:
            entered.set()
            await release.wait()
            return await real_accept(events, cursors)

        gateway.inbox.accept = held_accept  # type: ignore[method-assign]
        fake.ack_probe = lambda _frame: inbox_rows(tmp_path)
        frame = await asyncio.to_thread(
            fake.push_event, message_event("om_ws", "over ws", token="")
        )
        await asyncio.wait_for(entered.wait(), 10)
        # The commit is held: the SDK must not have acked (it would ack at once otherwise).
        assert not await fake.holds_within(lambda: bool(fake.acks), timeout=0.5)
        release.set()
        await fake.until(lambda: bool(fake.acks))
        (ack,) = fake.acks
        assert (ack.message_id, ack.code) == (frame, 200)
        assert [key for key, _status in ack.probe] == ["fs:msg:om_ws"]  # in the store at ack time

        gateway.inbox.accept = real_accept  # type: ignore[method-assign]
        fake.push_event(message_event("om_ws", "over ws", token=""))  # a redelivery
        await fake.until(lambda: len(fake.acks) == 2 and len(fake.messages) == 1)
        await gateway.drain()
    assert [m["content"] for m in fake.messages] == [{"text": "over ws"}]
    assert inbox_rows(tmp_path) == [("fs:msg:om_ws", "done")]
    # A clean stop: the socket is closed and the SDK's thread is gone.
    await fake.until(lambda: not fake.ws_open)
    assert not [t for t in threading.enumerate() if t.name == "feishu-ws"]
    assert not adapter.connected


async def test_long_connection_refuses_while_stopping(tmp_path: Path, fake: FakeFeishu) -> None:
    settings = feishu_settings(
        tmp_path, fake, mode="websocket", verification_token=None, encrypt_key=None
    )
    async with running(settings, router()) as (_gateway, adapter):
        await fake.until(lambda: adapter.connected)
        adapter._inbox = None  # what stop() does first: nothing more may be acked as taken
        fake.push_event(message_event("om_late", "late", token=""))
        await fake.until(lambda: bool(fake.acks))
    assert fake.acks[0].code == 500  # so Feishu delivers it again later
    assert inbox_rows(tmp_path) == []


async def test_a_refused_long_connection_is_reported_by_readiness(
    tmp_path: Path, fake: FakeFeishu
) -> None:
    fake.refuse_connections = True
    settings = feishu_settings(
        tmp_path, fake, mode="websocket", verification_token=None, encrypt_key=None
    )
    async with running(settings, router()) as (gateway, adapter):
        thread = adapter._ws_thread
        assert thread is not None
        await asyncio.to_thread(thread.join, 10)  # a refusal is final: the SDK gives up
        assert not adapter.connected
        assert adapter.problem is not None and "long connection failed" in adapter.problem
        (reason,) = await gateway.readiness()
        assert reason.startswith("feishu not connected: long connection failed: ClientException")


# -- config, startup, import cost -----------------------------------------------------------


def test_config_requires_a_token_for_webhooks_and_an_https_domain(tmp_path: Path) -> None:
    base = {"app_id": APP_ID, "app_secret": APP_SECRET}
    with pytest.raises(ConfigError, match=r"platforms\.feishu.*verification_token"):
        make_settings(tmp_path, platforms={"feishu": {**base, "mode": "webhook"}})
    with pytest.raises(ConfigError, match=r"platforms\.feishu\.domain"):
        make_settings(tmp_path, platforms={"feishu": {**base, "domain": "http://open.feishu.cn"}})
    lark = make_settings(tmp_path, platforms={"feishu": {**base, "domain": "lark"}})
    assert lark.platforms.feishu is not None
    assert lark.platforms.feishu.domain == "https://open.larksuite.com"
    assert lark.platforms.feishu.mode == "websocket"
    assert APP_SECRET not in json.dumps(lark.masked()) and APP_SECRET in lark.secrets()


async def test_a_rejected_app_secret_stops_the_start(tmp_path: Path, fake: FakeFeishu) -> None:
    from lark_oapi.core.token.manager import TokenManager

    # lark-oapi caches tenant tokens per app_id for the whole process: forget the one
    # earlier tests fetched with the right secret.
    TokenManager.cache.set(f"self_tenant_token:{APP_ID}", "", 0)
    settings = feishu_settings(tmp_path, fake, app_secret="not-the-secret")
    gateway = Gateway(settings, build_adapters(settings), router=router())
    with pytest.raises(GatewayError, match="app_id/app_secret were rejected"):
        await gateway.start()
    await gateway.stop()


@pytest.mark.slow
def test_lark_oapi_is_imported_only_when_feishu_is_enabled(
    tmp_path: Path, fake: FakeFeishu
) -> None:
    # One fresh interpreter: `tether check` without Feishu, then with it.
    probe = (
        "import sys\n"
        "from gateway.cli import main\n"
        "for config in sys.argv[1:]:\n"
        "    code = main(['check', '-c', config])\n"
        "    print('LARK' if 'lark_oapi' in sys.modules else 'NO-LARK', code)\n"
    )
    without = write_config(tmp_path)
    enabled = tmp_path / "feishu.yaml"
    enabled.write_text(json.dumps({"platforms": {"feishu": feishu_section(fake)}}))
    done = subprocess.run(
        [sys.executable, "-c", probe, str(without), str(enabled)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=subprocess_env(),
        timeout=60,
    )
    verdicts = [line for line in done.stdout.splitlines() if "LARK" in line]
    assert verdicts == ["NO-LARK 0", "LARK 0"], done.stderr[-2000:]
