"""The console's locks, without a browser: a real gateway's HTTP server on 127.0.0.1 and a
plain aiohttp client. No session → 401 or the login page; no CSRF token → 403; wrong
passwords → 429 after ``http.ui.login_attempts``; no body a client can send makes a 500;
the credential never appears in a page or a log line.
"""

from __future__ import annotations

import asyncio
import json
import re
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from http.cookies import SimpleCookie
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import structlog
from hypothesis import given
from hypothesis import strategies as st

from tests.support.config import make_settings
from tests.support.web import TOKEN, client, log_in, login_nonce
from tether.adapters.loopback import LoopbackAdapter
from tether.config import Settings, load_text
from tether.errors import ConfigError, GatewayError, SendFatal
from tether.gateway.app import Gateway
from tether.gateway.assembly import build_adapters
from tether.gateway.web.live import LiveHub
from tether.gateway.web.passwd import hash_password, verify_password
from tether.redaction import redactor

PASSWORD = "correct horse battery"
#: A cheap hash (N=2**10) for tests; the default cost is for real passwords.
PASSWORD_HASH = hash_password(PASSWORD, n=2**10)


def ui_settings(tmp_path: Path, **ui: Any) -> Settings:
    section = {"enabled": True, "token": TOKEN, "password_hash": PASSWORD_HASH, **ui}
    return make_settings(
        tmp_path,
        http={"enabled": True, "port": 0, "ui": section},
        platforms={"web": {"enabled": True}},
    )


@asynccontextmanager
async def console(settings: Settings) -> AsyncIterator[tuple[Gateway, str]]:
    adapters = {"loopback": LoopbackAdapter(), **build_adapters(settings)}
    gateway = Gateway(settings, adapters)
    await gateway.start()
    try:
        assert gateway.http is not None
        yield gateway, f"http://127.0.0.1:{gateway.http.port}"
    finally:
        await gateway.stop()


# -- config ---------------------------------------------------------------------------


def test_enabled_without_a_credential_is_a_config_error_naming_the_key() -> None:
    with pytest.raises(ConfigError) as failed:
        load_text("http: {ui: {enabled: true}}")
    assert "http.ui" in str(failed.value) and "password_hash" in str(failed.value)
    with pytest.raises(ConfigError, match=r"http\.ui\.password_hash"):
        load_text("http: {ui: {enabled: true, password_hash: plain-text}}")
    with pytest.raises(ConfigError, match=r"http\.ui\.token"):
        load_text("http: {ui: {enabled: true, token: short}}")
    assert load_text("{}").http.ui.enabled is False  # off unless asked for
    assert load_text("{}").http.host == "127.0.0.1"


def test_the_web_chat_needs_the_console(tmp_path: Path) -> None:
    settings = make_settings(tmp_path, platforms={"web": {"enabled": True}})
    with pytest.raises(GatewayError, match=r"platforms\.web.*http\.ui"):
        build_adapters(settings)


def test_password_hashes_verify_only_their_password() -> None:
    assert verify_password(PASSWORD, PASSWORD_HASH)
    assert not verify_password("wrong", PASSWORD_HASH)
    assert not verify_password(PASSWORD, "scrypt$1$1$1$AAAAAAAAAAAAAAAAAAAAAA$" + "A" * 43)
    assert hash_password(PASSWORD) != hash_password(PASSWORD)  # salted


# -- the locks ------------------------------------------------------------------------


async def test_console_is_absent_unless_enabled(tmp_path: Path) -> None:
    settings = make_settings(tmp_path, http={"enabled": True, "port": 0})
    async with (
        console(settings) as (_gateway, base),
        client() as session,
        session.get(f"{base}/ui/", allow_redirects=False) as response,
    ):
        assert response.status == 404


