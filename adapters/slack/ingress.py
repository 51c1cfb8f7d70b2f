"""In over HTTP (``mode: events``): the Events API, slash commands and interactivity, each
verified, committed to the inbox, and only then answered 200.

Slack signs every post: ``X-Slack-Signature`` = ``v0=`` HMAC-SHA256 of
``v0:{X-Slack-Request-Timestamp}:{raw body}`` with the app's signing secret. The raw
bytes are checked (in constant time) before anything is parsed, and a timestamp more
than ``max_age`` (5 minutes) from now is refused, so a recorded post cannot be replayed
later: both are 401 and store nothing. Slack wants a 2xx within 3 s and else delivers
an event again (``X-Slack-Retry-Num``); the redelivery has the same payload, so the
normalizer's key makes it the same inbox row. A failed commit is 503, so Slack retries.

Three bodies arrive on one route: JSON (``event_callback``, ``url_verification``), a
form with ``payload=`` JSON (``block_actions``), and a form of fields (a slash command).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import math
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, NamedTuple
from urllib.parse import parse_qsl

import structlog
from aiohttp import web

from tether.adapters.kit import describe
from tether.adapters.untrusted import Malformed, header, load_json

log = structlog.get_logger("tether.slack")

TIMESTAMP_HEADER = "X-Slack-Request-Timestamp"
SIGNATURE_HEADER = "X-Slack-Signature"
RETRY_HEADER = "X-Slack-Retry-Num"

#: Normalize one verified payload and hand it to the inbox (returns once committed);
#: raises when it was not committed (stopping, or the store failed).
Commit = Callable[[dict[str, Any]], Awaitable[None]]


class Rejected(NamedTuple):
    """A post that failed verification or parsing: the HTTP status and why."""

    status: int
    reason: str


class Verifier:
    """Tells an authentic, fresh post from anything else, with the signing secret."""

    def __init__(self, signing_secret: str, max_age: float = 300.0) -> None:
        self._secret = signing_secret.encode()
        self._max_age = max_age

    def verify(
        self, body: bytes, headers: Mapping[str, str | bytes], now: float | None = None
    ) -> dict[str, Any] | Rejected:
        """The payload of an authentic, fresh post, or why it was refused. Headers may
        be ``str`` or the bytes that arrived (:func:`~tether.adapters.untrusted.header`)."""
        timestamp, signature = _raw(headers, TIMESTAMP_HEADER), _raw(headers, SIGNATURE_HEADER)
        if not timestamp or not signature:
            return Rejected(401, "missing signature headers")
        try:
            sent_at = float(timestamp)
        except ValueError:
            return Rejected(401, "timestamp is not a number")
        if not math.isfinite(sent_at):
            return Rejected(401, "timestamp is not a number")
        age = (time.time() if now is None else now) - sent_at
        if abs(age) > self._max_age:
            return Rejected(401, f"timestamp is {age:.0f} s from now (max {self._max_age:.0f})")
        base = b"v0:" + timestamp + b":" + body
        expected = b"v0=" + hmac.new(self._secret, base, hashlib.sha256).hexdigest().encode()
        if not hmac.compare_digest(expected, signature):
            return Rejected(401, "signature does not match")
        kind = _raw(headers, "Content-Type") or b""
        return parse(body, kind.decode("latin-1"))


def parse(body: bytes, content_type: str) -> dict[str, Any] | Rejected:
    """The payload of a verified body: JSON, ``payload=`` JSON in a form, or the form."""
    if content_type.split(";")[0].strip().lower() == "application/x-www-form-urlencoded":
        try:
            fields = dict(parse_qsl(body.decode("utf-8"), keep_blank_values=True))
        except (UnicodeDecodeError, ValueError):
            return Rejected(400, "form body is not UTF-8")
        if "payload" not in fields:
            return fields  # a slash command's fields
        return _object(fields["payload"].encode(), "payload")
    return _object(body, "body")


async def answer(request: web.Request, verifier: Verifier, commit: Commit | None) -> web.Response:
    """Verify, then answer ``url_verification`` or commit; 200 only after the commit.

    An authentic payload that cannot be used is dropped inside ``commit`` and still
    answered 200: no redelivery could make it usable.
    """
    headers: dict[str, str | bytes] = {
        name: value
        for name in (TIMESTAMP_HEADER, SIGNATURE_HEADER, "Content-Type")
        if (value := header(request, name)) is not None
    }
    outcome = verifier.verify(await request.read(), headers)
    if isinstance(outcome, Rejected):
        log.warning("slack.request_rejected", status=outcome.status, reason=outcome.reason)
        return web.json_response({"error": outcome.reason}, status=outcome.status)
    if outcome.get("type") == "url_verification":
        log.info("slack.url_verification")
        return web.json_response({"challenge": outcome.get("challenge", "")})
    if commit is None:  # not started yet, or stopping: Slack delivers an event again
        return web.json_response({"error": "not ready"}, status=503)
    try:
        await commit(outcome)
    except Exception as exc:  # not committed, so not acknowledged
        log.error(
            "slack.accept_failed", error=describe(exc), retry=request.headers.get(RETRY_HEADER)
        )
        return web.json_response({"error": "not stored, deliver again"}, status=503)
    return web.Response(status=200)


def _raw(headers: Mapping[str, str | bytes], name: str) -> bytes | None:
    """A header as bytes (a ``str`` from aiohttp carries odd bytes as surrogates)."""
    value = headers.get(name)
    if value is None or isinstance(value, bytes):
        return value
    return value.encode("utf-8", "surrogateescape")


def _object(raw: bytes, what: str) -> dict[str, Any] | Rejected:
    try:
        data = load_json(raw)
    except (Malformed, json.JSONDecodeError) as exc:
        return Rejected(400, f"{what}: {exc}")
    if not isinstance(data, dict):
        return Rejected(400, f"{what} is not a JSON object")
    return data
