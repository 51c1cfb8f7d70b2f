"""The web console as a browser session reaches it: a cookie jar, the login and its CSRF
token."""

from __future__ import annotations

import re

import aiohttp

TOKEN = "ui-token-0123456789abcdef"


def client() -> aiohttp.ClientSession:
    # unsafe: keep cookies for an IP address host (127.0.0.1)
    return aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True))


async def login_nonce(session: aiohttp.ClientSession, base: str) -> str:
    async with session.get(f"{base}/ui/login") as response:
        assert response.status == 200
        html = await response.text()
    found = re.search(r'name="csrf" value="([^"]+)"', html)
    assert found
    return found[1]


async def log_in(session: aiohttp.ClientSession, base: str, password: str = TOKEN) -> str:
    """Log in; return the CSRF token of the session."""
    nonce = await login_nonce(session, base)
    form = {"password": password, "csrf": nonce, "next": "/ui/"}
    async with session.post(f"{base}/ui/login", data=form, allow_redirects=False) as response:
        assert response.status == 302, await response.text()
        assert response.headers["Location"] == "/ui/"
    async with session.get(f"{base}/ui/") as response:
        assert response.status == 200
        html = await response.text()
    found = re.search(r'name="csrf-token" content="([^"]+)"', html)
    assert found
    return found[1]
