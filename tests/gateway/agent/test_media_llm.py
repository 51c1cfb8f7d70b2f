"""The ``llm`` agent and the files people send (issue 17): the real Gateway with the
Telegram adapter against the fake Bot API, and the ``openai`` client against the fake
OpenAI server, which records what the model was sent.

- A photo without a caption, to a model marked ``vision: true``, reaches the model as
  an image content part (a ``data:`` URL of the very bytes) and is answered.
- A voice note, or a photo for a model without vision, gets a plain reply saying what
  cannot be used: never silence, and the model is not asked about what it cannot see.
"""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tests.fakes.telegram_media import MediaTelegram
from tests.plugins import media as plugin
from tests.support.config import db_rows, make_settings
from tether.config import Settings
from tether.gateway.app import Gateway
from tether.gateway.assembly import build_adapters
from tether.memory import tokens
from tether.testing.model import API_KEY, Body, FakeModel


def answer(body: Body) -> str:
    content = body["messages"][-1]["content"]
    if isinstance(content, list):
        images = sum(1 for p in content if p["type"] == "image_url")
        return f"I see {images} images"
    return f"answer to: {content[:40]}"


@pytest.fixture
def openai(model: FakeModel) -> FakeModel:
    """The shared fake (model, tests/fixtures.py), as this module uses it."""
    model.reply = answer
    return model


@pytest.fixture
async def telegram() -> AsyncIterator[MediaTelegram]:
    fake = MediaTelegram()
    await fake.start()
    try:
        yield fake
    finally:
        await fake.stop()


def settings(tmp_path: Path, telegram: MediaTelegram, openai: FakeModel, vision: bool) -> Settings:
    model = {"provider": "fake", "model": "eyes-model", "vision": vision}
    llm = {
        "providers": {"fake": {"base_url": openai.url, "api_key": API_KEY, "timeout": 5}},
        "models": {"main": model},
        "default": "main",
    }
    section = {"token": telegram.token, "base_url": telegram.base_url, "poll_timeout": 1,
               "rate_limits": False}  # fmt: skip
    return make_settings(
        tmp_path,
        agent={"handler": "llm", "streaming": False},
        llm=llm,
        platforms={"telegram": section},
    )


def photo(telegram: MediaTelegram, file_id: str, caption: str = "") -> dict[str, Any]:
    message = telegram.message(42, "")
    del message["text"]
    message["photo"] = [
        {"file_id": file_id, "file_unique_id": "u1", "width": 1, "height": 1,
         "file_size": len(plugin.PHOTO)},
    ]  # fmt: skip
    if caption:
        message["caption"] = caption
    return message


def voice(telegram: MediaTelegram, file_id: str) -> dict[str, Any]:
    message = telegram.message(42, "")
    del message["text"]
    message["voice"] = {"file_id": file_id, "file_unique_id": "u2", "duration": 2,
                        "mime_type": "audio/ogg", "file_size": len(plugin.VOICE)}  # fmt: skip
    return message


async def run(settings: Settings, telegram: MediaTelegram, update: dict[str, Any]) -> list[str]:
    gateway = Gateway(settings, build_adapters(settings))
    await gateway.start()
    try:
        telegram.push(message=update)
        await telegram.wait_for(lambda: len(telegram.sent) >= 1)
        await gateway.drain()
    finally:
        await gateway.stop()
    return [str(m["text"]) for m in telegram.sent]


async def test_a_photo_without_caption_reaches_a_vision_model_as_an_image_part(
    tmp_path: Path, telegram: MediaTelegram, openai: FakeModel
) -> None:
    file_id = telegram.add_file(plugin.PHOTO, path="photos/p.jpg")
    texts = await run(
        settings(tmp_path, telegram, openai, True), telegram, photo(telegram, file_id)
    )
    assert texts == ["I see 1 images"]
    (request,) = openai.requests
    content = request.messages[-1]["content"]
    assert isinstance(content, list)
    (part,) = content  # no caption: the image alone
    assert part["type"] == "image_url"
    url = part["image_url"]["url"]
    assert url.startswith("data:image/jpeg;base64,")
    assert base64.b64decode(url.split(",", 1)[1]) == plugin.PHOTO
    # The history keeps a marker, never the bytes.
    turns = db_rows(tmp_path, "SELECT role, text FROM messages ORDER BY id")
    assert turns == [("user", "[photo]"), ("assistant", "I see 1 images")]


async def test_a_photo_with_a_caption_sends_both_parts(
    tmp_path: Path, telegram: MediaTelegram, openai: FakeModel
) -> None:
    file_id = telegram.add_file(plugin.PHOTO, path="photos/p.jpg")
    update = photo(telegram, file_id, caption="what is this?")
    await run(settings(tmp_path, telegram, openai, True), telegram, update)
    (request,) = openai.requests
    content: Any = request.messages[-1]["content"]  # parts, though the fake types it str
    text, image = content
    assert text == {"type": "text", "text": "what is this?"}
    assert image["type"] == "image_url"


async def test_a_voice_note_gets_a_plain_reply_and_no_model_call(
    tmp_path: Path, telegram: MediaTelegram, openai: FakeModel
) -> None:
    file_id = telegram.add_file(plugin.VOICE, path="voice/v.oga")
    texts = await run(
        settings(tmp_path, telegram, openai, True), telegram, voice(telegram, file_id)
    )
    assert texts == [
        "I got your voice note, but I can only read text and look at images"
        " — I can't use a voice note. Could you write it out instead?"
    ]
    assert openai.requests == []
    assert telegram.downloads == []  # nothing fetched that nobody can use


async def test_a_photo_for_a_model_without_vision_is_answered_plainly(
    tmp_path: Path, telegram: MediaTelegram, openai: FakeModel
) -> None:
    file_id = telegram.add_file(plugin.PHOTO, path="photos/p.jpg")
    texts = await run(
        settings(tmp_path, telegram, openai, False), telegram, photo(telegram, file_id)
    )
    assert texts == [
        "I got your image, but the model I answer with here can't see images."
        " Could you describe it in words?"
    ]
    assert openai.requests == []


def test_image_parts_are_counted_in_a_prompt() -> None:
    image = {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}
    plain = tokens.count_messages([{"role": "user", "content": "hello"}])
    parts = [{"type": "text", "text": "hello"}, image, image]
    assert tokens.count_messages([{"role": "user", "content": parts}]) == (
        plain + 2 * tokens.IMAGE_TOKENS
    )