async def test_without_a_session_pages_redirect_and_apis_answer_401(tmp_path: Path) -> None:
    async with console(ui_settings(tmp_path)) as (_gateway, base), client() as session:
        for page in ("/ui", "/ui/", "/ui/events?key=x", "/ui/dead", "/ui/conversations",
                     "/ui/conversation?c=web:1", "/ui/jobs", "/ui/tasks", "/ui/search?q=x",
                     "/ui/live", "/ui/chat"):  # fmt: skip
            async with session.get(base + page) as response:
                assert response.url.path == "/ui/login", page
                assert "next=" in response.url.query_string
        for api in ("/ui/api/overview", "/ui/api/live", "/ui/api/chat/log?chat=a"):
            async with session.get(base + api) as response:
                assert response.status == 401, api
        for action in ("/ui/dead/retry", "/ui/conversation/fact", "/ui/jobs/run",
                       "/ui/tasks/cancel", "/ui/api/chat/send", "/ui/logout"):  # fmt: skip
            async with session.post(base + action, data={"key": "x"}) as response:
                assert response.status == 401, action
        async with session.get(f"{base}/ui/static/console.css") as response:
            assert response.status == 200  # no secrets in the stylesheet


async def test_a_session_cookie_is_httponly_strict_and_tamper_proof(tmp_path: Path) -> None:
    async with console(ui_settings(tmp_path)) as (_gateway, base), client() as session:
        nonce = await login_nonce(session, base)
        form = {"password": TOKEN, "csrf": nonce}
        async with session.post(f"{base}/ui/login", data=form, allow_redirects=False) as r:
            assert r.status == 302
            cookie = SimpleCookie(r.headers["Set-Cookie"])["tether_ui"]
        assert cookie["httponly"] and cookie["samesite"] == "Strict" and cookie["path"] == "/ui"
        sid, expires, signature = cookie.value.split(".")
        forged = f"{sid}.{int(expires) + 999_999}.{signature}"
        async with (
            aiohttp.ClientSession(cookies={"tether_ui": forged}) as other,
            other.get(f"{base}/ui/api/overview") as response,
        ):
            assert response.status == 401


@pytest.mark.parametrize(
    ("headers", "secure"),
    [
        ({}, False),
        ({"X-Forwarded-Proto": "https"}, True),
        ({"X-Forwarded-Proto": "https, http"}, True),
        ({"X-Forwarded-Proto": "http"}, False),
        ({"Forwarded": "for=192.0.2.1;proto=https"}, True),
        ({"Forwarded": "proto=http"}, False),
    ],
)
async def test_cookies_are_secure_when_a_proxy_says_the_browser_used_https(
    tmp_path: Path, headers: dict[str, str], secure: bool
) -> None:
    """Behind a reverse proxy that terminates TLS the gateway sees plain HTTP; its
    cookies must still be HTTPS-only when the proxy says the browser used HTTPS."""
    async with console(ui_settings(tmp_path)) as (_gateway, base), client() as session:
        async with session.get(f"{base}/ui/login", headers=headers) as r:
            nonce_cookie = SimpleCookie(r.headers["Set-Cookie"])["tether_ui_login"]
            found = re.search(r'name="csrf" value="([^"]+)"', await r.text())
        assert found
        form = {"password": TOKEN, "csrf": found[1]}
        # What the browser sends back over HTTPS (this client, on plain HTTP, would not
        # send a Secure cookie).
        sent = {**headers, "Cookie": f"tether_ui_login={nonce_cookie.value}"}
        async with session.post(
            f"{base}/ui/login", data=form, headers=sent, allow_redirects=False
        ) as r:
            assert r.status == 302
            cookie = SimpleCookie(r.headers["Set-Cookie"])["tether_ui"]
    assert bool(cookie["secure"]) is secure
    assert bool(nonce_cookie["secure"]) is secure


