"""What a logout and a login form mean beyond the process that served them: a cookie
given up at logout stays refused after a restart and on every PostgreSQL instance, and a
login form's one-time value is spent by its first post, whichever instance took it.

Real gateways (SQLite, then two on one PostgreSQL database) on 127.0.0.1 and a plain
aiohttp client carrying the cookie a browser would.
"""

from __future__ import annotations

import re
from http.cookies import SimpleCookie
from pathlib import Path
from typing import Any

import aiohttp

from tests.support.config import make_settings
from tests.support.gateway import base_url, running
from tests.support.web import TOKEN, client, log_in, login_nonce
from tether.config import Settings

UI = {"enabled": True, "token": TOKEN}


def ui_settings(tmp_path: Path, **sections: Any) -> Settings:
    return make_settings(tmp_path, http={"enabled": True, "port": 0, "ui": UI}, **sections)


async def status_with(cookie: str, url: str) -> int:
    """What ``url`` answers a client that carries only the session cookie ``cookie``."""
    async with (
        aiohttp.ClientSession(cookies={"tether_ui": cookie}) as other,
        other.get(url, allow_redirects=False) as response,
    ):
        return response.status


def session_cookie(session: aiohttp.ClientSession) -> str:
    [cookie] = [c.value for c in session.cookie_jar if c.key == "tether_ui"]
    return cookie


async def test_a_cookie_given_up_at_logout_stays_refused_after_a_restart(tmp_path: Path) -> None:
    """Revocations lived in the process: a restart forgot them, and the signed cookie
    was good again for the rest of its 12 hours."""
    settings = ui_settings(tmp_path)
    async with running(settings) as (gateway, _), client() as session:
        base = base_url(gateway)
        csrf = await log_in(session, base)
        cookie = session_cookie(session)
        assert await status_with(cookie, f"{base}/ui/api/overview") == 200
        async with session.post(f"{base}/ui/logout", data={"csrf": csrf}) as response:
            assert response.url.path == "/ui/login"
        assert await status_with(cookie, f"{base}/ui/api/overview") == 401
    async with running(settings) as (gateway, _):  # a new process state, the same store
        assert await status_with(cookie, f"{base_url(gateway)}/ui/api/overview") == 401
        assert await status_with(cookie, f"{base_url(gateway)}/ui/") == 302  # to the login


async def test_a_logout_on_one_postgresql_instance_holds_on_the_other(
    tmp_path: Path, pg_dsn: str
) -> None:
    settings = ui_settings(tmp_path, memory={"store": pg_dsn})
    async with running(settings) as (first, _), running(settings) as (second, _):
        one, two = base_url(first), base_url(second)
        async with client() as session:
            csrf = await log_in(session, one)
            cookie = session_cookie(session)
            # Behind a balancer: the same cookie is good on either instance.
            assert await status_with(cookie, f"{two}/ui/api/overview") == 200
            async with session.post(f"{one}/ui/logout", data={"csrf": csrf}) as response:
                assert response.url.path == "/ui/login"
        assert await status_with(cookie, f"{one}/ui/api/overview") == 401
        assert await status_with(cookie, f"{two}/ui/api/overview") == 401
        # A new login is a new session, good on both again.
        async with client() as session:
            await log_in(session, two)
            fresh = session_cookie(session)
        assert fresh != cookie
        assert await status_with(fresh, f"{one}/ui/api/overview") == 200


async def login_form(session: aiohttp.ClientSession, base: str) -> tuple[str, str]:
    """A login form's one-time value and the cookie it was set with."""
    async with session.get(f"{base}/ui/login") as response:
        cookie = SimpleCookie(response.headers["Set-Cookie"])["tether_ui_login"].value
        found = re.search(r'name="csrf" value="([^"]+)"', await response.text())
    assert found
    return found[1], cookie


async def post_login(base: str, nonce: str, cookie: str, password: str) -> int:
    async with (
        aiohttp.ClientSession(cookies={"tether_ui_login": cookie}) as other,
        other.post(
            f"{base}/ui/login",
            data={"password": password, "csrf": nonce},
            allow_redirects=False,
        ) as response,
    ):
        return response.status


async def test_a_login_form_is_spent_by_its_first_post_on_every_instance(
    tmp_path: Path, pg_dsn: str
) -> None:
    """The form's value was only compared with its cookie: a captured pair could be
    posted again and again (a guess each time, or a login after the operator's)."""
    settings = ui_settings(tmp_path, memory={"store": pg_dsn})
    async with running(settings) as (first, _), running(settings) as (second, _):
        one, two = base_url(first), base_url(second)
        async with client() as session:
            nonce, cookie = await login_form(session, one)
        assert await post_login(one, nonce, cookie, "a wrong guess") == 401
        assert await post_login(one, nonce, cookie, TOKEN) == 403  # spent, even by a miss
        assert await post_login(two, nonce, cookie, TOKEN) == 403  # and on the other one
        async with client() as session:
            nonce, cookie = await login_form(session, two)
        assert await post_login(one, nonce, cookie, TOKEN) == 302  # a fresh form logs in
        assert await post_login(one, nonce, cookie, TOKEN) == 403  # once
        # A value this gateway did not sign is refused like a missing one.
        forged = "x" * 24 + ".9999999999.0"
        assert await post_login(one, forged, forged, TOKEN) == 403


async def test_the_login_form_after_a_refusal_is_a_fresh_one(tmp_path: Path) -> None:
    """Spending the value on a wrong password must not lock the operator out: the page
    that says so carries a new form."""
    async with running(ui_settings(tmp_path)) as (gateway, _), client() as session:
        base = base_url(gateway)
        nonce = await login_nonce(session, base)
        form = {"password": "wrong", "csrf": nonce}
        async with session.post(f"{base}/ui/login", data=form) as response:
            assert response.status == 401
            again = re.search(r'name="csrf" value="([^"]+)"', await response.text())
        assert again and again[1] != nonce
        form = {"password": TOKEN, "csrf": again[1], "next": "/ui/"}
        async with session.post(f"{base}/ui/login", data=form, allow_redirects=False) as r:
            assert r.status == 302 and r.headers["Location"] == "/ui/"
