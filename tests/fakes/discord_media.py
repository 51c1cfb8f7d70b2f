"""Attachments for the fake Discord: Create Message as multipart, and a fake CDN.

discord.py posts a message with files as ``multipart/form-data``: the JSON body in the
``payload_json`` part and each file as ``files[n]``. :func:`message_body` reads either
form into the JSON body, the files under ``_files``; :func:`attachments` turns them into
the ``attachments`` of the message Discord stores (served by the fake's CDN).

:class:`FakeCdn` is ``cdn.discordapp.com``: it serves the files people attach, so that
``ctx.download`` of a Discord attachment is a real HTTP GET. It also stands in for any
web server a handler's URL names (``files=["https://…"]``), redirects included.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable
from typing import Any

from aiohttp import BodyPartReader, web

#: Discord's cap for a bot's upload without boosts (the API answers 413 past it).
MAX_UPLOAD = 10 * 1024 * 1024


async def message_body(request: web.Request) -> dict[str, Any]:
    """The Create Message body, JSON or multipart; uploaded files in ``body["_files"]``."""
    if request.content_type != "multipart/form-data":
        data = await request.json()
        return dict(data) if isinstance(data, dict) else {}
    body: dict[str, Any] = {}
    files: list[dict[str, Any]] = []
    reader = await request.multipart()
    async for part in reader:
        if not isinstance(part, BodyPartReader):
            continue  # a nested multipart: Discord's clients never send one
        data = await part.read()
        if part.name == "payload_json":
            body.update(json.loads(data))
        elif part.name and part.name.startswith("files["):
            files.append(
                {
                    "filename": part.filename,
                    "content_type": part.headers.get("Content-Type"),
                    "data": bytes(data),
                }
            )
    body["_files"] = files
    return body


def attachments(
    body: dict[str, Any], next_id: Callable[[], int], cdn: str = "https://cdn.example.invalid"
) -> list[dict[str, Any]]:
    """The ``attachments`` of a message made from ``body``'s uploaded files."""
    found = []
    for upload in body.get("_files") or []:
        attachment_id = next_id()
        found.append(
            {
                "id": str(attachment_id),
                "filename": upload["filename"],
                "size": len(upload["data"]),
                "url": f"{cdn}/attachments/{attachment_id}/{upload['filename']}",
                "proxy_url": f"{cdn}/attachments/{attachment_id}/{upload['filename']}",
                "content_type": upload["content_type"],
            }
        )
    return found


class FakeCdn:
    """Serves files by path; records each fetch."""

    def __init__(self) -> None:
        self.files: dict[str, bytes] = {}
        self.redirects: dict[str, str] = {}
        self.fetched: list[str] = []
        self.port = 0
        self._runner: web.AppRunner | None = None
        self._ids = itertools.count(1)

    async def start(self) -> FakeCdn:
        app = web.Application()
        app.router.add_get("/{path:.+}", self._serve)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", 0).start()
        self.port = int(self._runner.addresses[0][1])
        return self

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    def add(self, data: bytes, name: str) -> str:
        """Serve ``data``; its URL."""
        path = f"attachments/{next(self._ids)}/{name}"
        self.files[path] = data
        return f"http://127.0.0.1:{self.port}/{path}"

    def redirect(self, location: str, status: int = 302) -> str:
        """A URL answering ``status`` with ``Location: location``."""
        path = f"redirect/{next(self._ids)}"
        self.redirects[path] = f"{status} {location}"
        return f"http://127.0.0.1:{self.port}/{path}"

    async def _serve(self, request: web.Request) -> web.Response:
        path = request.match_info["path"]
        self.fetched.append(path)
        if path in self.redirects:
            status, location = self.redirects[path].split(" ", 1)
            return web.Response(status=int(status), headers={"Location": location})
        if path not in self.files:
            return web.Response(status=404)
        return web.Response(body=self.files[path], content_type="application/octet-stream")