async def test_state_changes_need_the_csrf_token(tmp_path: Path) -> None:
    async with console(ui_settings(tmp_path)) as (_gateway, base), client() as session:
        csrf = await log_in(session, base)
        async with session.post(f"{base}/ui/dead/retry", data={"key": "x"}) as response:
            assert response.status == 403
        bad = {"key": "x", "csrf": "0" * 64}
        async with session.post(f"{base}/ui/dead/retry", data=bad) as response:
            assert response.status == 403
        async with session.post(
            f"{base}/ui/api/chat/send", json={"chat": "a", "id": "b", "text": "hi"}
        ) as response:
            assert response.status == 403
        ok = {"key": "x", "csrf": csrf}
        async with session.post(f"{base}/ui/dead/retry", data=ok, allow_redirects=False) as r:
            assert r.status == 302 and r.headers["Location"] == "/ui/dead?missing=x"
        # The login form has its own token (double submit): without it, no login.
        async with (
            client() as stranger,
            stranger.post(f"{base}/ui/login", data={"password": TOKEN}) as response,
        ):
            assert response.status == 403
        # Logging out revokes the session.
        async with session.post(f"{base}/ui/logout", data={"csrf": csrf}) as response:
            assert response.url.path == "/ui/login"
        async with session.get(f"{base}/ui/api/overview") as response:
            assert response.status == 401


async def test_wrong_passwords_are_rate_limited_per_client(tmp_path: Path) -> None:
    settings = ui_settings(tmp_path, login_attempts=3, login_window=600)
    async with console(settings) as (_gateway, base), client() as session:
        for _ in range(3):
            nonce = await login_nonce(session, base)
            form = {"password": "guess", "csrf": nonce}
            async with session.post(f"{base}/ui/login", data=form) as response:
                assert response.status == 401
                assert "Wrong password" in await response.text()
        nonce = await login_nonce(session, base)
        form = {"password": TOKEN, "csrf": nonce}  # even the right one waits now
        async with session.post(f"{base}/ui/login", data=form) as response:
            assert response.status == 429
            assert int(response.headers["Retry-After"]) > 0


async def test_the_password_logs_in_and_no_secret_reaches_a_page(tmp_path: Path) -> None:
    async with console(ui_settings(tmp_path)) as (gateway, base), client() as session:
        await log_in(session, base, PASSWORD)
        for page in ("/ui/", "/ui/events", "/ui/dead", "/ui/conversations", "/ui/jobs",
                     "/ui/live", "/ui/chat", "/ui/api/overview"):  # fmt: skip
            async with session.get(base + page) as response:
                assert response.status == 200, page
                body = await response.text()
                assert TOKEN not in body and PASSWORD_HASH not in body and PASSWORD not in body
        assert "web" in gateway.adapters


# -- whatever a client sends, never a 500 ---------------------------------------------

_text = st.text(st.characters(codec="utf-8"), max_size=80)
_forms = st.dictionaries(
    st.sampled_from(["password", "csrf", "next", "key", "c", "id", "action", "text", "job"]),
    _text,
)


@pytest.mark.slow
async def test_no_form_body_makes_a_server_error(tmp_path: Path) -> None:
    """Hypothesis drives one running gateway from a thread (its examples are sync); each
    body goes to the login and to every action, logged in with a valid CSRF token."""
    settings = ui_settings(tmp_path, login_attempts=10_000)
    loop = asyncio.get_running_loop()
    async with console(settings) as (_gateway, base), client() as session:
        csrf = await log_in(session, base)

        async def post(path: str, form: dict[str, str]) -> tuple[int, str]:
            body = form if path == "/ui/login" else {**form, "csrf": csrf}
            async with session.post(base + path, data=body, allow_redirects=False) as response:
                return response.status, await response.text()

        async def send(form: dict[str, str]) -> int:
            headers = {"X-CSRF-Token": csrf}
            async with session.post(f"{base}/ui/api/chat/send", json=form, headers=headers) as r:
                return r.status

        paths = ["/ui/login", "/ui/dead/retry", "/ui/conversation/fact", "/ui/jobs/run",
                 "/ui/tasks/cancel"]  # fmt: skip

        @given(form=_forms, path=st.sampled_from(paths))
        def example(form: dict[str, str], path: str) -> None:
            status, text = asyncio.run_coroutine_threadsafe(post(path, form), loop).result(30)
            assert status < 500, (path, form, text)
            assert asyncio.run_coroutine_threadsafe(send(form), loop).result(30) < 500

        await asyncio.to_thread(example)


