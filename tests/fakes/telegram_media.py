"""The fake Bot API with files: sendPhoto, sendDocument, sendVoice, sendAudio, sendVideo
and sendMediaGroup (multipart uploads, as PTB posts them), getFile and the file route.

:class:`MediaTelegram` is :class:`~tests.fakes.telegram_api.FakeTelegram` plus:

- ``media``: every visible message made from an upload, in order (an album is one entry
  per message, as Telegram shows it), with its bytes;
- ``hold(method)``: the next call of ``method`` is recorded (the message is visible) and
  then never answered until :meth:`release`: the window a crash test kills the
  gateway in, after the platform has the message and before the gateway knows it;
- ``add_file(data, ...)``: a file a person sent, served by getFile and
  ``GET /file/bot{token}/{file_path}`` (as Telegram serves them).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from typing import Any

from aiohttp import web

from tests.fakes.telegram_api import FakeTelegram, _ApiError
from tests.fakes.telegram_text import Refused, rendered

#: The Bot API's caption limit, in UTF-16 units.
CAPTION_LIMIT = 1024
_FIELDS = {
    "sendPhoto": "photo",
    "sendDocument": "document",
    "sendVoice": "voice",
    "sendAudio": "audio",
    "sendVideo": "video",
}


def _utf16(text: str) -> int:
    return len(text.encode("utf-16-le")) // 2


def _shown(caption: str, parse_mode: Any) -> str:
    """The caption as shown: MarkdownV2 parsed (and refused) as Telegram does, and the
    1024 limit counted on the result, as for a message text."""
    try:
        shown = rendered(caption, parse_mode if isinstance(parse_mode, str) else None)
    except Refused as exc:
        raise _ApiError(400, f"Bad Request: can't parse entities: {exc}") from exc
    if _utf16(shown) > CAPTION_LIMIT:
        raise _ApiError(400, "Bad Request: message caption is too long")
    return shown


class MediaTelegram(FakeTelegram):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.media: list[dict[str, Any]] = []
        self.files: dict[str, tuple[str, bytes]] = {}  # file_id → (file_path, bytes)
        self.downloads: list[str] = []  # file paths fetched
        self._held: set[str] = set()
        self._release = asyncio.Event()
        self._file_ids = itertools.count(1)

    def app(self, control: bool = False) -> web.Application:
        app = super().app(control)
        app._client_max_size = 50 * 1024 * 1024 + 65536  # the Bot API's upload limit
        app.router.add_get("/file/bot{token}/{path:.+}", self._file)
        return app

    # -- test controls --------------------------------------------------------------

    def hold(self, method: str) -> None:
        self._held.add(method)

    def release(self) -> None:
        self._held.clear()
        self._release.set()

    def add_file(self, data: bytes, *, path: str = "photos/file.jpg") -> str:
        file_id = f"AgAC-file-{next(self._file_ids)}"
        self.files[file_id] = (path, data)
        return file_id

    # -- the Bot API ----------------------------------------------------------------

    async def _api_sendPhoto(self, params: dict[str, Any]) -> dict[str, Any]:
        return await self._send_file("sendPhoto", params)

    async def _api_sendDocument(self, params: dict[str, Any]) -> dict[str, Any]:
        return await self._send_file("sendDocument", params)

    async def _api_sendVoice(self, params: dict[str, Any]) -> dict[str, Any]:
        return await self._send_file("sendVoice", params)

    async def _api_sendAudio(self, params: dict[str, Any]) -> dict[str, Any]:
        return await self._send_file("sendAudio", params)

    async def _api_sendVideo(self, params: dict[str, Any]) -> dict[str, Any]:
        return await self._send_file("sendVideo", params)

    async def _send_file(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        field = _FIELDS[method]
        upload = params.get(field)
        if not isinstance(upload, dict) or not upload.get("data"):
            raise _ApiError(400, f"Bad Request: there is no {field} in the request")
        caption = _shown(str(params.get("caption") or ""), params.get("parse_mode"))
        message = self._visible(method, field, params, upload, caption)
        await self._maybe_hold(method)
        return message

    async def _api_sendMediaGroup(self, params: dict[str, Any]) -> list[dict[str, Any]]:
        raw = params.get("media")
        items = json.loads(raw) if isinstance(raw, str) else raw
        if not isinstance(items, list) or not 2 <= len(items) <= 10:
            raise _ApiError(400, "Bad Request: wrong number of media in the album")
        messages = []
        for item in items:
            ref = str(item.get("media", ""))
            upload = params.get(ref.removeprefix("attach://"))
            if not ref.startswith("attach://") or not isinstance(upload, dict):
                raise _ApiError(400, "Bad Request: wrong file identifier/HTTP URL specified")
            caption = _shown(str(item.get("caption") or ""), item.get("parse_mode"))
            messages.append(
                self._visible("sendMediaGroup", str(item.get("type")), params, upload, caption)
            )
        await self._maybe_hold("sendMediaGroup")
        return messages

    async def _api_getFile(self, params: dict[str, Any]) -> dict[str, Any]:
        file_id = str(params.get("file_id"))
        if file_id not in self.files:
            raise _ApiError(400, "Bad Request: invalid file_id")
        path, data = self.files[file_id]
        return {
            "file_id": file_id,
            "file_unique_id": f"u{file_id}",
            "file_size": len(data),
            "file_path": path,
        }

    async def _file(self, request: web.Request) -> web.Response:
        if request.match_info["token"] != self.token:
            return web.Response(status=401)
        path = request.match_info["path"]
        for file_path, data in self.files.values():
            if file_path == path:
                self.downloads.append(path)
                return web.Response(body=data, content_type="application/octet-stream")
        return web.Response(status=404)

    def _visible(
        self,
        method: str,
        kind: str,
        params: dict[str, Any],
        upload: dict[str, Any],
        caption: str,
    ) -> dict[str, Any]:
        chat_id = params["chat_id"]
        message: dict[str, Any] = {
            "message_id": next(self._sent_ids),
            "date": int(time.time()),
            "chat": {"id": chat_id, "type": "private" if int(chat_id) > 0 else "supergroup"},
            "from": {"id": self.bot_id, "is_bot": True, "first_name": "Tether"},
        }
        if caption:
            message["caption"] = caption
        self.media.append(
            {
                "method": method,
                "kind": kind,
                "chat_id": chat_id,
                "filename": upload.get("filename"),
                "data": upload.get("data"),
                "caption": caption,
                "parse_mode": params.get("parse_mode"),
                "reply_parameters": params.get("reply_parameters"),
                "message_id": message["message_id"],
            }
        )
        self._notify()
        return message

    async def _maybe_hold(self, method: str) -> None:
        if method in self._held:
            await self._release.wait()  # the message is visible; the answer never comes
