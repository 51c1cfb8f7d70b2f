"""Streamed replies: the ``llm`` agent's answer is shown while the model writes it, by
editing one preview message within the platform's edit rate, and finished by the
checkpointed outbox row editing that same message — also across a SIGKILL mid-stream.

The fake model writes at a set pace (tether/testing/stream.py); the properties are
checked on what the fake platforms recorded (each call's arrival time, each message's
text as shown), never on how fast anything ran.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import signal
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import structlog

from tests.fakes.discord_api import DM_CHANNEL_ID, FakeDiscord
from tests.fakes.feishu_api import (
    APP_ID,
    APP_SECRET,
    ENCRYPT_KEY,
    VERIFICATION_TOKEN,
    FakeFeishu,
    message_event,
    signed_request,
)
from tests.fakes.telegram_api import FakeTelegram
from tests.support.config import db_rows, make_settings, write_config
from tests.support.gateway import running
from tests.support.processes import spawn_run, subprocess_env
from tether.adapters.base import Sent
from tether.adapters.discord.send import send_nonce
from tether.adapters.loopback import LoopbackAdapter
from tether.adapters.telegram.markdown import readable, shown_length
from tether.events import OutMessage
from tether.gateway.agent.streaming import PREVIEW_STEP
from tether.gateway.app import Gateway
from tether.gateway.assembly import build_adapters
from tether.testing.model import FakeModel
from tether.testing.stream import Pacing
from tether.text import split_text

ANSWER = (
    "Streaming works like this. The model writes, the preview follows, and the final"
    " edit holds **every word** of the answer, down to the last one: done."
)
SHOWN = readable(ANSWER)


@pytest.fixture
def model(model: FakeModel) -> FakeModel:
    """The shared fake (model, tests/fixtures.py), as this module uses it."""
    model.reply = lambda body: ANSWER
    return model


def llm_section(model: FakeModel) -> dict[str, Any]:
    return model.section(timeout=10)


def telegram_sections(telegram: FakeTelegram, model: FakeModel, **agent: Any) -> dict[str, Any]:
    platform = {"token": telegram.token, "base_url": telegram.base_url, "poll_timeout": 1,
                "rate_limits": False, "typing": False}  # fmt: skip
    return {
        "platforms": {"telegram": platform},
        "llm": llm_section(model),
        "agent": {"handler": "llm", **agent},
    }


async def run_gateway(settings: Any) -> Gateway:
    gateway = Gateway(settings, build_adapters(settings))
    await gateway.start()
    return gateway


def message_calls(telegram: FakeTelegram, chat: int) -> list[float]:
    """Arrival times of every sendMessage and editMessageText for ``chat``, in order."""
    return [
        call.at
        for call in telegram.calls
        if call.method in ("sendMessage", "editMessageText")
        and call.params.get("chat_id") == chat
        and call.status == 200
    ]


@pytest.mark.slow
async def test_a_streamed_telegram_reply_edits_one_message_at_most_once_a_second(
    tmp_path: Path, telegram: FakeTelegram, model: FakeModel
) -> None:
    model.pacing = Pacing(pieces=16, gap=0.35)  # ~5 s of writing
    settings = make_settings(tmp_path, **telegram_sections(telegram, model))
    gateway = await run_gateway(settings)
    try:
        telegram.push(message=telegram.message(42, "how does streaming work?"))
        await telegram.wait_for(lambda: telegram.texts.in_chat(42) == [SHOWN], timeout=30)
        await gateway.drain()
    finally:
        await gateway.stop()

    [request] = model.requests
    assert request.body["stream"] is True
    assert request.body["stream_options"] == {"include_usage": True}
    # One message in the chat, showing the whole answer; several edits on the way.
    assert telegram.texts.in_chat(42) == [SHOWN]
    assert len(telegram.sent) == 1
    edits = telegram.texts.edits
    assert len(edits) >= 2
    assert all(SHOWN.startswith(edit.text.rstrip()) for edit in edits[:-1])
    assert edits[-1].text == SHOWN
    # The platform's edit rate: the preview and each edit at least a second apart.
    times = message_calls(telegram, 42)
    gaps = [later - earlier for earlier, later in itertools.pairwise(times)]
    assert gaps and min(gaps) >= 1.0 - 1e-3, gaps
    # The answer is one outbox row: the edit of the preview, and a step holding its id.
    [(key, meta)] = db_rows(tmp_path, "SELECT key, json_extract(payload, '$.meta') FROM outbox")
    assert json.loads(meta)["edit_of"] == str(edits[-1].message_id)
    [(saved,)] = db_rows(tmp_path, "SELECT result FROM steps WHERE name = ?", PREVIEW_STEP)
    assert json.loads(saved) == str(edits[-1].message_id)
    assert key.endswith("#0")


async def test_streaming_false_sends_one_message_without_edits(
    tmp_path: Path, telegram: FakeTelegram, model: FakeModel
) -> None:
    model.pacing = Pacing(pieces=8, gap=0.3)
    settings = make_settings(tmp_path, **telegram_sections(telegram, model, streaming=False))
    gateway = await run_gateway(settings)
    try:
        telegram.push(message=telegram.message(42, "no streaming, please"))
        await telegram.wait_for(lambda: bool(telegram.sent), timeout=30)
        await gateway.drain()
    finally:
        await gateway.stop()
    assert "stream" not in model.requests[0].body
    assert telegram.texts.in_chat(42) == [SHOWN]
    assert len(telegram.sent) == 1 and telegram.texts.edits == []
    assert telegram.sent[0]["parse_mode"] == "MarkdownV2"  # model Markdown, converted


async def test_a_quick_answer_is_one_message_without_a_preview(
    tmp_path: Path, telegram: FakeTelegram, model: FakeModel
) -> None:
    settings = make_settings(tmp_path, **telegram_sections(telegram, model))
    gateway = await run_gateway(settings)
    try:
        telegram.push(message=telegram.message(42, "quick one"))
        await telegram.wait_for(lambda: bool(telegram.sent), timeout=30)
        await gateway.drain()
    finally:
        await gateway.stop()
    assert model.requests[0].body["stream"] is True
    assert telegram.texts.in_chat(42) == [SHOWN]
    assert telegram.texts.edits == []


@pytest.mark.slow
async def test_a_refused_preview_leaves_the_answer_to_one_plain_send(
    tmp_path: Path, telegram: FakeTelegram, model: FakeModel
) -> None:
    model.pacing = Pacing(pieces=10, gap=0.3)
    telegram.fail_next("sendMessage", 500, "Internal Server Error")  # the preview
    settings = make_settings(tmp_path, **telegram_sections(telegram, model))
    gateway = await run_gateway(settings)
    try:
        with structlog.testing.capture_logs() as logs:
            telegram.push(message=telegram.message(42, "how does streaming work?"))
            await telegram.wait_for(lambda: telegram.texts.in_chat(42) == [SHOWN], timeout=30)
            await gateway.drain()
    finally:
        await gateway.stop()
    [failed] = [entry for entry in logs if entry["event"] == "stream.failed"]
    assert failed["preview"] is None
    assert telegram.texts.edits == []
    assert db_rows(tmp_path, "SELECT count(*) FROM steps WHERE name = ?", PREVIEW_STEP) == [(0,)]


@pytest.mark.slow
async def test_a_rate_limited_edit_waits_it_out_and_streaming_goes_on(
    tmp_path: Path, telegram: FakeTelegram, model: FakeModel
) -> None:
    model.pacing = Pacing(pieces=16, gap=0.35)
    telegram.fail_next("editMessageText", 429, "Too Many Requests: retry after 1", retry_after=1)
    settings = make_settings(tmp_path, **telegram_sections(telegram, model))
    gateway = await run_gateway(settings)
    try:
        with structlog.testing.capture_logs() as logs:
            telegram.push(message=telegram.message(42, "how does streaming work?"))
            await telegram.wait_for(lambda: telegram.texts.in_chat(42) == [SHOWN], timeout=30)
            await gateway.drain()
    finally:
        await gateway.stop()
    events = [entry["event"] for entry in logs]
    assert events.count("stream.throttled") == 1 and "stream.failed" not in events
    [refused] = [c for c in telegram.calls_to("editMessageText") if c.status == 429]
    after = [edit for edit in telegram.texts.edits if edit.at > refused.at]
    assert after and after[0].at - refused.at >= 1.0 - 1e-3  # retry_after, waited out
    assert len(telegram.sent) == 1


@pytest.mark.slow
async def test_an_answer_past_the_limit_streams_its_first_part_and_sends_the_rest(
    tmp_path: Path, telegram: FakeTelegram
) -> None:
    long = "\n".join(f"Line {n}: the model keeps writing, and writing more." for n in range(110))
    parts = [readable(part) for part in split_text(long, 4096, shown_length)]
    assert len(parts) == 2
    model = FakeModel(reply=lambda body: long, pacing=Pacing(pieces=12, gap=0.3))
    await model.start()
    settings = make_settings(tmp_path, **telegram_sections(telegram, model))
    gateway = await run_gateway(settings)
    try:
        telegram.push(message=telegram.message(42, "write a lot"))
        await telegram.wait_for(lambda: telegram.texts.in_chat(42) == parts, timeout=30)
        await gateway.drain()
    finally:
        await gateway.stop()
        await model.close()
    # The preview became the first part (never more than Telegram takes); the second
    # part is a new message after it.
    first, second = telegram.sent
    first_id = telegram.texts.edits[-1].message_id
    assert {edit.message_id for edit in telegram.texts.edits} == {first_id}
    assert telegram.texts.shown[42, first_id] == parts[0]
    assert "reply_parameters" in first and "reply_parameters" not in second
    assert db_rows(tmp_path, "SELECT status FROM outbox") == [("sent",), ("sent",)]


# -- a preview deleted mid-stream: the answer still arrives, once ----------------------------


@pytest.mark.slow
async def test_a_preview_deleted_mid_stream_leaves_the_answer_as_one_new_telegram_message(
    tmp_path: Path, telegram: FakeTelegram, model: FakeModel
) -> None:
    model.pacing = Pacing(pieces=16, gap=0.3)
    settings = make_settings(tmp_path, **telegram_sections(telegram, model))
    gateway = await run_gateway(settings)
    try:
        with structlog.testing.capture_logs() as logs:
            telegram.push(message=telegram.message(42, "how does streaming work?"))
            await telegram.wait_for(lambda: len(telegram.texts.edits) >= 1, timeout=30)
            [preview] = [key for key in telegram.texts.shown if key[0] == 42]
            del telegram.texts.shown[preview]  # the person deletes it
            await telegram.wait_for(lambda: telegram.texts.in_chat(42) == [SHOWN], timeout=30)
            await gateway.drain()
    finally:
        await gateway.stop()
    # The preview, then the answer as a message of its own; nothing else was posted.
    assert telegram.texts.in_chat(42) == [SHOWN]
    assert len([c for c in telegram.calls_to("sendMessage") if c.status == 200]) == 2
    [(answer_id,)] = [key[1:] for key in telegram.texts.shown]
    assert answer_id != preview[1]
    [refused] = [e for e in logs if e["event"] == "outbox.edit_refused"]
    assert refused["edit_of"] == str(preview[1])
    [(status, platform_id)] = db_rows(tmp_path, "SELECT status, platform_id FROM outbox")
    assert (status, platform_id) == ("sent", str(answer_id))


@pytest.mark.slow
async def test_a_preview_deleted_mid_stream_leaves_the_answer_as_one_new_discord_message(
    tmp_path: Path, model: FakeModel
) -> None:
    model.pacing = Pacing(pieces=12, gap=0.35)
    discord = await FakeDiscord().start()
    platform = {"token": discord.token, "api_base": discord.api_base,
                "gateway_url": discord.gateway_url}  # fmt: skip
    settings = make_settings(
        tmp_path, platforms={"discord": platform}, llm=llm_section(model), agent={"handler": "llm"}
    )
    gateway = await run_gateway(settings)
    try:
        await discord.wait_for(lambda: discord.connected >= 1)
        await discord.say(DM_CHANNEL_ID, "how does streaming work?")
        await discord.wait_for(lambda: len(discord.message_edits) >= 1, timeout=30)
        [preview] = discord.sent
        discord.sent.remove(preview)  # deleted: Discord answers its edits 404 Unknown Message
        discord.history[DM_CHANNEL_ID].remove(preview)
        await discord.wait_for(lambda: [m["content"] for m in discord.sent] == [ANSWER], timeout=30)
        await gateway.drain()
    finally:
        await gateway.stop()
        await discord.stop()
    [answer] = discord.sent
    assert answer["id"] != preview["id"] and len(discord.posts) == 2
    [(key, status)] = db_rows(tmp_path, "SELECT key, status FROM outbox")
    assert status == "sent" and answer["nonce"] == send_nonce(key)  # a resend is the same


# -- Discord and Feishu -------------------------------------------------------------------


@pytest.mark.slow
async def test_a_streamed_discord_reply_edits_its_preview_into_the_answer(
    tmp_path: Path, model: FakeModel
) -> None:
    model.pacing = Pacing(pieces=12, gap=0.35)
    discord = await FakeDiscord().start()
    platform = {"token": discord.token, "api_base": discord.api_base,
                "gateway_url": discord.gateway_url}  # fmt: skip
    settings = make_settings(
        tmp_path, platforms={"discord": platform}, llm=llm_section(model), agent={"handler": "llm"}
    )
    gateway = await run_gateway(settings)
    try:
        await discord.wait_for(lambda: discord.connected >= 1)
        asked = await discord.say(DM_CHANNEL_ID, "how does streaming work?")
        await discord.wait_for(lambda: [m["content"] for m in discord.sent] == [ANSWER], timeout=30)
        await gateway.drain()
    finally:
        await gateway.stop()
        await discord.stop()
    # One message: the preview, quoting the question, edited until it held the answer
    # (Discord renders the model's Markdown itself).
    [reply] = discord.sent
    assert reply["content"] == ANSWER
    assert str(reply["message_reference"]["message_id"]) == asked["id"]
    edits = [edit for edit in discord.message_edits if edit[0] == reply["id"]]
    assert len(edits) >= 2 and edits[-1][1] == ANSWER
    times = [edit[2] for edit in edits]
    assert min(b - a for a, b in itertools.pairwise(times)) >= 1.0 - 1e-3


@pytest.mark.slow
async def test_a_streamed_feishu_reply_edits_its_post_within_feishus_edit_cap(
    tmp_path: Path, model: FakeModel
) -> None:
    model.pacing = Pacing(pieces=12, gap=0.35)
    feishu = FakeFeishu().start()
    platform = {"app_id": APP_ID, "app_secret": APP_SECRET, "domain": feishu.domain,
                "mode": "webhook", "verification_token": VERIFICATION_TOKEN,
                "encrypt_key": ENCRYPT_KEY, "rate_limits": False}  # fmt: skip
    settings = make_settings(
        tmp_path, http={"enabled": True, "port": 0}, platforms={"feishu": platform},
        llm=llm_section(model), agent={"handler": "llm"},
    )  # fmt: skip
    gateway = await run_gateway(settings)

    def shown() -> list[str]:
        return [m["content"]["zh_cn"]["content"][0][0]["text"] for m in feishu.messages]

    try:
        assert gateway.http is not None
        body, headers = signed_request(message_event("om_q1", "how does streaming work?"))
        url = f"http://127.0.0.1:{gateway.http.port}/feishu/webhook"
        async with (
            aiohttp.ClientSession() as session,
            session.post(url, data=body, headers=headers) as response,
        ):
            assert response.status == 200
        await feishu.until(lambda: len(feishu.messages) == 1 and shown() == [ANSWER], 30)
        await gateway.drain()
    finally:
        await gateway.stop()
        feishu.stop()
    [reply] = feishu.messages
    assert reply["msg_type"] == "post" and reply["parent_id"] == "om_q1"
    edits = [edit for edit in feishu.edits if edit[0] == reply["message_id"]]
    assert 2 <= len(edits) <= 20
    times = [edit[2] for edit in edits]
    assert min(b - a for a, b in itertools.pairwise(times)) >= 1.5 - 1e-3


# -- Done when: SIGKILL mid-stream, one message with the full text ------------------------


@pytest.mark.crash
@pytest.mark.slow
async def test_sigkill_mid_stream_ends_with_one_message_holding_the_full_text(
    tmp_path: Path, telegram: FakeTelegram, model: FakeModel
) -> None:
    pacing = Pacing(pieces=16, gap=0.25, hold_after=10)
    model.pacing = pacing
    sections = telegram_sections(telegram, model)
    config = write_config(tmp_path, **sections)
    log = tmp_path / "tether.log"
    first = await spawn_run(config, log, subprocess_env())
    try:
        telegram.push(message=telegram.message(42, "how does streaming work?"))
        await asyncio.wait_for(pacing.held.wait(), 30)
        # The preview is out and has been edited (so its id is saved): kill mid-stream.
        await telegram.wait_for(lambda: len(telegram.texts.edits) >= 1, timeout=30)
        assert telegram.texts.in_chat(42) != [SHOWN]
        first.send_signal(signal.SIGKILL)
        await first.wait()
    finally:
        if first.returncode is None:
            first.kill()
            await first.wait()
    [(status,)] = db_rows(tmp_path, "SELECT status FROM inbox")
    assert status == "running"

    pacing.hold_after = None
    pacing.release()  # the killed process's stream ends into a closed connection
    second = await spawn_run(config, log, subprocess_env())
    try:
        await telegram.wait_for(lambda: telegram.texts.in_chat(42) == [SHOWN], timeout=60)
        await telegram.wait_for(
            lambda: db_rows(tmp_path, "SELECT status FROM outbox") == [("sent",)], timeout=30
        )
    finally:
        second.send_signal(signal.SIGTERM)
        await second.wait()
    # One message in the chat, the full answer; no second message beside a stale preview.
    assert telegram.texts.in_chat(42) == [SHOWN]
    assert len([c for c in telegram.calls_to("sendMessage") if c.status == 200]) == 1
    assert len(model.requests) == 2 and all(r.body.get("stream") for r in model.requests)
    assert db_rows(tmp_path, "SELECT status, attempts FROM inbox") == [("done", 2)]


# -- the platform's edit cap ---------------------------------------------------------------


class Editable(LoopbackAdapter):
    """A platform that allows a few quick edits per message (like Feishu's 20, smaller)."""

    can_edit, edit_interval, edit_limit = True, 0.05, 6

    def __init__(self) -> None:
        super().__init__()
        self.edits: list[tuple[str, str]] = []

    async def edit(self, message: OutMessage, platform_id: str) -> Sent:
        assert len([e for e in self.edits if e[0] == platform_id]) < self.edit_limit
        self.edits.append((platform_id, message.text))
        return Sent(platform_id=platform_id)


@pytest.mark.slow
async def test_a_preview_keeps_within_the_platforms_edit_cap_and_leaves_room_for_the_answer(
    tmp_path: Path, model: FakeModel
) -> None:
    model.pacing = Pacing(pieces=60, gap=0.04)  # many pieces, far more than 6 edits' worth
    settings = make_settings(tmp_path, llm=llm_section(model), agent={"handler": "llm"})
    adapter = Editable()
    async with running(settings, adapter=adapter) as (gateway, loop):
        await loop.say("how does streaming work?")
        await gateway.drain()
        await gateway.outbox.flush(10)
    [preview] = adapter.sent
    assert preview.message.key.endswith("#preview")
    assert [edit[0] for edit in adapter.edits] == [preview.platform_id] * len(adapter.edits)
    assert 2 <= len(adapter.edits) <= adapter.edit_limit - 1  # previews, then the answer
    assert adapter.edits[-1][1] == ANSWER
