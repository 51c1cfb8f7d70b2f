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
import json
import math
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any, NamedTuple

import structlog
from aiohttp import web
from lark_oapi.core.utils.decryptor import AESCipher

from tether.adapters.kit import describe

if TYPE_CHECKING:
    from tether.gateway.inbox import Inbox

log = structlog.get_logger("tether.feishu")

TIMESTAMP_HEADER = "X-Lark-Request-Timestamp"
NONCE_HEADER = "X-Lark-Request-Nonce"
SIGNATURE_HEADER = "X-Lark-Signature"

#: Normalize one verified event and hand it to the inbox (returns once committed).
Commit = Callable[["Inbox", dict[str, Any]], Awaitable[None]]


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
        self, body: bytes, headers: Mapping[str, str], now: float | None = None
    ) -> dict[str, Any] | Rejected:
        """The plaintext event of an authentic, fresh request, or why it was refused.

        With an encrypt key, Feishu encrypts the body and signs it: ``X-Lark-Signature``
        = sha256_hex(timestamp + nonce + encrypt_key + raw body). The signature is checked
        over the raw bytes before anything is decrypted; only ``url_verification`` (sent
        once, while the URL is configured) may come unsigned, and it is still token-checked.
        """
        try:
            parsed = json.loads(body)
        except ValueError:
            return Rejected(400, "body is not JSON")
        if not isinstance(parsed, dict):
            return Rejected(400, "body is not a JSON object")
        data: dict[str, Any] = parsed
        timestamp = headers.get(TIMESTAMP_HEADER)
        nonce = headers.get(NONCE_HEADER)
        signature = headers.get(SIGNATURE_HEADER)
        signed = bool(timestamp and nonce and signature)
        if self._encrypt_key and signed:
            assert timestamp is not None and nonce is not None and signature is not None
            expected = hashlib.sha256(
                (timestamp + nonce + self._encrypt_key).encode() + body
            ).hexdigest()
            if not hmac.compare_digest(expected.encode(), signature.encode()):
                return Rejected(401, "signature does not match")
        if timestamp is not None:
            stale = self._stale(timestamp, now)
            if stale:
                return Rejected(401, stale)
        if "encrypt" in data:
            decrypted = self.decrypt(data["encrypt"])
            if isinstance(decrypted, Rejected):
                return decrypted
            data = decrypted
        elif self._cipher is not None:
            return Rejected(401, "body is not encrypted although encrypt_key is set")
        if self._encrypt_key and not signed and data.get("type") != "url_verification":
            return Rejected(401, "missing signature headers")
        header = data.get("header")
        token = header.get("token") if isinstance(header, dict) else data.get("token")
        if self._token is not None and not (
            isinstance(token, str) and hmac.compare_digest(token.encode(), self._token)
        ):
            return Rejected(403, "verification token does not match")
        return data

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
            data = json.loads(self._cipher.decrypt(raw))
        except ValueError:  # bad padding or garbage: encrypted with another key
            return Rejected(401, "cannot decrypt (a different encrypt_key?)")
        if not isinstance(data, dict):
            return Rejected(400, "decrypted body is not a JSON object")
        return dict(data)

    def _stale(self, timestamp: str, now: float | None) -> str | None:
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
    request: web.Request, verifier: Verifier, inbox: Inbox | None, commit: Commit
) -> web.Response:
    """Verify, then answer url_verification or commit the event; 200 only after that."""
    body = await request.read()
    outcome = verifier.verify(body, request.headers)
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
    return web.json_response({"msg": "success"})
