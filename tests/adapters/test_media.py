"""Files in and out (issue 17), in process: the real Gateway and each platform's real
client against the fake platform servers over HTTP on 127.0.0.1.

A reply's files become outbox rows (:func:`tether.gateway.core.media.parts`) whose bytes were
stored in the store's blobs before the checkpoint; each platform gets them through its
own upload API; ``ctx.download`` fetches what a person sent through the platform's file
API, within a cap. Crashes are in tests/adapters/test_media_crash.py, the ``llm`` agent's use of
images in tests/gateway/agent/test_media_llm.py.
"""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.fakes.discord_api import DM_CHANNEL_ID, FakeDiscord
from tests.fakes.discord_media import FakeCdn
from tests.fakes.feishu_api import APP_ID, APP_SECRET, message_event
from tests.fakes.feishu_media import MediaFeishu
from tests.fakes.telegram_media import MediaTelegram
from tests.plugins import media as plugin
from tests.support.config import db_rows, make_settings
from tests.support.gateway import running
from tether.adapters.base import Adapter, Sent
from tether.adapters.discord import DiscordAdapter
from tether.adapters.feishu import FeishuAdapter
from tether.adapters.loopback import LoopbackAdapter
from tether.adapters.telegram import TelegramAdapter
from tether.buttons import Button
from tether.config import Settings
from tether.config.schema import MediaConfig
from tether.errors import Fatal, SendFatal
from tether.events import OutMessage, Target
from tether.files import KINDS, OutFile
from tether.gateway.app import Gateway
from tether.gateway.assembly import build_adapters
from tether.gateway.core.media import File, parts, store_files
from tether.gateway.handler.context import Context
from tether.gateway.handler.routing import Router
from tether.memory.inmemory import MemoryStore
from tether.text import utf16_len


def router() -> Router:
    root = Router("root")
    root.include(plugin.router)
    return root


def local_files(tmp_path: Path) -> dict[str, Any]:
    """``media:`` letting the plugin's document (a Path under TETHER_TEST_DIR) be read."""
    return {"allow_paths": [str(tmp_path)]}


# -- Telegram -------------------------------------------------------------------------


@pytest.fixture
async def telegram() -> AsyncIterator[MediaTelegram]:
    fake = MediaTelegram()
    await fake.start()
    try:
        yield fake
    finally:
        fake.release()
        await fake.stop()


def telegram_settings(tmp_path: Path, fake: MediaTelegram) -> Settings:
    section = {
        "token": fake.token,
        "base_url": fake.base_url,
        "poll_timeout": 1,
        "rate_limits": False,
    }
    return make_settings(tmp_path, platforms={"telegram": section}, media=local_files(tmp_path))


