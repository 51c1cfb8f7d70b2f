"""Who may use the console: the login, the session cookie, CSRF tokens, login rate limits.

- **Credential**: ``http.ui.password_hash`` (scrypt, checked in a thread: it takes ~0.1 s
  on purpose) or ``http.ui.token``; either one typed at ``/ui/login`` logs in.
- **Session**: a random id and an expiry, signed (HMAC-SHA256) with a key derived from
  the credential, in an ``HttpOnly``, ``SameSite=Strict`` cookie scoped to ``/ui``
  (``Secure`` when the request came over TLS, here or at a reverse proxy: see
  :func:`over_tls`). Signed rather than kept in a table, so a
  gateway restart does not log the operator out; changing the credential does. Logout
  revokes the id in this process until it would have expired anyway.
- **CSRF**: every request that changes state (any method but GET/HEAD) carries
  ``X-CSRF-Token`` or a ``csrf`` form field equal to the session's token, an HMAC of its
  id; the login form carries a one-time value also set as a cookie (double submit).
  SameSite=Strict already keeps other sites' requests cookieless; the token is the
  second lock, for browsers and proxies that do not honour it.
- **Rate limit**: ``http.ui.login_attempts`` wrong logins per client address within
  ``http.ui.login_window`` seconds; more are answered 429 with ``Retry-After``, before the
  password is even checked. Behind a reverse proxy every client has the proxy's address:
  the limit then holds for all of them together, which errs on the safe side.

Nothing here logs a password, a token or a cookie; failures log the client address.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import secrets
import time
from collections import deque
from urllib.parse import quote

import structlog
from aiohttp import web
from aiohttp.typedefs import Handler, Middleware
from prometheus_client import Counter

from tether.config.console import UiConfig
from tether.gateway.web.passwd import verify_password

log = structlog.get_logger("tether.console")

COOKIE = "tether_ui"
LOGIN_COOKIE = "tether_ui_login"
CSRF_HEADER = "X-CSRF-Token"
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})

#: What the guard puts on a request it let through: the session id and its CSRF token.
SID = web.RequestKey("ui_sid", str)
CSRF = web.RequestKey("ui_csrf", str)

LOGINS = Counter("tether_console_logins_total", "Console logins by outcome", ["outcome"])


def over_tls(request: web.Request) -> bool:
    """Whether the browser reached us over HTTPS: directly, or through a reverse proxy
    that terminates TLS and says so (``X-Forwarded-Proto: https``, or RFC 7239's
    ``Forwarded: proto=https``, the first hop). Behind such a proxy the request reaching
    the gateway is plain HTTP, and a cookie without ``Secure`` could later be sent over
    plain HTTP. Trusting the header is safe for this one use: someone who forges it
    only makes their own cookie HTTPS-only."""
    if request.secure:
        return True
    forwarded = request.headers.get("X-Forwarded-Proto", "")
    if forwarded.split(",")[0].strip().lower() == "https":
        return True
    hops = request.forwarded
    return bool(hops) and str(hops[0].get("proto", "")).lower() == "https"


class Auth:
    def __init__(self, config: UiConfig) -> None:
        self.config = config
        material = b"tether-ui-session\0"
        if config.password_hash is not None:
            material += config.password_hash.get_secret_value().encode() + b"\0"
        if config.token is not None:
            material += config.token.get_secret_value().encode()
        self._key = hashlib.sha256(material).digest()
        self._failures: dict[str, deque[float]] = {}
        self._revoked: dict[str, float] = {}
        #: Password checks at once: each is ~0.1 s of scrypt and 32 MiB, and many client
        #: addresses each within their limit must not take the gateway's CPU or memory.
        self._checks = asyncio.Semaphore(2)

    # -- the credential ---------------------------------------------------------------

    async def check(self, given: str) -> bool:
        """Does ``given`` match the password hash or the token? Both compares are
        constant-time; the hash runs in a thread (scrypt is slow by design)."""
        ok = False
        token = self.config.token
        if token is not None:
            ok = hmac.compare_digest(given.encode(), token.get_secret_value().encode())
        stored = self.config.password_hash
        if not ok and stored is not None:
            async with self._checks:
                ok = await asyncio.to_thread(verify_password, given, stored.get_secret_value())
        return ok

    def wait(self, remote: str) -> float:
        """Seconds ``remote`` must wait before its next login try (0: it may try now)."""
        window = self.config.login_window
        failures = self._failures.get(remote)
        if not failures:
            return 0.0
        now = time.monotonic()
        while failures and failures[0] <= now - window:
            failures.popleft()
        if not failures:
            del self._failures[remote]
            return 0.0
        if len(failures) < self.config.login_attempts:
            return 0.0
        return max(failures[0] + window - now, 1.0)

    def failed(self, remote: str) -> None:
        self._failures.setdefault(remote, deque()).append(time.monotonic())
        if len(self._failures) > 10_000:  # many addresses: forget the oldest, stay bounded
            self._failures.pop(next(iter(self._failures)))
        LOGINS.labels("failed").inc()
        log.warning("console.login_failed", remote=remote)

    def succeeded(self, remote: str) -> None:
        self._failures.pop(remote, None)
        LOGINS.labels("ok").inc()
        log.info("console.login", remote=remote)

    # -- the session ------------------------------------------------------------------

    def _sign(self, text: str) -> str:
        return hmac.new(self._key, text.encode(), hashlib.sha256).hexdigest()

    def new_session(self) -> str:
        """A cookie value: ``id.expiry.signature``."""
        expires = int(time.time() + self.config.session_seconds)
        body = f"{secrets.token_urlsafe(18)}.{expires}"
        return f"{body}.{self._sign(body)}"

    def session(self, request: web.Request) -> str | None:
        """The request's valid, unexpired, unrevoked session id, or None."""
        value = request.cookies.get(COOKIE, "")
        parts = value.split(".")
        if len(parts) != 3 or not parts[1].isdigit():
            return None
        sid, expires, signature = parts
        if not hmac.compare_digest(signature, self._sign(f"{sid}.{expires}")):
            return None
        if int(expires) < time.time() or sid in self._revoked:
            return None
        return sid

    def revoke(self, sid: str) -> None:
        now = time.time()
        self._revoked = {s: at for s, at in self._revoked.items() if at > now}
        self._revoked[sid] = now + self.config.session_seconds

    def set_cookie(self, response: web.StreamResponse, request: web.Request, value: str) -> None:
        response.set_cookie(
            COOKIE,
            value,
            path="/ui",
            max_age=int(self.config.session_seconds),
            httponly=True,
            samesite="Strict",
            secure=over_tls(request),
        )

    # -- CSRF -------------------------------------------------------------------------

    def csrf(self, sid: str) -> str:
        return self._sign(f"csrf:{sid}")

    async def csrf_ok(self, request: web.Request, expected: str) -> bool:
        given = request.headers.get(CSRF_HEADER)
        if given is None and request.content_type in (
            "application/x-www-form-urlencoded",
            "multipart/form-data",
        ):
            form = await request.post()
            field = form.get("csrf")
            given = field if isinstance(field, str) else None
        return given is not None and hmac.compare_digest(given.encode(), expected.encode())


