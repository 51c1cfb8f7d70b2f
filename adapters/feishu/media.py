"""Files out (upload, then the message) and in (the message's resources).

Feishu takes a file in two requests: ``im/v1/images`` (or ``im/v1/files``) stores it
and answers a key, then ``im/v1/messages`` posts a message naming that key, with the
row's ``uuid``. Only the message is visible, and Feishu posts at most one message per
uuid within an hour. So the first request may be repeated freely (a crash between the
two, or a failure of either, uploads again: an unseen second copy), and the second is
deduplicated by uuid: however often a row is retried, the chat shows the file once.
An upload that fails is therefore always "not sent" (retryable), never ambiguous.

One file per message (Feishu has no albums, and no captions: a reply's text goes as
its own message before the file). Voice notes are ``audio`` messages (Opus); video,
audio tracks and documents go as ``file`` messages, which need no cover image.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from urllib.parse import quote

import aiohttp

from tether.adapters.base import Sent
from tether.adapters.feishu.send import Messages, classify
from tether.adapters.kit import describe
from tether.adapters.media import check_stated, read_capped
from tether.errors import DownloadError, SendFatal, SendRetryable
from tether.events import Attachment, OutMessage
from tether.files import Upload

#: ``im/v1/images`` takes up to 10 MB; a larger image goes up (and is sent) as a file.
IMAGE_LIMIT = 10 * 1024 * 1024
#: ``im/v1/files``'s ``file_type`` by MIME type; anything else is a ``stream``.
_FILE_TYPES = {
    "application/pdf": "pdf",
    "application/msword": "doc",
    "application/vnd.openxmlformats-officedocument.wordprocessingml.document": "doc",
    "application/vnd.ms-excel": "xls",
    "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet": "xls",
    "application/vnd.ms-powerpoint": "ppt",
    "application/vnd.openxmlformats-officedocument.presentationml.presentation": "ppt",
    "video/mp4": "mp4",
}


async def send_files(messages: Messages, message: OutMessage, files: Sequence[Upload]) -> Sent:
    """Upload each file, then post it as a message with the row's uuid."""
    if len(files) != 1:
        raise SendFatal(f"feishu sends one file per message, not {len(files)}")
    [upload] = files
    if upload.kind == "photo" and len(upload.data) <= IMAGE_LIMIT:
        key = await _upload(messages, "/open-apis/im/v1/images", _image_form(upload), "image_key")
        content = ("image", json.dumps({"image_key": key}))
    else:
        key = await _upload(messages, "/open-apis/im/v1/files", _file_form(upload), "file_key")
        msg_type = "audio" if _opus_voice(upload) else "file"
        content = (msg_type, json.dumps({"file_key": key}))
    return await messages.send(message, content)


def _opus_voice(upload: Upload) -> bool:
    """A voice note Feishu can play as one (Opus, as Telegram's are); any other audio
    goes as a file, which Feishu takes whatever its format."""
    return upload.kind == "voice" and upload.mime in ("audio/ogg", "audio/opus")


def _image_form(upload: Upload) -> aiohttp.FormData:
    form = aiohttp.FormData()
    form.add_field("image_type", "message")
    form.add_field("image", upload.data, filename=upload.name, content_type=upload.mime)
    return form


def _file_form(upload: Upload) -> aiohttp.FormData:
    file_type = "opus" if _opus_voice(upload) else _FILE_TYPES.get(upload.mime, "stream")
    form = aiohttp.FormData()
    form.add_field("file_type", file_type)
    form.add_field("file_name", upload.name)
    form.add_field("file", upload.data, filename=upload.name, content_type=upload.mime)
    return form


async def _upload(messages: Messages, path: str, form: aiohttp.FormData, field: str) -> str:
    """One upload; its key. Nothing is visible yet, so every failure but a refusal is
    safe to retry."""
    try:
        token = await messages._tenant_token()
        headers = {"Authorization": f"Bearer {token}"}
        async with messages._http.post(path, data=form, headers=headers) as response:
            status, answer_headers = response.status, response.headers
            answer = await response.json(content_type=None)
    except (aiohttp.ClientError, TimeoutError, ValueError, OSError) as exc:
        raise SendRetryable(f"upload failed: {describe(exc)}") from exc
    except Exception as exc:  # the SDK's token fetch
        raise SendRetryable(f"no tenant_access_token: {describe(exc)}") from exc
    answer = answer if isinstance(answer, dict) else {}
    data = answer.get("data")
    key = data.get(field) if isinstance(data, dict) else None
    if status < 300 and answer.get("code") == 0 and isinstance(key, str) and key:
        return key
    error = classify(status, answer.get("code"), answer.get("msg"), answer_headers)
    if isinstance(error, SendFatal):
        raise error
    raise SendRetryable(f"upload: {error}", retry_after=getattr(error, "retry_after", None))


async def download(
    messages: Messages, attachment: Attachment, message_id: str | None, cap: int
) -> bytes:
    """``im/v1/messages/{message_id}/resources/{file_key}``, at most ``cap`` bytes."""
    if not attachment.file_id or not message_id:
        raise DownloadError(f"this {attachment.kind} has no file key and message to fetch")
    check_stated(attachment.size, cap)
    kind = "image" if attachment.kind == "image" else "file"
    path = (
        f"/open-apis/im/v1/messages/{quote(message_id, safe='')}"
        f"/resources/{quote(attachment.file_id, safe='')}"
    )
    try:
        token = await messages._tenant_token()
        headers = {"Authorization": f"Bearer {token}"}
        async with messages._http.get(path, params={"type": kind}, headers=headers) as response:
            return await read_capped(response, cap)
    except (aiohttp.ClientError, TimeoutError, OSError) as exc:
        raise DownloadError(f"could not fetch the file: {describe(exc)}") from exc
