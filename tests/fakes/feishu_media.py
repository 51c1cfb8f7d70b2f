"""The fake Feishu with files: uploads (``im/v1/images``, ``im/v1/files``), messages that
name them, and the resources of messages people sent.

:class:`MediaFeishu` is :class:`~tests.fakes.feishu_api.FakeFeishu` plus:

- ``uploads``: every upload, in order, with its key and bytes (uploads are invisible
  to the chat: a repeated one is just another stored file, as on Feishu);
- ``hold("upload")``: uploads are stored, then their answers wait until
  :meth:`release` — the window between an upload and its message that a crash test
  kills the gateway in; ``hold("message")``: messages showing a file are posted
  (visible), then their answers wait — the platform has the message, the gateway
  does not know;
- ``add_resource(message_id, file_key, data)``: a file a person sent, served by
  ``GET /open-apis/im/v1/messages/{message_id}/resources/{file_key}?type=...``.

Messages themselves are :class:`FakeFeishu`'s: deduplicated by ``uuid``. A message
naming an ``image_key`` or ``file_key`` that was never uploaded is refused, as Feishu
refuses it.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import threading
from typing import Any

from aiohttp import BodyPartReader, web

from tests.fakes.feishu_api import Call, FakeFeishu

#: Feishu's caps: images 10 MB, files 30 MB.
IMAGE_CAP = 10 * 1024 * 1024
FILE_CAP = 30 * 1024 * 1024


class MediaFeishu(FakeFeishu):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.uploads: list[dict[str, Any]] = []
        self.resources: dict[tuple[str, str], bytes] = {}
        self.resource_reads: list[tuple[str, str, str]] = []  # (message, key, type)
        self.held = 0  # answers waiting now
        self._hold: str | None = None
        self._go = threading.Event()
        self._keys = itertools.count(1)

    def app(self) -> web.Application:
        app = super().app()
        app.router.add_post("/open-apis/im/v1/images", self._image)
        app.router.add_post("/open-apis/im/v1/files", self._file)
        app.router.add_get(
            "/open-apis/im/v1/messages/{message_id}/resources/{file_key}", self._resource
        )
        return app

    # -- test controls --------------------------------------------------------------

    def hold(self, where: str) -> None:
        """Withhold the answers of ``"upload"`` or ``"message"`` requests (see above)."""
        self._hold = where
        self._go.clear()

    def release(self) -> None:
        self._hold = None
        self._go.set()

    async def _maybe_hold(self, where: str) -> None:
        if self._hold == where:
            self.held += 1
            self._changed()
            await asyncio.to_thread(self._go.wait)
            self.held -= 1

    def add_resource(self, message_id: str, file_key: str, data: bytes) -> None:
        self.resources[(message_id, file_key)] = data

    def files_in(self, message: dict[str, Any]) -> bytes | None:
        """The bytes a posted message shows (by its image_key or file_key)."""
        content = message.get("content") or {}
        key = content.get("image_key") or content.get("file_key")
        for upload in self.uploads:
            if upload["key"] == key:
                return bytes(upload["data"])
        return None

    # -- the open platform ------------------------------------------------------------

    async def _image(self, request: web.Request) -> web.Response:
        return await self._upload(request, "image", "image_key", IMAGE_CAP)

    async def _file(self, request: web.Request) -> web.Response:
        return await self._upload(request, "file", "file_key", FILE_CAP)

    async def _upload(
        self, request: web.Request, field: str, key_name: str, cap: int
    ) -> web.Response:
        if not self._authorized(request):
            return web.json_response({"code": 99991663, "msg": "Invalid access token"}, status=401)
        fields: dict[str, Any] = {}
        reader = await request.multipart()
        async for part in reader:
            if isinstance(part, BodyPartReader) and part.name:
                data = await part.read()
                fields[part.name] = (
                    {"filename": part.filename, "data": bytes(data)}
                    if part.filename
                    else data.decode()
                )
        upload = fields.get(field)
        if not isinstance(upload, dict) or not upload["data"]:
            return _refused(234001, f"no {field} in the request")
        if len(upload["data"]) > cap:
            return _refused(234006, "file size exceeds the limit")
        if field == "image" and fields.get("image_type") != "message":
            return _refused(234001, "invalid image_type")
        if field == "file" and not fields.get("file_type"):
            return _refused(234001, "file_type is required")
        key = f"{'img' if field == 'image' else 'file'}_v3_{next(self._keys)}"
        self.uploads.append(
            {
                "key": key,
                "field": field,
                "file_type": fields.get("file_type"),
                "file_name": fields.get("file_name") or upload["filename"],
                "data": upload["data"],
            }
        )
        self._changed()
        await self._maybe_hold("upload")
        return web.json_response({"code": 0, "msg": "success", "data": {key_name: key}})

    async def _create(self, request: web.Request) -> web.Response:
        refused = await self._check(request)
        answer = refused or await super()._create(request)
        if refused is None and await self._shows_file(request):
            await self._maybe_hold("message")
        return answer

    async def _reply(self, request: web.Request) -> web.Response:
        refused = await self._check(request)
        answer = refused or await super()._reply(request)
        if refused is None and await self._shows_file(request):
            await self._maybe_hold("message")
        return answer

    async def _record(self, request: web.Request) -> Call:
        """As FakeFeishu records a call, reading the body even after :meth:`_check` has
        (aiohttp keeps it, but then says there is nothing left to read)."""
        raw = await request.read()
        data = json.loads(raw) if raw else {}
        body = data if isinstance(data, dict) else {}
        call = Call(request.path, dict(request.query), body, size=len(raw), method=request.method)
        self.calls.append(call)
        return call

    async def _shows_file(self, request: web.Request) -> bool:
        raw = await request.read()
        body = json.loads(raw) if raw else {}
        return body.get("msg_type") in ("image", "file", "audio", "media")

    async def _check(self, request: web.Request) -> web.Response | None:
        """Refuse a message naming an image or file key that was never uploaded."""
        raw = await request.read()
        body = json.loads(raw) if raw else {}
        if body.get("msg_type") in ("image", "file", "audio", "media"):
            content = json.loads(str(body.get("content") or "{}"))
            key = content.get("image_key") or content.get("file_key")
            if not any(upload["key"] == key for upload in self.uploads):
                return _refused(230001, "invalid key")
        return None

    async def _resource(self, request: web.Request) -> web.Response:
        if not self._authorized(request):
            return web.json_response({"code": 99991663, "msg": "Invalid access token"}, status=401)
        message_id = request.match_info["message_id"]
        file_key = request.match_info["file_key"]
        kind = request.query.get("type", "")
        self.resource_reads.append((message_id, file_key, kind))
        data = self.resources.get((message_id, file_key))
        if data is None or kind not in ("image", "file"):
            return _refused(234003, "file not found")
        return web.Response(body=data, content_type="application/octet-stream")


def _refused(code: int, msg: str) -> web.Response:
    return web.json_response({"code": code, "msg": msg}, status=400)