def middleware(auth: Auth) -> Middleware:
    """Every ``/ui`` route but the login page and the static files needs a session;
    every state-changing one, its CSRF token. Pages redirect to the login, APIs say 401."""

    @web.middleware
    async def guard(request: web.Request, handler: Handler) -> web.StreamResponse:
        path = request.path
        if path in ("/ui/login", "/ui/login/") or path.startswith("/ui/static/"):
            return await handler(request)
        sid = auth.session(request)
        if sid is None:
            if path.startswith("/ui/api/") or request.method not in SAFE_METHODS:
                return web.json_response({"error": "login required"}, status=401)
            raise web.HTTPFound(f"/ui/login?next={_quote(request.path_qs)}")
        request[SID] = sid
        request[CSRF] = auth.csrf(sid)
        if request.method not in SAFE_METHODS and not await auth.csrf_ok(request, request[CSRF]):
            log.warning("console.csrf_refused", path=path, remote=request.remote)
            return web.json_response({"error": "missing or wrong CSRF token"}, status=403)
        response = await handler(request)
        response.headers.setdefault("Cache-Control", "no-store")
        return response

    return guard


def _quote(path: str) -> str:
    return quote(path, safe="")


def safe_next(target: str) -> str:
    """Where to go after the login: only a path inside the console, never another site."""
    if target.startswith("/ui") and not target.startswith("//") and "\\" not in target:
        return target
    return "/ui"