async def test_telegram_sends_a_photo_a_document_and_a_voice_note(
    tmp_path: Path, telegram: MediaTelegram, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TETHER_TEST_DIR", str(tmp_path))
    async with running(telegram_settings(tmp_path, telegram), router()):
        sent = telegram.push(message=telegram.message(42, "files"))
        await telegram.wait_for(lambda: len(telegram.media) >= 3)
    photo, document, voice = telegram.media
    assert [m["method"] for m in telegram.media] == ["sendPhoto", "sendDocument", "sendVoice"]
    assert (photo["data"], photo["filename"], photo["caption"]) == (
        plugin.PHOTO,
        "chart.png",
        plugin.CAPTION,
    )
    assert photo["reply_parameters"]["message_id"] == sent["message"]["message_id"]
    assert (document["data"], document["filename"], document["caption"]) == (
        plugin.DOCUMENT,
        "report.pdf",
        "",
    )
    assert (voice["data"], voice["filename"]) == (plugin.VOICE, "note.ogg")
    assert document["reply_parameters"] is None and voice["reply_parameters"] is None
    assert telegram.sent == []  # no text message beside them: the text was the caption
    # Three rows, sent; the bytes are in the store once each, named by their sha256.
    rows = db_rows(tmp_path, "SELECT key, status FROM outbox ORDER BY seq")
    assert [status for _key, status in rows] == ["sent"] * 3
    blobs = db_rows(tmp_path, "SELECT sha256, size FROM blobs ORDER BY size")
    assert blobs == sorted(
        [
            (hashlib.sha256(d).hexdigest(), len(d))
            for d in (plugin.PHOTO, plugin.DOCUMENT, plugin.VOICE)
        ],
        key=lambda row: row[1],
    )


async def test_telegram_sends_two_photos_as_one_album(
    tmp_path: Path, telegram: MediaTelegram
) -> None:
    async with running(telegram_settings(tmp_path, telegram), router()):
        telegram.push(message=telegram.message(42, "album"))
        await telegram.wait_for(lambda: len(telegram.media) >= 2)
    assert [(m["method"], m["kind"], m["filename"]) for m in telegram.media] == [
        ("sendMediaGroup", "photo", "a.png"),
        ("sendMediaGroup", "photo", "b.png"),
    ]
    assert [m["caption"] for m in telegram.media] == ["two photos", ""]
    assert len(telegram.calls_to("sendMediaGroup")) == 1  # one request, one outbox row
    assert db_rows(tmp_path, "SELECT count(*) FROM outbox") == [(1,)]


@pytest.mark.slow
async def test_telegram_sends_a_photo_over_10_mb_as_a_document(
    tmp_path: Path, telegram: MediaTelegram
) -> None:
    big = b"\xff\xd8" + bytes(10 * 1024 * 1024)
    handlers = Router("big")

    @handlers.text(r"^big$")
    async def _big(ctx: Context) -> None:
        await ctx.reply("large", files=[File(big, name="big.jpg")])

    settings = telegram_settings(tmp_path, telegram)
    gateway = Gateway(settings, build_adapters(settings), router=handlers)
    await gateway.start()
    try:
        telegram.push(message=telegram.message(42, "big"))
        await telegram.wait_for(lambda: len(telegram.media) >= 1, timeout=30)
    finally:
        await gateway.stop()
    (sent,) = telegram.media
    assert (sent["method"], sent["filename"], len(sent["data"])) == (
        "sendDocument",
        "big.jpg",
        len(big),
    )


#: Each platform's upload limit is its adapter's (the core asks it, never a table).
DISCORD_CAP = DiscordAdapter.upload_limit
TELEGRAM_CAP = TelegramAdapter.upload_limit


async def test_a_file_over_the_platform_cap_fails_at_reply_naming_it() -> None:
    assert (DISCORD_CAP, TELEGRAM_CAP, FeishuAdapter.upload_limit) == (10 << 20, 50 << 20, 30 << 20)
    store = MemoryStore()
    eleven_mb = bytes(11 * 1024 * 1024)
    with pytest.raises(
        Fatal, match=r"files\[0\]: 11534336 bytes, over the cap of 10485760 for discord"
    ):
        await store_files(
            store, [File(eleven_mb, name="a.bin")], cap=DISCORD_CAP, platform="discord"
        )
    # An agent's account is its platform's adapter, with that platform's limit.
    (stored,) = await store_files(
        store, [File(eleven_mb, name="a.bin")], cap=TELEGRAM_CAP, platform="telegram@bot"
    )
    assert stored.size == len(eleven_mb) and stored.kind == "document"
    with pytest.raises(Fatal, match=r"files\[1\]: expected a path, bytes, an http\(s\) URL"):
        await store_files(store, [b"ok", 42])  # type: ignore[list-item]
    cdn = await FakeCdn().start()
    try:
        url = cdn.add(eleven_mb, "big.bin")
        media = MediaConfig(allow_hosts=[f"127.0.0.1:{cdn.port}"])  # the fake CDN is on loopback
        with pytest.raises(Fatal, match=r"'big.bin': the file is 11534336 bytes, over the"):
            await store_files(store, [url], cap=DISCORD_CAP, platform="discord", media=media)
    finally:
        await cdn.stop()


async def test_telegram_a_markdown_caption_renders_and_a_refused_one_goes_plain(
    tmp_path: Path, telegram: MediaTelegram
) -> None:
    handlers = Router("captions")

    @handlers.text(r"^md$")
    async def _md(ctx: Context) -> None:
        await ctx.reply("**Chart** for [the team](https://example.com)", format="markdown",
                        files=[File(plugin.PHOTO, name="c.png")])  # fmt: skip

    @handlers.text(r"^broken$")
    async def _broken(ctx: Context) -> None:
        await ctx.reply("<b>unclosed", format="html", files=[File(plugin.PHOTO, name="d.png")])

    settings = telegram_settings(tmp_path, telegram)
    telegram.fail_next("sendPhoto", 400, "Bad Request: can't parse entities: unclosed tag")
    gateway = Gateway(settings, build_adapters(settings), router=handlers)
    await gateway.start()
    try:
        telegram.push(message=telegram.message(41, "broken"))
        await telegram.wait_for(lambda: len(telegram.media) >= 1)
        telegram.push(message=telegram.message(42, "md"))
        await telegram.wait_for(lambda: len(telegram.media) >= 2)
    finally:
        await gateway.stop()
    broken, markdown = telegram.media
    assert (broken["caption"], broken["parse_mode"]) == ("unclosed", None)
    assert markdown["parse_mode"] == "MarkdownV2"
    assert markdown["caption"] == "Chart for the team"  # as shown: the entities parsed


def _photo_message(fake: MediaTelegram, file_id: str, size: int, text: str = "") -> dict[str, Any]:
    message = fake.message(42, "")
    del message["text"]
    message["photo"] = [
        {"file_id": file_id, "file_unique_id": f"u{file_id}", "width": 1, "height": 1,
         "file_size": size},
    ]  # fmt: skip
    if text:
        message["caption"] = text
    return message


async def test_telegram_download_fetches_the_file_and_enforces_the_cap(
    tmp_path: Path, telegram: MediaTelegram
) -> None:
    file_id = telegram.add_file(plugin.PHOTO, path="photos/file_7.jpg")
    async with running(telegram_settings(tmp_path, telegram), router()):
        telegram.push(message=_photo_message(telegram, file_id, len(plugin.PHOTO)))
        telegram.push(message=_photo_message(telegram, file_id, len(plugin.PHOTO), "max:10"))
        await telegram.wait_for(lambda: len(telegram.sent) >= 2)
    texts = sorted(str(m["text"]) for m in telegram.sent)
    sha = hashlib.sha256(plugin.PHOTO).hexdigest()
    assert texts[1] == f"got photo {len(plugin.PHOTO)} bytes {sha}"
    assert texts[0] == (
        f"cannot fetch: the file is {len(plugin.PHOTO)} bytes, over the download cap of 10 bytes"
    )
    assert telegram.downloads == ["photos/file_7.jpg"]  # the capped one was never fetched


# -- Discord --------------------------------------------------------------------------


def discord_settings(tmp_path: Path, fake: FakeDiscord, **extra: Any) -> Settings:
    section = {"token": fake.token, "api_base": fake.api_base, "gateway_url": fake.gateway_url}
    platforms = {"discord": {**section, **extra}}
    return make_settings(tmp_path, platforms=platforms, media=local_files(tmp_path))


async def test_discord_sends_the_files_as_attachments_of_one_message(
    tmp_path: Path, discord_fake: FakeDiscord, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TETHER_TEST_DIR", str(tmp_path))
    async with running(discord_settings(tmp_path, discord_fake), router()):
        await discord_fake.wait_for(lambda: discord_fake.connected >= 1)
        await discord_fake.say(DM_CHANNEL_ID, "files")
        await discord_fake.wait_for(lambda: len(discord_fake.sent) >= 1)
    (message,) = discord_fake.sent
    assert message["content"] == plugin.CAPTION
    assert [(a["filename"], a["size"]) for a in message["attachments"]] == [
        ("chart.png", len(plugin.PHOTO)),
        ("report.pdf", len(plugin.DOCUMENT)),
        ("note.ogg", len(plugin.VOICE)),
    ]
    (post,) = [p for p in discord_fake.posts if p.body.get("_files")]
    assert [f["data"] for f in post.body["_files"]] == [plugin.PHOTO, plugin.DOCUMENT, plugin.VOICE]
    assert post.body["enforce_nonce"] is True and post.body["nonce"]


async def test_discord_ask_answered_with_files_completes_the_deferred_response(
    tmp_path: Path, discord_fake: FakeDiscord, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TETHER_TEST_DIR", str(tmp_path))
    settings = discord_settings(tmp_path, discord_fake, ask_command=True)
    async with running(settings, router()):
        await discord_fake.wait_for(lambda: discord_fake.connected >= 1)
        await discord_fake.interact("files")
        await discord_fake.wait_for(lambda: len(discord_fake.sent) >= 1)
    ((token, body),) = discord_fake.original_edits
    assert (token, body["content"]) == ("itoken-1", plugin.CAPTION)  # no "thinking..." left
    (message,) = discord_fake.sent
    assert message["content"] == ""  # the caption is shown once, in the response
    assert [a["filename"] for a in message["attachments"]] == [
        "chart.png",
        "report.pdf",
        "note.ogg",
    ]


async def test_discord_download_reads_the_attachment_url_within_the_cap(
    tmp_path: Path, discord_fake: FakeDiscord
) -> None:
    cdn = await FakeCdn().start()
    try:
        url = cdn.add(plugin.DOCUMENT, "report.pdf")
        attachment = {
            "id": str(discord_fake.next_id()),
            "filename": "report.pdf",
            "size": len(plugin.DOCUMENT),
            "url": url,
            "proxy_url": url,
            "content_type": "application/pdf",
        }
        async with running(discord_settings(tmp_path, discord_fake), router()):
            await discord_fake.wait_for(lambda: discord_fake.connected >= 1)
            await discord_fake.say(DM_CHANNEL_ID, "", attachments=[attachment])
            await discord_fake.say(DM_CHANNEL_ID, "max:100", attachments=[attachment])
            await discord_fake.wait_for(lambda: len(discord_fake.sent) >= 2)
    finally:
        await cdn.stop()
    texts = sorted(m["content"] for m in discord_fake.sent)
    sha = hashlib.sha256(plugin.DOCUMENT).hexdigest()
    size = len(plugin.DOCUMENT)
    assert texts == [
        f"cannot fetch: the file is {size} bytes, over the download cap of 100 bytes",
        f"got file {size} bytes {sha}",
    ]
    assert len(cdn.fetched) == 1


# -- Feishu ---------------------------------------------------------------------------


@pytest.fixture
def feishu() -> Any:
    fake = MediaFeishu()
    fake.start()
    try:
        yield fake
    finally:
        fake.release()
        fake.stop()


def feishu_settings(tmp_path: Path, fake: MediaFeishu) -> Settings:
    section = {
        "app_id": APP_ID,
        "app_secret": APP_SECRET,
        "domain": fake.domain,
        "mode": "websocket",
        "rate_limits": False,
    }
    return make_settings(tmp_path, platforms={"feishu": section}, media=local_files(tmp_path))


async def test_feishu_uploads_then_sends_each_file_as_its_own_message(
    tmp_path: Path, feishu: MediaFeishu, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TETHER_TEST_DIR", str(tmp_path))
    async with running(feishu_settings(tmp_path, feishu), router()) as (gateway, _):
        adapter = gateway.adapters["feishu"]
        await feishu.until(lambda: adapter.connected)
        feishu.push_event(message_event("om_files", "files", token=""))
        await feishu.until(lambda: len(feishu.messages) >= 4)
    text, photo, document, voice = feishu.messages
    assert (text["msg_type"], text["content"]) == ("text", {"text": plugin.CAPTION})
    assert [m["msg_type"] for m in (photo, document, voice)] == ["image", "file", "audio"]
    assert [feishu.files_in(m) for m in (photo, document, voice)] == [
        plugin.PHOTO,
        plugin.DOCUMENT,
        plugin.VOICE,
    ]
    assert [(u["field"], u["file_type"]) for u in feishu.uploads] == [
        ("image", None),
        ("file", "pdf"),
        ("file", "opus"),
    ]
    assert len({m["uuid"] for m in feishu.messages}) == 4


async def test_feishu_download_reads_the_message_resource_within_the_cap(
    tmp_path: Path, feishu: MediaFeishu
) -> None:
    feishu.add_resource("om_pic", "img_v3_in", plugin.PHOTO)
    feishu.add_resource("om_pic2", "img_v3_in", plugin.PHOTO)
    image = {"image_key": "img_v3_in"}
    async with running(feishu_settings(tmp_path, feishu), router()) as (gateway, _):
        adapter = gateway.adapters["feishu"]
        await feishu.until(lambda: adapter.connected)
        feishu.push_event(message_event("om_pic", message_type="image", content=image, token=""))
        await feishu.until(lambda: len(feishu.messages) >= 1)
    sha = hashlib.sha256(plugin.PHOTO).hexdigest()
    assert [m["content"] for m in feishu.messages] == [
        {"text": f"got image {len(plugin.PHOTO)} bytes {sha}"}
    ]
    assert feishu.resource_reads == [("om_pic", "img_v3_in", "image")]


# -- sources, and a platform without files ---------------------------------------------


class NoFiles(LoopbackAdapter):
    """A platform with no file uploads (the console, the web chat): Adapter's own
    send_files, which sends the text with a line naming each file."""

    send_files = Adapter.send_files


async def test_a_url_is_fetched_once_and_a_platform_without_files_names_them(
    tmp_path: Path,
) -> None:
    cdn = await FakeCdn().start()
    url = cdn.add(plugin.DOCUMENT, "report.pdf")
    handlers = Router("url")

    @handlers.text(r"^url$")
    async def _url(ctx: Context) -> None:
        await ctx.reply("from the web", files=[url])

    @handlers.text(r"^missing$")
    async def _missing(ctx: Context) -> None:
        await ctx.reply("nope", files=[tmp_path / "gone.pdf"])

    @handlers.text(r"^empty$")
    async def _empty(ctx: Context) -> None:
        await ctx.reply("nope", files=[File(b"", name="empty.txt")])

    try:
        without_files = NoFiles()
        media = {"allow_paths": [str(tmp_path)], "allow_hosts": [f"127.0.0.1:{cdn.port}"]}
        async with running(make_settings(tmp_path, media=media), handlers, without_files) as (
            _gateway,
            adapter,
        ):
            await adapter.say("url")
            await adapter.say("missing")
            await adapter.say("empty")
            sent = await adapter.wait_for_sent(3)
    finally:
        await cdn.stop()
    texts = sorted(delivery.message.text for delivery in sent)
    notice = make_settings(tmp_path).pipeline.dead_notice
    shown = f"from the web\n[document: report.pdf, {len(plugin.DOCUMENT)} bytes]"
    assert texts == sorted([shown, notice, notice])
    assert len(cdn.fetched) == 1
    missing, empty = sorted(row[0] for row in db_rows(tmp_path, "SELECT error FROM dead_letters"))
    assert "gone.pdf" in missing and "cannot be read" in missing
    assert "files[0]: the file is empty" in empty


# -- how a reply with files becomes rows ------------------------------------------------


class _Shape(Adapter):
    """An adapter as :func:`parts` sees it: limits and which kinds share a message."""

    platform = "shape"
    text_limit = 200

    def __init__(self, caption_limit: int | None, groups: frozenset[Any]) -> None:
        self.caption_limit = caption_limit
        self.file_groups = groups

    def text_length(self, text: str) -> int:
        return utf16_len(text)

    async def start(self, inbox: Any) -> None: ...

    async def stop(self) -> None: ...

    async def send(self, message: OutMessage) -> Sent:
        raise SendFatal("not here")


_FILES = st.lists(
    st.builds(
        OutFile,
        kind=st.sampled_from(KINDS),
        name=st.text(
            st.characters(codec="utf-8", exclude_categories=["Cs"]), min_size=1, max_size=8
        ),
        blob=st.just("a" * 64),
        size=st.integers(1, 10),
    ),
    min_size=1,
    max_size=25,
)


@given(
    files=_FILES,
    text=st.text(max_size=500),
    caption_limit=st.sampled_from([None, 0, 50, 1024]),
    groups=st.sampled_from([frozenset(), frozenset({"photo", "video"}), frozenset(KINDS)]),
    buttons=st.booleans(),
    edit=st.booleans(),
)
def test_parts_keep_every_file_once_in_order_and_every_word_of_the_text(
    files: list[OutFile],
    text: str,
    caption_limit: int | None,
    groups: frozenset[Any],
    buttons: bool,
    edit: bool,
) -> None:
    adapter = _Shape(caption_limit, groups)
    keyboard = [[Button("ok", data="ok")]] if buttons and text.strip() else []
    message = OutMessage(
        target=Target(platform="shape", chat_id="1"),
        text=text,
        files=files,
        reply_to="9",
        buttons=keyboard,
        meta={"edit_of": "77"} if edit else {},
    )
    out = parts(message, adapter)
    assert [f for part in out for f in part.files] == files
    assert all(len(part.files) <= 10 for part in out)
    for part in out:
        if len(part.files) > 1:
            assert all(f.kind in groups for f in part.files)
        if part.files and part.text:
            assert caption_limit is None or adapter.text_length(part.text) <= caption_limit
        if part.files:  # a file is never an edit, and never carries buttons
            assert "edit_of" not in part.meta and not part.buttons
    assert "".join(part.text for part in out).split() == text.split()
    assert out[0].reply_to == "9" and all(part.reply_to is None for part in out[1:])
    if keyboard:  # under the text, which comes last
        assert out[-1].buttons == keyboard and not out[-1].files
        assert all(not part.buttons for part in out[:-1])
    else:
        assert all(not part.buttons for part in out)


def test_an_outbox_payload_with_files_round_trips() -> None:
    file = OutFile(kind="voice", name="n.ogg", mime="audio/ogg", blob="b" * 64, size=3)
    message = OutMessage(target=Target(platform="t", chat_id="1"), text="", files=[file])
    assert OutMessage.from_json(message.to_json()) == message
    old = '{"v": 1, "key": "k#0", "target": {"platform": "t", "chat_id": "1"}, "text": "hi"}'
    assert OutMessage.from_json(old).files == []  # rows written before files still read
