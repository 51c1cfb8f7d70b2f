"""In, by webhook: verify the post, commit its event to the inbox, and only then 200.

lark-oapi is not the webhook runtime here: its ``EventDispatcherHandler.do`` is
synchronous, answers every rejection with HTTP 500 and checks no timestamp freshness.
So this route verifies the request itself (signature over the raw body, timestamp,
verification token, decryption) and answers 401/403/400 for what fails, and 200 only
after the event is committed. Feishu redelivers anything not answered 200 within 3 s,
and sometimes delivers twice anyway; the inbox dedups on the event's key.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import math
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any, NamedTuple

import structlog
from aiohttp import web
from lark_oapi.core.utils.decryptor import AESCipher

from tether.adapters.feishu.cards import CARD_ACTION
from tether.adapters.kit import describe
from tether.adapters.untrusted import Malformed, header, load_json

if TYPE_CHECKING:
    from tether.adapters.base import Ingress

log = structlog.get_logger("tether.feishu")

TIMESTAMP_HEADER = "X-Lark-Request-Timestamp"
NONCE_HEADER = "X-Lark-Request-Nonce"
SIGNATURE_HEADER = "X-Lark-Signature"

#: Normalize one verified event and hand it to the inbox (returns once committed).
Commit = Callable[["Ingress", dict[str, Any]], Awaitable[None]]


class Rejected(NamedTuple):
    """A webhook request that failed verification: the HTTP status and why."""

    status: int
    reason: str


class Verifier:
    """Tells an authentic, fresh event post from anything else, with the console's
    encrypt key (decrypts and signs) and verification token (in every event)."""

    def __init__(self, encrypt_key: str, token: str | None, max_age: float) -> None:
        self._encrypt_key = encrypt_key
        self._cipher = AESCipher(encrypt_key) if encrypt_key else None
        self._token = token.encode() if token else None
        self._max_age = max_age

    @property
    def signed(self) -> bool:
        """Without an encrypt key Feishu neither encrypts nor signs its posts."""
        return bool(self._encrypt_key)

    def verify(
        self, body: bytes, headers: Mapping[str, str | bytes], now: float | None = None
    ) -> dict[str, Any] | Rejected:
        """The plaintext event of an authentic, fresh request, or why it was refused.

        With an encrypt key, Feishu encrypts the body and signs it: ``X-Lark-Signature``
        = sha256_hex(timestamp + nonce + encrypt_key + raw body). The signature is checked
        over the raw bytes (headers included, as bytes) before anything is parsed, so a
        stranger's body is never even decoded. Only ``url_verification`` (sent once, while
        the URL is configured) may come unsigned, and it is still token-checked; any
        other unsigned post is 401 whatever its body. Without an encrypt key the token
        inside the body is all there is, so the body is parsed first (safely: 400).
        """
        timestamp, nonce, signature = (
            _raw(headers, name) for name in (TIMESTAMP_HEADER, NONCE_HEADER, SIGNATURE_HEADER)
        )
        signed = bool(timestamp and nonce and signature)
        if self._encrypt_key and signed:
            assert timestamp is not None and nonce is not None and signature is not None
            expected = hashlib.sha256(timestamp + nonce + self._encrypt_key.encode() + body)
            if not hmac.compare_digest(expected.hexdigest().encode(), signature):
                return Rejected(401, "signature does not match")
        if timestamp is not None:
            stale = self._stale(timestamp, now)
            if stale:
                return Rejected(401, stale)
        data = self._plaintext(body)
        if self._encrypt_key and not signed:
            if isinstance(data, Rejected):  # unauthenticated: a 400 would say too much
                return data if data.status == 401 else Rejected(401, "missing signature headers")
            if data.get("type") != "url_verification":
                return Rejected(401, "missing signature headers")
        if isinstance(data, Rejected):
            return data
        envelope = data.get("header")
        token = envelope.get("token") if isinstance(envelope, dict) else data.get("token")
        if self._token is not None and not (
            isinstance(token, str)
            and hmac.compare_digest(token.encode("utf-8", "surrogatepass"), self._token)
        ):
            return Rejected(403, "verification token does not match")
        return data

    def _plaintext(self, body: bytes) -> dict[str, Any] | Rejected:
        """The event object in ``body``, decrypted when it came as ``{"encrypt": …}``."""
        parsed = _json_object(body, "body")
        if isinstance(parsed, Rejected):
            return parsed
        if "encrypt" in parsed:
            return self.decrypt(parsed["encrypt"])
        if self._cipher is not None:
            return Rejected(401, "body is not encrypted although encrypt_key is set")
        return parsed

    def decrypt(self, encrypted: Any) -> dict[str, Any] | Rejected:
        """The JSON object inside an ``{"encrypt": …}`` body, or why there is none."""
        if self._cipher is None:
            return Rejected(401, "body is encrypted but no encrypt_key is configured")
        if not isinstance(encrypted, str):
            return Rejected(400, "encrypt is not a string")
        try:
            raw = base64.b64decode(encrypted, validate=True)
        except (binascii.Error, ValueError):
            return Rejected(400, "encrypt is not base64")
        try:
            plaintext = self._cipher.decrypt(raw)
        except ValueError:  # bad length or padding: encrypted with another key
            return Rejected(401, "cannot decrypt (a different encrypt_key?)")
        return _json_object(plaintext, "decrypted body")

    def _stale(self, timestamp: bytes, now: float | None) -> str | None:
        try:
            sent_at = float(timestamp)
        except ValueError:
            return "timestamp is not a number"
        if not math.isfinite(sent_at):
            return "timestamp is not a number"
        age = (time.time() if now is None else now) - sent_at
        if abs(age) > self._max_age:
            return f"timestamp is {age:.0f} s from now (max {self._max_age:.0f})"
        return None


async def answer(
    request: web.Request, verifier: Verifier, inbox: Ingress | None, commit: Commit
) -> web.Response:
    """Verify, then answer url_verification or commit the event; 200 only after that.

    An authentic event that cannot be used is skipped inside ``commit`` and answered
    200: Feishu would retry anything else four times over seven hours, and no retry
    could make it usable. A failed commit is 503, so Feishu delivers it again.
    """
    headers = {
        name: value
        for name in (TIMESTAMP_HEADER, NONCE_HEADER, SIGNATURE_HEADER)
        if (value := header(request, name)) is not None
    }
    outcome = verifier.verify(await request.read(), headers)
    if isinstance(outcome, Rejected):
        log.warning("feishu.webhook_rejected", status=outcome.status, reason=outcome.reason)
        return web.json_response({"msg": outcome.reason}, status=outcome.status)
    if outcome.get("type") == "url_verification":
        log.info("feishu.url_verification")
        return web.json_response({"challenge": outcome.get("challenge", "")})
    if inbox is None:  # not started yet, or stopping: Feishu will deliver it again
        return web.json_response({"msg": "not ready"}, status=503)
    try:
        await commit(inbox, outcome)
    except Exception as exc:  # the store failed: not committed, so not acknowledged
        log.error("feishu.accept_failed", error=describe(exc))
        return web.json_response({"msg": "not stored, deliver again"}, status=503)
    envelope = outcome.get("header")
    if isinstance(envelope, dict) and envelope.get("event_type") == CARD_ACTION:
        return web.json_response({})  # a card callback's answer: no toast, card unchanged
    return web.json_response({"msg": "success"})


def _json_object(raw: bytes, what: str) -> dict[str, Any] | Rejected:
    """The JSON object in ``raw``, or a 400 saying why ``what`` is not one."""
    try:
        data = load_json(raw)
    except Malformed as exc:
        return Rejected(400, f"{what}: {exc}")
    if not isinstance(data, dict):
        return Rejected(400, f"{what} is not a JSON object")
    return data


def _raw(headers: Mapping[str, str | bytes], name: str) -> bytes | None:
    """A header as bytes. A ``str`` from aiohttp carries non-UTF-8 bytes as surrogates
    (``surrogateescape``); encoding it back the same way restores exactly those bytes."""
    value = headers.get(name)
    if value is None or isinstance(value, bytes):
        return value
    return value.encode("utf-8", "surrogateescape")
