"""How Tether talks HTTP to the Bot API: PTB's ``Bot`` on an aiohttp transport.

:class:`AiohttpRequest` is the transport (PTB's ``BaseRequest`` extension point);
:class:`BotClient` is PTB's ``Bot`` with two calls that return Telegram's JSON as is.

Why not PTB's default ``HTTPXRequest``: measured here it costs about a millisecond of CPU
per Bot API call. httpcore checks every pooled connection on every request (a
``getpeername`` system call each), and without the optional ``sniffio`` package it
retries a failed import on every request. Tether already runs aiohttp for its HTTP
server; its connector reuses keep-alive connections cheaply.

getUpdates and sendMessage, the calls made for every update, go as a JSON body
(:class:`JsonBody`): ``Bot._post`` builds a ``RequestParameter`` per value, JSON-encodes
each, then url-encodes them all, ~7% of Tether's main thread in ``bench/telegram.py``.
Everything after the encoding stays PTB's ``BaseRequest.post``: the status and error
mapping (``RetryAfter``, ``BadRequest``, ``Forbidden``, ``ChatMigrated``...) that the
outbox's retry policy relies on.

Errors map the way ``HTTPXRequest`` maps them (timeouts → ``TimedOut``, other transport
failures → ``NetworkError``), with the aiohttp exception as ``__cause__`` so the adapter
can tell "never sent" (connection refused, no connection in time) from "maybe sent".
URLs carry the bot token, so messages are scrubbed of them before they become errors.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

import aiohttp
import orjson
from telegram import Bot
from telegram._utils.defaultvalue import DEFAULT_NONE, DefaultValue
from telegram._utils.types import ODVInput
from telegram.error import NetworkError, TimedOut
from telegram.request import BaseRequest, RequestData

#: Failures that happen before a request leaves this machine: a retry cannot duplicate.
NOT_SENT: tuple[type[BaseException], ...] = (
    aiohttp.ClientConnectorError,
    aiohttp.ConnectionTimeoutError,
)
#: Extra read time on top of the long-poll timeout before the HTTP client gives up.
_POLL_READ_MARGIN = 10.0
_TOKEN_IN_URL = re.compile(r"/bot[^/\s]+/")
_FORM = {"Content-Type": "application/x-www-form-urlencoded"}
_JSON = {"Content-Type": "application/json"}
#: Every digit to "0", every other byte to " ": a number of 19 digits or more is then a
#: run of nineteen "0"s (one pass in C; a regular expression took longer than parsing).
_DIGITS = bytes(48 if 48 <= byte <= 57 else 32 for byte in range(256))
_LONG_NUMBER = b"0" * 19


# PTB marks RequestData final (how it is built is not public API); a JsonBody is only ever
# handed through BaseRequest.post, untouched, to AiohttpRequest.do_request below.
class JsonBody(RequestData):  # type: ignore[misc]
    """A request's parameters as one UTF-8 JSON document, for :class:`AiohttpRequest` only.

    PTB's own ``RequestData`` holds parameters to encode; this one holds the document
    :class:`BotClient` encoded, so a value that has no JSON form was found before sending.
    """

    __slots__ = ("body",)

    def __init__(self, body: bytes) -> None:
        super().__init__()
        self.body = body


class AiohttpRequest(BaseRequest):
    """One aiohttp session; the defaults are HTTPXRequest's (5 s timeouts, 1 s pool wait)."""

    def __init__(
        self,
        connection_pool_size: int = 256,
        read_timeout: float | None = 5.0,
        write_timeout: float | None = 5.0,
        connect_timeout: float | None = 5.0,
        pool_timeout: float | None = 1.0,
    ) -> None:
        self._pool_size = connection_pool_size
        self._read = read_timeout
        self._write = write_timeout  # aiohttp has no write timeout; kept for the interface
        self._connect = connect_timeout
        self._pool = pool_timeout
        self._session: aiohttp.ClientSession | None = None

    @property
    def read_timeout(self) -> float | None:
        return self._read

    @staticmethod
    def parse_json_payload(payload: bytes) -> Any:
        """PTB's reading of an answer (invalid UTF-8 replaced, invalid JSON a
        ``TelegramError``) with orjson, which reads an answer several times faster than
        ``json.loads``. What orjson reads otherwise goes to PTB's own ``json.loads``
        reading: what it refuses (``NaN``, lone surrogates, invalid JSON) and numbers of 19
        digits or more (past 64 bits it reads an integer as a float)."""
        if _LONG_NUMBER not in payload.translate(_DIGITS):
            try:
                return orjson.loads(payload.decode("utf-8", "replace"))
            except orjson.JSONDecodeError:
                pass
        return BaseRequest.parse_json_payload(payload)

    async def initialize(self) -> None:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=self._pool_size),
                headers={"User-Agent": self.USER_AGENT},
            )

    async def shutdown(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def do_request(
        self,
        url: str,
        method: str,
        request_data: RequestData | None = None,
        read_timeout: ODVInput[float] = BaseRequest.DEFAULT_NONE,
        write_timeout: ODVInput[float] = BaseRequest.DEFAULT_NONE,
        connect_timeout: ODVInput[float] = BaseRequest.DEFAULT_NONE,
        pool_timeout: ODVInput[float] = BaseRequest.DEFAULT_NONE,
    ) -> tuple[int, bytes]:
        if self._session is None:
            raise RuntimeError("AiohttpRequest is not initialized")
        read = _pick(read_timeout, self._read)
        connect = _pick(connect_timeout, self._connect)
        pool = _pick(pool_timeout, self._pool)
        timeout = aiohttp.ClientTimeout(
            total=None,
            # aiohttp's `connect` is the wait for a pooled connection plus making one.
            connect=None if connect is None and pool is None else (connect or 0) + (pool or 0),
            sock_connect=connect,
            sock_read=read,
        )
        data: Any = None
        headers: dict[str, str] | None = None
        if isinstance(request_data, JsonBody):
            data, headers = request_data.body, _JSON
        elif request_data is not None:
            if request_data.contains_files:
                form = aiohttp.FormData()
                for name, value in request_data.json_parameters.items():
                    form.add_field(name, value)
                for name, (filename, content, mime) in request_data.multipart_data.items():
                    form.add_field(name, content, filename=filename, content_type=mime)
                data = form
            else:
                data, headers = request_data.url_encoded_parameters().encode(), _FORM
        try:
            async with self._session.request(
                method, url, data=data, headers=headers, timeout=timeout
            ) as response:
                return response.status, await response.read()
        except aiohttp.ConnectionTimeoutError as exc:
            raise TimedOut(
                "Connect or pool timeout: the request was *not* sent to Telegram"
            ) from exc
        except TimeoutError as exc:  # aiohttp.ServerTimeoutError is one too
            raise TimedOut(_scrub(str(exc)) or None) from exc
        except aiohttp.ClientError as exc:
            raise NetworkError(f"aiohttp.{type(exc).__name__}: {_scrub(str(exc))}") from exc


class BotClient(Bot):
    """PTB's Bot with a getUpdates and a sendMessage that return the raw JSON.

    ``Bot.get_updates`` parses the whole batch and raises if one update does not parse,
    which would pin the offset on that update forever. Tether parses each update on its
    own, so one bad update is skipped (and logged) while the rest of the batch goes on.
    """

    async def get_update_dicts(
        self, offset: int | None, timeout: int, allowed_updates: Sequence[str], limit: int = 100
    ) -> list[Any]:
        result = await self._post_json(
            "getUpdates",
            {
                "offset": offset,
                "timeout": timeout,
                "limit": limit,
                "allowed_updates": list(allowed_updates),
            },
            read_timeout=timeout + _POLL_READ_MARGIN,
        )
        return result if isinstance(result, list) else []

    async def send_message_dict(self, params: dict[str, Any]) -> dict[str, Any]:
        """sendMessage, returning Telegram's JSON instead of a parsed ``Message``.

        Only ``message_id`` is read, and building PTB's Message object (every field of
        it set one by one) was a tenth of Tether's CPU per reply in bench/telegram.py.
        The parameters go as a JSON body (:meth:`_post_json`); transport and error mapping
        are still PTB's.
        """
        result = await self._post_json("sendMessage", params)
        return result if isinstance(result, dict) else {}

    async def _post_json(
        self,
        endpoint: str,
        params: Mapping[str, Any],
        *,
        read_timeout: ODVInput[float] = DEFAULT_NONE,
    ) -> Any:
        """``Bot._post`` with the parameters as one JSON body, when that is the same request.

        What ``_post`` does besides encoding: it adds ``api_kwargs`` (none here), replaces
        PTB's ``DefaultValue`` placeholders by their values (a plain ``Bot`` has no
        defaults; a placeholder, or any value JSON cannot hold, such as a PTB object, goes
        through ``_post`` unchanged) and drops None values (done here too). The transport
        must be :class:`AiohttpRequest`, the one that reads a :class:`JsonBody`. A text
        with a lone surrogate has no UTF-8 form: it goes through ``_post`` too, which
        fails on it as before (a ``NetworkError`` from the form encoding).
        """
        request = self._request[0] if endpoint == "getUpdates" else self._request[1]
        body = {key: value for key, value in params.items() if value is not None}
        try:
            encoded: bytes | None = orjson.dumps(body)
        except TypeError:  # orjson.JSONEncodeError; also a text that is not valid Unicode
            encoded = None
        if encoded is None or not isinstance(request, AiohttpRequest):
            return await self._post(endpoint, dict(params), read_timeout=read_timeout)
        return await request.post(
            url=f"{self._base_url}/{endpoint}",
            request_data=JsonBody(encoded),
            read_timeout=read_timeout,
        )


def _pick(value: ODVInput[float], default: float | None) -> float | None:
    return default if isinstance(value, DefaultValue) else value


def _scrub(text: str) -> str:
    return _TOKEN_IN_URL.sub("/bot<token>/", text)
