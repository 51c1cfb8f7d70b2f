"""kill -9 between a file's upload and its send: each file is in the chat exactly once.

A real ``tether run`` subprocess (tests/plugins/media.py) answers ``files`` with a
caption, a photo, a document and a voice note. The fake platform withholds its answer
at the worst moment (or, on Feishu, between the upload and the message), the test
SIGKILLs the process there, restarts it on the same store and lets the platform answer
again. What the chat shows at the end is counted on the fake.

- Discord: the upload *is* the message (one multipart Create Message). Killed after
  Discord made it, the restart sends the row again with the same nonce and Discord
  answers with the message it already has: one message with the three files.
- Feishu: killed after the photo's upload, before its message; the restart uploads
  again (an invisible second copy) and posts the message once. Killed after the
  message was posted but before the answer arrived: the restart posts it again with
  the same uuid and Feishu keeps one.
- Telegram has no idempotency key. Killed after Telegram made the photo message, the
  row is ``unknown`` after the restart and not sent again (``resend_unknown`` off):
  one photo. The window that remains, which no client of the Bot API can close: a
  send cut off *before* Telegram got it is ``unknown`` too, so that file is missing
  (``outbox.unknown`` in the log and ``tether status``), never doubled; with
  ``resend_unknown: true`` it is resent, and a send Telegram did get is then doubled.
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from tests.fakes.discord_api import DM_CHANNEL_ID, FakeDiscord
from tests.fakes.feishu_api import APP_ID, APP_SECRET, message_event
from tests.fakes.feishu_media import MediaFeishu
from tests.fakes.telegram_media import MediaTelegram
from tests.plugins import media as plugin
from tests.support.config import db_rows, write_config
from tests.support.processes import spawn_run, subprocess_env

#: Every test here kills a real tether process with SIGKILL.
pytestmark = [pytest.mark.crash, pytest.mark.slow]

FILES = [plugin.PHOTO, plugin.DOCUMENT, plugin.VOICE]
PLUGIN = ["tests.plugins.media:router"]


def local_files(tmp_path: Path) -> dict[str, Any]:
    """``media:`` letting the plugin's document (a Path under TETHER_TEST_DIR) be read."""
    return {"allow_paths": [str(tmp_path)]}


def outbox(tmp_path: Path) -> list[tuple[str, str]]:
    return [(str(key).split("#")[-1], str(status)) for key, status in
            db_rows(tmp_path, "SELECT key, status FROM outbox ORDER BY seq")]  # fmt: skip


async def kill_and_restart(
    tmp_path: Path,
    config: Path,
    *,
    reached: Callable[[], Awaitable[None]],
    between: Callable[[], None],
    finished: Callable[[], Awaitable[None]],
) -> None:
    """Run until ``reached``, SIGKILL, call ``between``, run again until ``finished``,
    then stop gracefully."""
    env = subprocess_env(TETHER_TEST_DIR=str(tmp_path))
    log = tmp_path / "tether.log"
    first = await spawn_run(config, log, env)
    try:
        await reached()
    finally:
        first.send_signal(signal.SIGKILL)
        await first.wait()
    between()
    second = await spawn_run(config, log, env)
    try:
        await finished()
    finally:
        second.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(second.wait(), 60) == 0, log.read_text()[-3000:]


async def test_telegram_a_photo_cut_off_after_telegram_made_it_is_not_sent_again(
    tmp_path: Path,
) -> None:
    fake = MediaTelegram()
    await fake.start()
    try:
        section = {"token": fake.token, "base_url": fake.base_url, "poll_timeout": 1,
                   "rate_limits": False}  # fmt: skip
        config = write_config(
            tmp_path, plugins=PLUGIN, media=local_files(tmp_path), platforms={"telegram": section}
        )
        fake.hold("sendPhoto")
        fake.push(message=fake.message(42, "files"))

        async def reached() -> None:
            await fake.wait_for(lambda: len(fake.media) == 1, timeout=60)

        def between() -> None:
            assert outbox(tmp_path) == [("0", "sending"), ("1", "pending"), ("2", "pending")]
            fake.release()

        async def finished() -> None:
            await fake.wait_for(lambda: len(fake.media) >= 3, timeout=60)

        await kill_and_restart(tmp_path, config, reached=reached, between=between,
                               finished=finished)  # fmt: skip
    finally:
        fake.release()
        await fake.stop()
    assert [(m["method"], m["data"]) for m in fake.media] == [
        ("sendPhoto", plugin.PHOTO),
        ("sendDocument", plugin.DOCUMENT),
        ("sendVoice", plugin.VOICE),
    ]
    assert outbox(tmp_path) == [("0", "unknown"), ("1", "sent"), ("2", "sent")]
    assert "outbox.unknown" in (tmp_path / "tether.log").read_text()


