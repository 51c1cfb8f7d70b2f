"""Files out (sendPhoto, sendDocument, sendVoice, sendAudio, sendVideo, sendMediaGroup)
and in (getFile, then the file URL).

A file goes up in the same request that posts the message, so there is no separate
upload to repeat: one outbox row is one request, under the same ``unknown`` policy as a
text (Telegram has no idempotency key; a request cut off after it left is not sent
again unless ``resend_unknown``). An album (two to ten photos and videos) is one
sendMediaGroup: one request, one row, several messages.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import structlog
from telegram import (
    Bot,
    InputFile,
    InputMediaAudio,
    InputMediaDocument,
    InputMediaPhoto,
    InputMediaVideo,
)
from telegram.constants import ParseMode
from telegram.error import BadRequest, ChatMigrated, TelegramError

from tether.adapters.base import Sent
from tether.adapters.kit import describe
from tether.adapters.media import check_stated, fetch
from tether.adapters.telegram.markdown import formatted
from tether.adapters.telegram.send import (
    addressed,
    chat_id,
    classify,
    fallback_text,
    refused_entities,
)
from tether.errors import DownloadError
from tether.events import Attachment, OutMessage
from tether.files import FileKind, Upload

log = structlog.get_logger("tether.telegram")

#: Telegram's caption limit, in UTF-16 units.
CAPTION_LIMIT = 1024
#: sendPhoto's limit; a larger image is sent as a document.
PHOTO_LIMIT = 10 * 1024 * 1024
#: Uploads take longer than a text: the read timeout for a file request.
UPLOAD_TIMEOUT = 120.0
_METHODS: dict[FileKind, tuple[str, str]] = {
    "photo": ("sendPhoto", "photo"),
    "document": ("sendDocument", "document"),
    "voice": ("sendVoice", "voice"),
    "audio": ("sendAudio", "audio"),
    "video": ("sendVideo", "video"),
}
_ALBUM: dict[FileKind, Any] = {
    "photo": InputMediaPhoto,
    "video": InputMediaVideo,
    "document": InputMediaDocument,
    "audio": InputMediaAudio,
}
_PARSE_MODES = {"html": ParseMode.HTML, "markdown": ParseMode.MARKDOWN_V2}


def file_base_url(base_url: str) -> str:
    """The Bot API's file URL for a configured ``base_url`` (``…/bot`` → ``…/file/bot``)."""
    root = base_url[: -len("bot")] if base_url.endswith("/bot") else base_url.rstrip("/") + "/"
    return root + "file/bot"


async def send_files(bot: Bot, message: OutMessage, files: Sequence[Upload]) -> Sent:
    """One request for ``files`` (an album when several), following a migrated group."""
    chat = chat_id(message.target.chat_id)
    try:
        try:
            result = await _send(bot, chat, message, files)
        except ChatMigrated as exc:
            log.warning("telegram.chat_migrated", key=message.key, chat=chat, to=exc.new_chat_id)
            result = await _send(bot, exc.new_chat_id, message, files)
    except TelegramError as exc:
        raise classify(exc) from exc
    first = result[0] if isinstance(result, list) and result else result
    message_id = first.get("message_id") if isinstance(first, dict) else None
    return Sent(platform_id=str(message_id) if message_id is not None else None)


async def _send(bot: Bot, chat: int | str, message: OutMessage, files: Sequence[Upload]) -> Any:
    """The request; a caption Telegram cannot parse (a 400: nothing was sent) goes again
    as plain text."""
    parse_mode = _PARSE_MODES.get(message.format) if message.text else None
    caption = formatted(message.text, message.format) if parse_mode else message.text
    try:
        return await _post(bot, chat, message, files, caption, parse_mode)
    except BadRequest as exc:
        if parse_mode is None or not refused_entities(exc):
            raise
        log.warning("telegram.format_fallback", key=message.key, error=describe(exc))
        plain = fallback_text(message.text, message.format)
        return await _post(bot, chat, message, files, plain, None)


async def _post(
    bot: Bot,
    chat: int | str,
    message: OutMessage,
    files: Sequence[Upload],
    caption: str,
    parse_mode: str | None,
) -> Any:
    params = addressed(chat, message)
    if len(files) == 1:
        [upload] = files
        # sendPhoto takes up to 10 MB (a 400 beyond); a larger image goes as a document.
        kind: FileKind = "document" if _big_photo(upload) else upload.kind
        method, field = _METHODS[kind]
        params[field] = InputFile(upload.data, filename=upload.name)
        if caption:
            params["caption"] = caption
            if parse_mode:
                params["parse_mode"] = parse_mode
    else:
        method = "sendMediaGroup"
        params["media"] = [
            _ALBUM.get("document" if _big_photo(upload) else upload.kind, InputMediaDocument)(
                media=upload.data,
                filename=upload.name,
                caption=caption if index == 0 and caption else None,
                parse_mode=parse_mode if index == 0 and caption else None,
            )
            for index, upload in enumerate(files)
        ]
    return await bot._post(method, params, read_timeout=UPLOAD_TIMEOUT)


def _big_photo(upload: Upload) -> bool:
    return upload.kind == "photo" and len(upload.data) > PHOTO_LIMIT


async def download(bot: Bot, attachment: Attachment, cap: int) -> bytes:
    """getFile for the attachment's file_id, then the file (at most ``cap`` bytes)."""
    if not attachment.file_id:
        raise DownloadError(f"this {attachment.kind} has no file_id to download")
    check_stated(attachment.size, cap)
    try:
        found = await bot._post("getFile", {"file_id": attachment.file_id})
    except TelegramError as exc:
        raise DownloadError(f"getFile failed: {describe(exc)}") from exc
    if not isinstance(found, dict) or not found.get("file_path"):
        raise DownloadError("Telegram gave no file_path (files over 20 MB cannot be fetched)")
    size = found.get("file_size")
    check_stated(size if isinstance(size, int) else None, cap)
    path = str(found["file_path"])
    url = path if path.startswith(("http://", "https://")) else f"{bot.base_file_url}/{path}"
    return await fetch(url, cap)