# -- actions over plain HTTP ----------------------------------------------------------


async def test_a_failed_reply_is_listed_and_retried_from_the_dead_page(tmp_path: Path) -> None:
    loop = LoopbackAdapter()
    settings = ui_settings(tmp_path)
    gateway = Gateway(settings, {"loopback": loop})
    await gateway.start()
    try:
        assert gateway.http is not None
        base = f"http://127.0.0.1:{gateway.http.port}"
        loop.fail_next(SendFatal("chat not found"))
        event = await loop.say("hello", chat="9")
        await gateway.drain()
        assert loop.sent == []
        async with client() as session:
            csrf = await log_in(session, base)
            async with session.get(f"{base}/ui/dead") as response:
                page = await response.text()
            assert f'data-key="{event.key}#0"' in page and "chat not found" in page
            form = {"key": f"{event.key}#0", "csrf": csrf}
            async with session.post(f"{base}/ui/dead/retry", data=form) as response:
                assert "Requeued" in await response.text()
        [delivered] = await loop.wait_for_sent(1)
        assert delivered.message.text == "hello"
    finally:
        await gateway.stop()


async def test_the_live_stream_is_scrubbed_like_the_log() -> None:
    hub = LiveHub()
    redactor.update(["live-secret-0123456789"])
    hub.attach()
    queue: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue()
    hub._queues.add(queue)
    hub._loop, hub._thread = asyncio.get_running_loop(), threading.get_ident()
    structlog.get_logger("test").info("event.test", key="k", note="token live-secret-0123456789")
    structlog.get_logger("test").info("not a transition")
    line = queue.get_nowait()
    assert line is not None and line["event"] == "event.test"
    assert "live-secret" not in json.dumps(line)
    assert queue.empty()


async def test_an_open_live_stream_ends_when_the_gateway_stops(tmp_path: Path) -> None:
    """aiohttp waits for running handlers at shutdown (60 s by default): the stream must
    end by itself, or every stop would wait on a browser tab left open."""
    gateway = Gateway(ui_settings(tmp_path), {"loopback": LoopbackAdapter()})
    await gateway.start()
    assert gateway.http is not None
    base = f"http://127.0.0.1:{gateway.http.port}"
    async with client() as session:
        await log_in(session, base)
        async with session.get(f"{base}/ui/api/live") as stream:
            assert stream.headers["Content-Type"] == "text/event-stream"
            assert await stream.content.readline() == b": connected\n"
            await gateway.stop()
            rest = await stream.content.read()  # EOF: the server ended the stream
        assert b"gateway.stopping" in rest  # it saw the stop begin, as a transition


@pytest.mark.slow
async def test_no_query_makes_a_server_error(tmp_path: Path) -> None:
    """The read-only pages take their input from the query string: any of it is a page."""
    loop = asyncio.get_running_loop()
    async with console(ui_settings(tmp_path)) as (_gateway, base), client() as session:
        await log_in(session, base)

        async def get(path: str, params: dict[str, str]) -> tuple[int, str]:
            async with session.get(base + path, params=params, allow_redirects=False) as r:
                return r.status, await r.text()

        pages = ["/ui/events", "/ui/event", "/ui/conversation", "/ui/dead", "/ui/jobs",
                 "/ui/api/chat/log", "/ui/login"]  # fmt: skip
        keys = st.sampled_from(["key", "conversation", "status", "c", "chat", "next", "x"])

        @given(path=st.sampled_from(pages), params=st.dictionaries(keys, _text))
        def example(path: str, params: dict[str, str]) -> None:
            status, text = asyncio.run_coroutine_threadsafe(get(path, params), loop).result(30)
            assert status < 500, (path, params, text)

        await asyncio.to_thread(example)
