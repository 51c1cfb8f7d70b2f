"""What every adapter shares about files: the download errors, and reading a response
without ever holding more than the cap.

A download is a read of the platform's file API (Telegram getFile, a Discord CDN URL,
Feishu's message resources): safe to repeat, so a handler that runs again after a
crash simply downloads again. The cap is checked against the size the platform states
first, then against the bytes as they arrive: a file that lies about its size is cut
off at the cap, not read into memory whole.

:func:`fetch` is for those platform APIs only: its URLs come from the platform's own
answers (getFile's ``file_path`` under the configured Bot API base, an attachment's URL
in a Discord message) at hosts the operator configured, and a self-hosted Bot API
server or a proxy in front of a platform often sits on loopback or the LAN, so no
address is refused here. A URL a handler names (``files=``) is never fetched here but
through :mod:`tether.adapters.url_guard`, which refuses private addresses.
"""

from __future__ import annotations

import aiohttp

from tether.errors import DownloadError, TooLarge

#: Default cap of ``ctx.download``: the Bot API's own getFile limit.
DEFAULT_MAX_DOWNLOAD = 20 * 1024 * 1024
_CHUNK = 64 * 1024


def check_stated(size: int | None, cap: int) -> None:
    """Refuse before downloading when the platform says the file is over ``cap``."""
    if size is not None and size > cap:
        raise TooLarge(size, cap)


async def read_capped(response: aiohttp.ClientResponse, cap: int) -> bytes:
    """The body of ``response``, or :class:`TooLarge` as soon as it passes ``cap``."""
    if response.status >= 400:
        raise DownloadError(f"HTTP {response.status} for the file")
    check_stated(response.content_length, cap)
    chunks: list[bytes] = []
    total = 0
    async for chunk in response.content.iter_chunked(_CHUNK):
        total += len(chunk)
        if total > cap:
            raise TooLarge(None, cap)
        chunks.append(chunk)
    return b"".join(chunks)


async def fetch(
    url: str, cap: int, *, headers: dict[str, str] | None = None, timeout: float = 60.0
) -> bytes:
    """GET ``url`` (at most ``cap`` bytes) on a session of its own: a platform's file
    API only (see the module's docstring; handlers' URLs go through ``url_guard``)."""
    try:
        async with (
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout)) as session,
            session.get(url, headers=headers) as response,
        ):
            return await read_capped(response, cap)
    except (aiohttp.ClientError, TimeoutError) as exc:
        raise DownloadError(f"could not fetch the file: {type(exc).__name__}") from exc