async def test_discord_files_posted_before_the_kill_are_not_posted_twice(
    tmp_path: Path,
) -> None:
    fake = await FakeDiscord().start()
    try:
        section = {"token": fake.token, "api_base": fake.api_base,
                   "gateway_url": fake.gateway_url}  # fmt: skip
        config = write_config(
            tmp_path, plugins=PLUGIN, media=local_files(tmp_path), platforms={"discord": section}
        )
        # Made, and the answer withheld for longer than the kill takes (``between`` checks
        # that it never arrived: the row is still 'sending'). Not longer: the fake's
        # stop waits for the withheld answer.
        fake.fail_next_post(commit=True, delay=10)

        async def reached() -> None:
            await fake.wait_for(lambda: fake.connected >= 1, timeout=60)
            await fake.say(DM_CHANNEL_ID, "files")
            await fake.wait_for(lambda: len(fake.sent) == 1, timeout=60)

        def between() -> None:
            assert outbox(tmp_path) == [("0", "sending")]

        async def finished() -> None:
            # The row goes again with the same nonce: a second post, no second message.
            await fake.wait_for(lambda: len(fake.posts) >= 2, timeout=60)

        await kill_and_restart(tmp_path, config, reached=reached, between=between,
                               finished=finished)  # fmt: skip
    finally:
        await fake.stop()
    (message,) = fake.sent
    assert [a["filename"] for a in message["attachments"]] == ["chart.png", "report.pdf",
                                                               "note.ogg"]  # fmt: skip
    first, again = fake.posts
    assert first.body["nonce"] == again.body["nonce"] and again.body["enforce_nonce"]
    assert [f["data"] for f in again.body["_files"]] == FILES
    assert outbox(tmp_path) == [("0", "sent")]


async def feishu_crash(tmp_path: Path, hold: str) -> tuple[MediaFeishu, list[Any]]:
    fake = MediaFeishu()
    fake.start()
    try:
        section = {"app_id": APP_ID, "app_secret": APP_SECRET, "domain": fake.domain,
                   "mode": "websocket", "rate_limits": False}  # fmt: skip
        config = write_config(
            tmp_path, plugins=PLUGIN, media=local_files(tmp_path), platforms={"feishu": section}
        )
        fake.hold(hold)

        async def reached() -> None:
            await fake.until(lambda: fake.ws_open, timeout=60)
            await asyncio.to_thread(fake.push_event, message_event("om_files", "files", token=""))
            await fake.until(lambda: fake.held == 1, timeout=60)

        def between() -> None:
            fake.release()  # the answer goes to a process that is gone

        async def finished() -> None:
            await fake.until(lambda: len(fake.messages) >= 4, timeout=60)

        await kill_and_restart(tmp_path, config, reached=reached, between=between,
                               finished=finished)  # fmt: skip
    finally:
        fake.release()
        fake.stop()
    return fake, outbox(tmp_path)


async def test_feishu_killed_between_upload_and_message_shows_each_file_once(
    tmp_path: Path,
) -> None:
    fake, rows = await feishu_crash(tmp_path, "upload")
    assert [m["msg_type"] for m in fake.messages] == ["text", "image", "file", "audio"]
    assert [fake.files_in(m) for m in fake.messages[1:]] == FILES
    # The photo went up twice (the first copy is never shown), the others once.
    assert [u["data"] for u in fake.uploads] == [plugin.PHOTO, *FILES]
    assert rows == [("0", "sent"), ("1", "sent"), ("2", "sent"), ("3", "sent")]


async def test_feishu_killed_after_the_message_keeps_one_by_its_uuid(tmp_path: Path) -> None:
    fake, rows = await feishu_crash(tmp_path, "message")
    assert [m["msg_type"] for m in fake.messages] == ["text", "image", "file", "audio"]
    assert [fake.files_in(m) for m in fake.messages[1:]] == FILES
    posts = [c for c in fake.sends() if c.body.get("msg_type") == "image"]
    assert len(posts) == 2 and posts[0].body["uuid"] == posts[1].body["uuid"]
    assert rows == [("0", "sent"), ("1", "sent"), ("2", "sent"), ("3", "sent")]
