"""Who may use the console: the login, the session cookie, CSRF tokens, login rate limits.

- **Credential**: ``http.ui.password_hash`` (scrypt, checked in a thread: it takes ~0.1 s
  on purpose) or ``http.ui.token``; either one typed at ``/ui/login`` logs in.
- **Session**: a random id and an expiry, signed (HMAC-SHA256) with a key derived from
  the credential, in an ``HttpOnly``, ``SameSite=Strict`` cookie scoped to ``/ui``
  (``Secure`` when the request came over TLS, here or at a reverse proxy: see
  :func:`over_tls`). Signed rather than kept in a table, so a gateway restart does not
  log the operator out; changing the credential does. Logout revokes the id in the
  store (:class:`~tether.memory.revocations.RevocationStore`) until it would have
  expired anyway, so the cookie stays refused after a restart and on every instance
  sharing the store: every request asks the store.
- **CSRF**: every request that changes state (any method but GET/HEAD) carries
  ``X-CSRF-Token`` or a ``csrf`` form field equal to the session's token, an HMAC of its
  id. The login form carries a one-time value, signed with its expiry and also set as a
  cookie (double submit); a login spends it in the store, whatever the outcome, so a
  captured form cannot be posted twice. SameSite=Strict already keeps other sites'
  requests cookieless; the token is the second lock, for browsers and proxies that do
  not honour it.
- **Host**: every ``/ui`` request's ``Host`` must be one of ``http.ui.allowed_hosts``
  (loopback names by default), or it is answered 421 before anything else: a page
  whose own name its owner made resolve to 127.0.0.1 (DNS rebinding) is same-origin
  with itself only, and reaches not even the login form.
- **Rate limit**: ``http.ui.login_attempts`` wrong logins per client address within
  ``http.ui.login_window`` seconds; more are answered 429 with ``Retry-After``, before the
  password is even checked. Behind a reverse proxy every client has the proxy's address:
  the limit then holds for all of them together, which errs on the safe side.
- **Headers**: every ``/ui`` response, pages, JSON, static files, redirects and errors
  alike, says ``nosniff``, may not be framed, and carries a CSP with ``object-src`` and
  ``base-uri`` shut (:func:`secure`).

Nothing here logs a password, a token or a cookie; failures log the client address.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import secrets
import time
from collections import deque
from collections.abc import Callable
from urllib.parse import quote

import structlog
from aiohttp import web
from aiohttp.typedefs import Handler, Middleware
from prometheus_client import Counter

from tether.config.console import UiConfig
from tether.gateway.web.passwd import verify_password
from tether.memory.revocations import RevocationStore

log = structlog.get_logger("tether.console")

COOKIE = "tether_ui"
LOGIN_COOKIE = "tether_ui_login"
CSRF_HEADER = "X-CSRF-Token"
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})

#: What the guard puts on a request it let through: the session id and its CSRF token.
SID = web.RequestKey("ui_sid", str)
CSRF = web.RequestKey("ui_csrf", str)

LOGINS = Counter("tether_console_logins_total", "Console logins by outcome", ["outcome"])
REFUSED = Counter(
    "tether_console_refused_total", "Console requests refused by the guard", ["reason"]
)

#: How long a login form may be posted after it was served, in seconds.
LOGIN_FORM_SECONDS = 3600
#: What every /ui response says (:func:`secure`).
HEADERS = {
    "Content-Security-Policy": (
        "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self';"
        " object-src 'none'; base-uri 'none'; frame-ancestors 'none'; form-action 'self'"
    ),
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "same-origin",
}


async def secure(request: web.Request, response: web.StreamResponse) -> None:
    """The console's headers on ``response`` (an ``on_response_prepare`` hook of the
    gateway's app, so that no response under ``/ui`` goes without them: a static file,
    a 404 the sub-application never saw, a stream)."""
    if request.path == "/ui" or request.path.startswith("/ui/"):
        response.headers.update(HEADERS)


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
    def __init__(self, config: UiConfig, revocations: Callable[[], RevocationStore]) -> None:
        self.config = config
        #: The store's revocations, read at each use (the host's store, not a copy).
        self.revocations = revocations
        material = b"tether-ui-session\0"
        if config.password_hash is not None:
            material += config.password_hash.get_secret_value().encode() + b"\0"
        if config.token is not None:
            material += config.token.get_secret_value().encode()
        self._key = hashlib.sha256(material).digest()
        self._failures: dict[str, deque[float]] = {}
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
        return self._signed(secrets.token_urlsafe(18), self.config.session_seconds)

    def _signed(self, value: str, seconds: float, purpose: str = "") -> str:
        body = f"{value}.{int(time.time() + seconds)}"
        return f"{body}.{self._sign(purpose + body)}"

    def _valid(self, signed: str, purpose: str = "") -> tuple[str, int] | None:
        """``(value, expiry)`` of an unexpired value this key signed, else None."""
        parts = signed.split(".")
        if len(parts) != 3 or not parts[1].isdigit() or len(parts[1]) > 12:
            return None
        value, expires, signature = parts
        if not hmac.compare_digest(signature, self._sign(f"{purpose}{value}.{expires}")):
            return None
        if int(expires) < time.time():
            return None
        return value, int(expires)

    async def session(self, request: web.Request) -> str | None:
        """The request's valid, unexpired, unrevoked session id, or None."""
        valid = self._valid(request.cookies.get(COOKIE, ""))
        if valid is None:
            return None
        sid = valid[0]
        if await self.revocations().revoked(f"session:{sid}"):
            return None
        return sid

    async def revoke(self, request: web.Request) -> None:
        """Log the request's session out, everywhere the store is shared, until it would
        have expired anyway."""
        valid = self._valid(request.cookies.get(COOKIE, ""))
        if valid is not None:
            sid, expires = valid
            await self.revocations().revoke(f"session:{sid}", float(expires))

    # -- the login form's one-time value ----------------------------------------------

    def login_nonce(self) -> str:
        """A login form's value: random, signed with its expiry; spent by one login."""
        return self._signed(secrets.token_urlsafe(18), LOGIN_FORM_SECONDS, "login:")

    async def spend_login_nonce(self, given: object, cookie: str) -> bool:
        """Whether a login may go on: the form's value equals its cookie (double
        submit), is one this key signed and unexpired, and is spent now, for the first
        time on any instance."""
        if not isinstance(given, str) or not cookie:
            return False
        if not hmac.compare_digest(given.encode(), cookie.encode()):
            return False
        valid = self._valid(given, "login:")
        if valid is None:
            return False
        nonce, expires = valid
        return await self.revocations().revoke(f"login:{nonce}", float(expires))

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
    """Every ``/ui`` route answers only to an allowed ``Host``; every one but the login
    page and the static files needs a session; every state-changing one, its CSRF
    token. Pages redirect to the login, APIs say 401."""

    @web.middleware
    async def guard(request: web.Request, handler: Handler) -> web.StreamResponse:
        path = request.path
        host = request.headers.get("Host", "")
        if not auth.config.allows(host):
            REFUSED.labels("host").inc()
            log.warning("console.host_refused", host=host[:200], path=path, remote=request.remote)
            return web.Response(
                status=421,
                text=f"This console does not answer to the host {host[:200]!r}:"
                " add it to http.ui.allowed_hosts if it is yours.",
            )
        if any("\x00" in value for value in request.query.values()):  # no store holds one
            return web.Response(status=400, text="the query holds a NUL character")
        if path in ("/ui/login", "/ui/login/") or path.startswith("/ui/static/"):
            return await handler(request)
        sid = await auth.session(request)
        if sid is None:
            if path.startswith("/ui/api/") or request.method not in SAFE_METHODS:
                return web.json_response({"error": "login required"}, status=401)
            raise web.HTTPFound(f"/ui/login?next={_quote(request.path_qs)}")
        request[SID] = sid
        request[CSRF] = auth.csrf(sid)
        if request.method not in SAFE_METHODS and not await auth.csrf_ok(request, request[CSRF]):
            REFUSED.labels("csrf").inc()
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
