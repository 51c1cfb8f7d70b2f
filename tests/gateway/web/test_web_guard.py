"""The console's outer locks: where it may listen, whom it answers, what every response
says. A console on 0.0.0.0 without TLS is refused by ``tether check`` (a real
subprocess) and at start unless the YAML says a TLS proxy is in front; a ``Host`` that
is not allowed (DNS rebinding) gets nothing, not even the login form; every /ui
response, whoever produced it, carries ``nosniff`` and the full CSP.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.support.config import make_settings, write_config
from tests.support.gateway import base_url, running
from tests.support.processes import TETHER, subprocess_env
from tests.support.web import TOKEN, client, log_in
from tether.config import Settings
from tether.errors import GatewayError
from tether.gateway.app import Gateway

UI = {"enabled": True, "token": TOKEN}


def ui_settings(tmp_path: Path, **ui: Any) -> Settings:
    return make_settings(
        tmp_path,
        http={"enabled": True, "port": 0, "ui": {**UI, **ui}},
        platforms={"web": {"enabled": True}},
    )


def check(config: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [TETHER, "check", "-c", str(config)],
        capture_output=True,
        text=True,
        env=subprocess_env(),
        timeout=60,
        check=False,
    )


# -- where it may listen --------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("host", ["0.0.0.0", "::", "192.168.1.20", "console.example.org"])
def test_tether_check_refuses_a_console_beyond_loopback_without_tls(
    tmp_path: Path, host: str
) -> None:
    config = write_config(tmp_path, http={"enabled": True, "host": host, "ui": UI})
    done = check(config)
    assert done.returncode == 1, done.stderr
    assert "http.ui" in done.stderr and "behind_tls_proxy" in done.stderr
    assert TOKEN not in done.stderr + done.stdout


@pytest.mark.slow
def test_tether_check_passes_it_behind_a_tls_proxy_or_on_loopback(tmp_path: Path) -> None:
    proxied = {**UI, "behind_tls_proxy": True, "allowed_hosts": ["console.example.org"]}
    config = write_config(tmp_path, http={"enabled": True, "host": "0.0.0.0", "ui": proxied})
    assert check(config).returncode == 0
    for host in ("127.0.0.1", "::1", "localhost"):
        config = write_config(tmp_path, http={"enabled": True, "host": host, "ui": UI})
        assert check(config).returncode == 0, host
    # Without the console, 0.0.0.0 is the webhooks' and probes' business, not this check's.
    config = write_config(tmp_path, http={"enabled": True, "host": "0.0.0.0"})
    assert check(config).returncode == 0


def test_the_gateway_refuses_to_start_such_a_console(tmp_path: Path) -> None:
    settings = make_settings(tmp_path, http={"enabled": True, "host": "0.0.0.0", "ui": UI})
    with pytest.raises(GatewayError, match=r"http\.ui.*behind_tls_proxy"):
        Gateway(settings, {})


def test_allowed_hosts_must_be_names_or_addresses(tmp_path: Path) -> None:
    from tether.errors import ConfigError

    for bad in ("https://console.example.org", "console.example.org:443", "a/b", ""):
        with pytest.raises(ConfigError, match=r"http\.ui\.allowed_hosts"):
            ui_settings(tmp_path, allowed_hosts=[bad])


# -- whom it answers ------------------------------------------------------------------


async def test_a_host_that_is_not_allowed_reaches_nothing(tmp_path: Path) -> None:
    """A page on rebind.example whose name now resolves to 127.0.0.1 is same-origin with
    itself: without the check it could read the login form and post to it."""
    async with running(ui_settings(tmp_path)) as (gateway, _), client() as session:
        base = base_url(gateway)
        for path in ("/ui/login", "/ui/", "/ui/api/overview", "/ui/static/console.css"):
            headers = {"Host": "rebind.example:8080"}
            async with session.get(base + path, headers=headers, allow_redirects=False) as r:
                assert r.status == 421, path
                assert "http.ui.allowed_hosts" in await r.text()
                assert "csrf" not in await r.text()
        async with session.post(
            f"{base}/ui/login", data={"password": TOKEN}, headers={"Host": "rebind.example"}
        ) as r:
            assert r.status == 421
        for host in ("localhost:1234", "127.0.0.1", "[::1]:80", "LOCALHOST"):
            async with session.get(f"{base}/ui/login", headers={"Host": host}) as r:
                assert r.status == 200, host


async def test_allowed_hosts_let_the_proxys_name_in(tmp_path: Path) -> None:
    settings = ui_settings(tmp_path, allowed_hosts=["console.example.org", "*.ops.example"])
    async with running(settings) as (gateway, _), client() as session:
        base = base_url(gateway)
        for host, status in (("console.example.org", 200), ("a.b.ops.example:443", 200),
                             ("ops.example", 421), ("127.0.0.1", 421)):  # fmt: skip
            async with session.get(f"{base}/ui/login", headers={"Host": host}) as r:
                assert r.status == status, host


# -- what every response says ---------------------------------------------------------


async def test_every_console_response_has_nosniff_and_the_full_csp(tmp_path: Path) -> None:
    async with running(ui_settings(tmp_path)) as (gateway, _), client() as session:
        base = base_url(gateway)
        seen: dict[str, int] = {}

        def headers_ok(what: str, status: int, headers: Any) -> None:
            seen[what] = status
            assert headers.get("X-Content-Type-Options") == "nosniff", what
            csp = headers.get("Content-Security-Policy", "")
            for part in ("object-src 'none'", "base-uri 'none'", "frame-ancestors 'none'",
                         "default-src 'self'"):  # fmt: skip
                assert part in csp, (what, csp)

        async def get(what: str, path: str, **options: Any) -> None:
            async with session.get(base + path, allow_redirects=False, **options) as r:
                headers_ok(what, r.status, r.headers)

        async def post(what: str, path: str, **options: Any) -> None:
            async with session.post(base + path, allow_redirects=False, **options) as r:
                headers_ok(what, r.status, r.headers)

        await get("login page", "/ui/login")
        await get("redirect to login", "/ui/")
        await get("401 api", "/ui/api/overview")
        await get("static", "/ui/static/console.js")
        await get("host refused", "/ui/login", headers={"Host": "rebind.example"})
        csrf = await log_in(session, base)
        await get("page", "/ui/events")
        await get("unknown", "/ui/no-such-page")
        await get("json", "/ui/api/overview")
        await get("chat json", "/ui/api/chat/log?chat=a")
        await get("404 page", "/ui/event?key=missing")
        await post("403 csrf", "/ui/dead/retry", data={"key": "x"})
        await post("400 form", "/ui/conversation/fact", data={"csrf": csrf, "id": "x"})
        await post("302 action", "/ui/dead/retry", data={"csrf": csrf, "key": "x"})
        await post("400 json", "/ui/api/chat/send", data=b"{", headers={"X-CSRF-Token": csrf})
        async with session.get(f"{base}/ui/api/live") as stream:  # server-sent events
            headers_ok("stream", stream.status, stream.headers)
        assert seen["static"] == 200 and seen["unknown"] == 404 and seen["400 form"] == 400
