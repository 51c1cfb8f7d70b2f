"""The HTTP server under hostile input: never a 500 to a stranger, never a hang.

One real gateway per test, with Telegram's and Feishu's webhook routes on its aiohttp
server (fake platform APIs on 127.0.0.1 behind them), spoken to over raw TCP so that a
request can carry what no well-behaved client sends: non-UTF-8 header bytes, bodies
nested ten thousand deep, a head or a body that never finishes. Waiting is on the
connection (its close, its answer), never on a sleep.

The Hypothesis properties run over every route: whatever the headers and body, no 500,
no traceback in the log, and an unauthenticated post gets 401/403 and stores nothing.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import sqlite3
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import structlog
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.fakes.feishu_api import (
    APP_ID,
    APP_SECRET,
    ENCRYPT_KEY,
    VERIFICATION_TOKEN,
    FakeFeishu,
    encrypt,
    message_event,
    signed_request,
)
from tests.fakes.telegram_api import BOT_ID, FakeTelegram
from tests.support.config import events_named, inbox_rows, make_settings
from tests.support.gateway import running
from tether.gateway.app import Gateway
from tether.gateway.builtin.echo import echo_router

SECRET = "s3cret-webhook_token"
TELEGRAM = "/telegram/webhook"
FEISHU = "/feishu/webhook"
SECRET_HEADER = b"X-Telegram-Bot-Api-Secret-Token"
#: Deep enough to exhaust the JSON decoder's recursion limit.
DEEP = b"[" * 100_000 + b"]" * 100_000


# -- what the gateway logged ------------------------------------------------------------------


@dataclass
class Observed:
    """structlog's entries, and ERROR records from libraries that log through stdlib
    logging (aiohttp's "Error handling request" with its traceback is one)."""

    logs: list[dict[str, Any]]
    errors: list[logging.LogRecord]

    def named(self, name: str) -> list[dict[str, Any]]:
        return events_named(self.logs, name)

    def error_events(self) -> list[str]:
        return [
            e["event"]
            for e in self.logs
            if e.get("log_level") in ("error", "critical") or "exc_info" in e
        ]

    @property
    def quiet(self) -> bool:
        """No error line and no traceback: not ours, not a library's."""
        return not self.errors and not self.error_events()


@contextmanager
def observed() -> Iterator[Observed]:
    seen = Observed([], [])

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            seen.errors.append(record)

    handler = Collect(logging.ERROR)
    root = logging.getLogger()
    root.addHandler(handler)
    try:
        with structlog.testing.capture_logs() as logs:
            seen.logs = logs
            yield seen
    finally:
        root.removeHandler(handler)


# -- a gateway with both webhook routes ------------------------------------------------------


def hostile_settings(
    tmp_path: Path,
    telegram: FakeTelegram,
    feishu: FakeFeishu,
    *,
    encrypt_key: str | None = ENCRYPT_KEY,
    **http: Any,
) -> Any:
    feishu_section: dict[str, Any] = {
        "app_id": APP_ID,
        "app_secret": APP_SECRET,
        "domain": feishu.domain,
        "mode": "webhook",
        "verification_token": VERIFICATION_TOKEN,
        "rate_limits": False,
    }
    if encrypt_key:
        feishu_section["encrypt_key"] = encrypt_key
    hook = {"url": "https://bot.example.com/telegram/webhook", "secret_token": SECRET}
    return make_settings(
        tmp_path,
        http={"enabled": True, "port": 0, **http},
        platforms={
            "telegram": {
                "token": telegram.token,
                "base_url": telegram.base_url,
                "rate_limits": False,
                "mode": "webhook",
                "webhook": hook,
            },
            "feishu": feishu_section,
        },
    )


def port_of(gateway: Gateway) -> int:
    assert gateway.http is not None
    return gateway.http.port


@dataclass
class Served:
    """A running gateway and what it logs, for as long as the test's block runs."""

    gateway: Gateway
    seen: Observed

    @property
    def port(self) -> int:
        return port_of(self.gateway)

    async def connect(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        return await asyncio.open_connection("127.0.0.1", self.port)

    async def status(self, raw: bytes) -> int:
        return (await exchange(self.port, raw))[0]

    async def stored(self) -> dict[str, int]:
        return await stored(self.gateway)


Serve = Callable[..., AbstractAsyncContextManager[Served]]


@pytest.fixture
def serve(tmp_path: Path, telegram: FakeTelegram, feishu: FakeFeishu) -> Serve:
    """``async with serve(read_timeout=0.5) as served:`` — ``http:`` and Feishu options."""

    @asynccontextmanager
    async def serving(**options: Any) -> AsyncIterator[Served]:
        settings = hostile_settings(tmp_path, telegram, feishu, **options)
        with observed() as seen:
            async with running(settings, echo_router()) as (gateway, _):
                await telegram.wait_for(lambda: telegram.webhook is not None)
                yield Served(gateway, seen)

    return serving


# -- raw HTTP ----------------------------------------------------------------------------------


def request(
    method: str,
    path: str,
    body: bytes = b"",
    headers: list[tuple[bytes, bytes]] | None = None,
) -> bytes:
    """One HTTP/1.1 request, byte for byte as given (no encoding, no validation)."""
    lines = [
        f"{method} {path} HTTP/1.1".encode(),
        b"Host: 127.0.0.1",
        b"Connection: close",
        b"Content-Length: %d" % len(body),
        *(name + b": " + value for name, value in headers or []),
    ]
    return b"\r\n".join(lines) + b"\r\n\r\n" + body


async def exchange(port: int, raw: bytes) -> tuple[int, bytes]:
    """Send ``raw``, read until the server closes; the status and the body."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(raw)
        await writer.drain()
        data = await closed_within(reader)
    finally:
        writer.close()
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split(b" ", 2)[1]), body


async def closed_within(reader: asyncio.StreamReader, timeout: float = 30) -> bytes:
    """Everything the server sends until it closes the connection (a hang fails)."""
    async with asyncio.timeout(timeout):
        return await reader.read()


def telegram_post(body: bytes, secret: bytes | None = SECRET.encode()) -> bytes:
    headers = [(b"Content-Type", b"application/json")]
    if secret is not None:
        headers.append((SECRET_HEADER, secret))
    return request("POST", TELEGRAM, body, headers)


def feishu_post(body: bytes, headers: dict[str, str | bytes]) -> bytes:
    pairs = [(k.encode(), v if isinstance(v, bytes) else v.encode()) for k, v in headers.items()]
    return request("POST", FEISHU, body, pairs)


def signed_raw(plaintext: bytes) -> tuple[bytes, dict[str, str | bytes]]:
    """Encrypt and sign any plaintext the way Feishu would (valid credentials)."""
    body = json.dumps({"encrypt": encrypt(plaintext)}).encode()
    stamp = str(int(time.time()))
    signature = hashlib.sha256((stamp + "n1" + ENCRYPT_KEY).encode() + body).hexdigest()
    return body, {
        "Content-Type": "application/json",
        "X-Lark-Request-Timestamp": stamp,
        "X-Lark-Request-Nonce": "n1",
        "X-Lark-Signature": signature,
    }


async def stored(gateway: Gateway) -> dict[str, int]:
    return (await gateway.store.counts())["inbox"]


# -- bug 7: strangers' bytes are 401/403, never 500 ------------------------------------------


async def test_a_non_utf8_byte_in_telegrams_secret_header_is_403_and_stores_nothing(
    tmp_path: Path, serve: Serve, telegram: FakeTelegram
) -> None:
    update = json.dumps({"update_id": 9, "message": telegram.message(42, "forged")}).encode()
    async with serve() as served:
        for secret in (b"\xff", b"s3cret-\xc3(", SECRET.encode() + b"\x80"):
            assert await served.status(telegram_post(update, secret)) == 403
        assert await served.stored() == {}
    assert served.seen.quiet
    assert len(served.seen.named("telegram.webhook_forbidden")) == 3
    assert inbox_rows(tmp_path) == []


async def test_non_utf8_bytes_in_feishus_signature_headers_are_401(serve: Serve) -> None:
    body, headers = signed_request(message_event("om_sig", "forged"))
    bad = {
        "X-Lark-Request-Timestamp": b"\xff\xfe",
        "X-Lark-Request-Nonce": b"n\xe9",
        "X-Lark-Signature": b"\xc3(" + headers["X-Lark-Signature"].encode()[2:],
    }
    async with serve() as served:
        for name, value in bad.items():
            assert await served.status(feishu_post(body, {**headers, name: value})) == 401, name
        assert await served.stored() == {}
    assert served.seen.quiet
    assert len(served.seen.named("feishu.webhook_rejected")) == 3


@pytest.mark.parametrize("encrypt_key", [ENCRYPT_KEY, None])
async def test_deep_json_from_a_stranger_on_the_feishu_route_is_refused_not_500(
    serve: Serve, encrypt_key: str | None
) -> None:
    """With an encrypt key the signature is checked over the raw bytes before anything is
    parsed (401); without one the token is inside the body, so it is parsed — safely (400)."""
    forged: dict[str, str | bytes] = {
        "X-Lark-Request-Timestamp": str(int(time.time())),
        "X-Lark-Request-Nonce": "n",
        "X-Lark-Signature": "0" * 64,
    }
    async with serve(encrypt_key=encrypt_key) as served:
        signed = await served.status(feishu_post(DEEP, forged))
        unsigned = await served.status(feishu_post(DEEP, {}))
        assert await served.stored() == {}
    assert (signed, unsigned) == ((401, 401) if encrypt_key else (400, 400))
    assert served.seen.quiet


# -- authenticated, but unusable: answered once, logged, nothing stored ----------------------


async def test_telegram_posts_with_the_secret_that_cannot_be_used(
    tmp_path: Path, serve: Serve, telegram: FakeTelegram
) -> None:
    """Deep JSON is not an update (400, as for any body that is not one); an update whose
    text holds a lone surrogate can never be stored, and Telegram retries every non-2xx in
    order, so it is acknowledged with 200 and skipped — the chat's next update flows."""
    lone = {"update_id": 11, "message": telegram.message(42, "PLACEHOLDER")}
    surrogate = json.dumps(lone).replace("PLACEHOLDER", "\\ud800 broken").encode()
    good = json.dumps({"update_id": 12, "message": telegram.message(42, "after")}).encode()
    async with serve() as served:
        assert await served.status(telegram_post(DEEP)) == 400
        assert await served.status(telegram_post(b"\xff\xfe{}")) == 400
        assert await served.status(telegram_post(surrogate)) == 200
        assert await served.status(telegram_post(good)) == 200
        await telegram.wait_for(lambda: len(telegram.sent) >= 1)
        await served.gateway.drain()
    assert served.seen.quiet
    assert inbox_rows(tmp_path) == [(f"tg:{BOT_ID}:12", "done")]
    assert [s["text"] for s in telegram.sent] == ["after"]
    (skipped,) = served.seen.named("telegram.skipped")
    assert skipped["update_id"] == 11 and "surrogate" in skipped["reason"]
    deep, not_utf8 = served.seen.named("telegram.webhook_malformed")
    assert deep["reason"].startswith("nested") and not_utf8["reason"].startswith("not UTF-8")


async def test_feishu_posts_with_a_valid_signature_that_cannot_be_used(
    tmp_path: Path, serve: Serve
) -> None:
    """Signed and encrypted with the real key: deep JSON inside is 400; an event whose
    text holds a lone surrogate is acknowledged (200) and skipped — Feishu would retry
    anything else four times over seven hours, and no retry could make it usable."""
    # A lone surrogate in the event itself, and one inside the message's content (JSON
    # in a JSON string, parsed only by normalize).
    outer = json.dumps(message_event("om_bad1", "x", open_id="PLACEHOLDER"))
    inner = json.dumps(message_event("om_bad2", "PLACEHOLDER"))
    unusable = [
        outer.replace("PLACEHOLDER", "\\udc80").encode(),
        inner.replace("PLACEHOLDER", "\\\\ud800 broken").encode(),
    ]
    async with serve() as served:
        assert await served.status(feishu_post(*signed_raw(DEEP))) == 400
        for plaintext in unusable:
            assert await served.status(feishu_post(*signed_raw(plaintext))) == 200
        good_body, good_headers = signed_request(message_event("om_good", "after"))
        assert await served.status(feishu_post(good_body, dict(good_headers))) == 200
        await served.gateway.drain()
    assert served.seen.quiet
    assert inbox_rows(tmp_path) == [("fs:msg:om_good", "done")]
    skipped = served.seen.named("feishu.skipped")
    assert len(skipped) == 2 and all("surrogate" in s["reason"] for s in skipped)


# -- a failed commit is 503 on every route ----------------------------------------------------


@contextmanager
def inbox_table_gone(tmp_path: Path) -> Iterator[None]:
    """Make every inbox write fail for real: rename the table under the running writer."""
    with sqlite3.connect(tmp_path / "tether.db") as db:
        db.execute("ALTER TABLE inbox RENAME TO inbox_away")
    try:
        yield
    finally:
        with sqlite3.connect(tmp_path / "tether.db") as db:
            db.execute("ALTER TABLE inbox_away RENAME TO inbox")


async def test_a_failed_inbox_commit_is_503_on_every_webhook_route(
    tmp_path: Path, serve: Serve, telegram: FakeTelegram
) -> None:
    update = telegram_post(
        json.dumps({"update_id": 21, "message": telegram.message(42, "later")}).encode()
    )
    fs_body, fs_headers = signed_request(message_event("om_later", "later"))
    event = feishu_post(fs_body, dict(fs_headers))
    async with serve() as served:
        with inbox_table_gone(tmp_path):
            assert await served.status(update) == 503
            assert await served.status(event) == 503
        # The platform delivers again, and now it is stored and answered.
        assert await served.status(update) == 200
        assert await served.status(event) == 200
        await served.gateway.drain()
    assert served.seen.errors == []
    routes = [e for e in served.seen.error_events() if not e.startswith("store.")]
    assert routes == ["telegram.accept_failed", "feishu.accept_failed"]
    assert sorted(inbox_rows(tmp_path)) == [
        ("fs:msg:om_later", "done"),
        (f"tg:{BOT_ID}:21", "done"),
    ]


# -- bug 11: read timeouts and a connection cap -----------------------------------------------


@pytest.mark.slow
async def test_a_request_head_that_never_finishes_is_cut_off_after_read_timeout(
    serve: Serve,
) -> None:
    async with serve(read_timeout=0.5) as served:
        silent, partial = await served.connect(), await served.connect()
        partial[1].write(b"POST /telegram/webhook HTTP/1.1\r\nHost: x\r\nX-Slow: ")
        opened = time.monotonic()
        assert await closed_within(silent[0]) == b""
        assert await closed_within(partial[0]) == b""
        assert time.monotonic() - opened >= 0.4  # the timeout, not an instant refusal
        for _reader, writer in (silent, partial):
            writer.close()
        assert await served.status(request("GET", "/healthz")) == 200


@pytest.mark.slow
async def test_a_body_that_never_finishes_is_cut_off_even_with_the_secret(
    serve: Serve,
) -> None:
    async with serve(read_timeout=0.5) as served:
        reader, writer = await served.connect()
        head = telegram_post(b"x" * 1000).rsplit(b"\r\n\r\n", 1)[0] + b"\r\n\r\n"
        writer.write(head + b'{"update_id": 31, "mess')  # and then nothing
        answer = await closed_within(reader)
        writer.close()
        assert answer.startswith(b"HTTP/1.1 408")
        assert await served.stored() == {}
    (slow,) = served.seen.named("http.body_timeout")
    assert slow["path"] == TELEGRAM


async def keep_alive_request(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """GET /healthz on an open connection, answered 200, the connection left open."""
    writer.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
    async with asyncio.timeout(30):
        assert (await reader.readuntil(b"\r\n\r\n")).startswith(b"HTTP/1.1 200")
        await reader.readuntil(b"}")


async def test_connections_over_the_cap_are_refused_while_the_open_ones_keep_working(
    serve: Serve,
) -> None:
    async with serve(max_connections=2) as served:
        first, second = await served.connect(), await served.connect()
        for reader, writer in (first, second):  # each of the two is being served
            await keep_alive_request(reader, writer)
        # Refused before its request is read: nothing needs to be sent to see it.
        over_reader, over_writer = await served.connect()
        refused = await closed_within(over_reader)
        over_writer.close()
        assert refused.startswith(b"HTTP/1.1 503")
        await keep_alive_request(*first)  # the open ones still work
        for _reader, writer in (first, second):
            writer.close()
            await writer.wait_closed()
        # Once they are gone, new connections are served again: aiohttp forgets a closed
        # one within a few loop turns, and every try is a round trip that lets it.
        async with asyncio.timeout(30):
            while await served.status(request("GET", "/healthz")) != 200:
                pass
    assert len(served.seen.named("http.at_capacity")) == 1
    assert len(served.seen.named("http.below_capacity")) == 1


# -- the Hypothesis suite: every route, whatever a stranger sends -----------------------------

TOKEN_CHARS = st.sampled_from("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_")
header_name = st.one_of(
    st.sampled_from(
        [
            SECRET_HEADER,
            b"X-Lark-Request-Timestamp",
            b"X-Lark-Request-Nonce",
            b"X-Lark-Signature",
            b"Content-Type",
            b"Content-Encoding",
            b"Accept",
            b"Cookie",
        ]
    ),
    st.text(TOKEN_CHARS, min_size=1, max_size=20).map(lambda s: b"X-" + s.encode()),
)
#: Header values a conforming parser must accept: visible ASCII, spaces, obs-text bytes.
header_value = st.binary(max_size=80).map(
    lambda b: bytes(c for c in b if c == 0x09 or 0x20 <= c < 0x7F or c >= 0x80).strip()
)
headers = st.lists(st.tuples(header_name, header_value), max_size=6)
#: Well-formed HTTP: each header once, no Content-Encoding. A request that is not (a
#: duplicate Content-Type, a "gzip" body that is not gzip) is 400 before any route runs.
well_formed = st.lists(
    st.tuples(header_name, header_value).filter(lambda p: p[0] != b"Content-Encoding"),
    max_size=6,
    unique_by=lambda p: p[0].lower(),
)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20,
)
bodies = st.one_of(
    st.binary(max_size=400),
    json_values.map(lambda v: json.dumps(v).encode()),
    st.integers(1, 5000).map(lambda n: b"[" * n + b"]" * n),
    st.integers(1, 5000).map(lambda n: b'{"a":' * n + b"1" + b"}" * n),
    st.just(b'{"update_id": 1, "message": {"text": "\\ud800"}}'),
    st.just(json.dumps({"encrypt": encrypt(b'{"type": "url_verification"}')}).encode()),
)
HYPOTHESIS = settings(
    deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)


@pytest.fixture
async def gateway(
    tmp_path: Path, telegram: FakeTelegram, feishu: FakeFeishu
) -> AsyncIterator[Gateway]:
    settings = hostile_settings(tmp_path, telegram, feishu)
    async with running(settings, echo_router()) as (running_gateway, _):
        await telegram.wait_for(lambda: telegram.webhook is not None)
        yield running_gateway


def no_secret(pairs: list[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    """A stranger's headers: no secret header at all (its value is the test's to set)."""
    return [(n, v) for n, v in pairs if n.lower() != SECRET_HEADER.lower()]


@HYPOTHESIS
@given(pairs=well_formed, body=bodies, route=st.sampled_from([TELEGRAM, FEISHU]))
async def test_strangers_posts_to_webhooks_are_401_or_403_and_store_nothing(
    gateway: Gateway, pairs: list[tuple[bytes, bytes]], body: bytes, route: str
) -> None:
    with observed() as seen:
        status, _ = await exchange(port_of(gateway), request("POST", route, body, no_secret(pairs)))
    assert status in (401, 403), status
    assert seen.quiet
    assert await stored(gateway) == {}


@HYPOTHESIS
@given(pairs=headers, body=bodies)
async def test_telegram_posts_with_the_secret_are_never_500(
    gateway: Gateway, pairs: list[tuple[bytes, bytes]], body: bytes
) -> None:
    """Whoever holds the secret: 200 (stored, or skipped with a reason) or 400, never 500."""
    pairs = [*no_secret(pairs), (SECRET_HEADER, SECRET.encode())]
    with observed() as seen:
        status, _ = await exchange(port_of(gateway), request("POST", TELEGRAM, body, pairs))
    assert status in (200, 400), status
    assert seen.quiet


@HYPOTHESIS
@given(plaintext=bodies)
async def test_feishu_posts_signed_with_the_key_are_never_500(
    gateway: Gateway, plaintext: bytes
) -> None:
    body, signed = signed_raw(plaintext)
    with observed() as seen:
        status, _ = await exchange(port_of(gateway), feishu_post(body, dict(signed)))
    assert status in (200, 400, 403), status
    assert seen.quiet


@HYPOTHESIS
@given(
    pairs=headers,
    body=bodies,
    method=st.sampled_from(["GET", "POST", "HEAD", "PUT", "DELETE", "OPTIONS"]),
    route=st.sampled_from(["/healthz", "/readyz", "/metrics", TELEGRAM, FEISHU, "/nope"]),
    query=st.text(TOKEN_CHARS, max_size=30),
)
async def test_every_route_answers_anything_without_500(
    gateway: Gateway,
    pairs: list[tuple[bytes, bytes]],
    body: bytes,
    method: str,
    route: str,
    query: str,
) -> None:
    path = f"{route}?{query}" if query else route
    raw = request(method, path, body, no_secret(pairs))
    with observed() as seen:
        status, _ = await exchange(port_of(gateway), raw)
    assert status < 500 or (route == "/readyz" and status == 503), status
    assert seen.quiet
    assert await stored(gateway) == {}


@HYPOTHESIS
@given(garbage=st.binary(min_size=1, max_size=300), after_a_request=st.booleans())
async def test_garbage_on_the_socket_is_never_a_500_nor_a_traceback(
    gateway: Gateway, garbage: bytes, after_a_request: bool
) -> None:
    """Bytes that are not HTTP at all, on a fresh connection or after a good request on
    a kept-alive one: aiohttp's parser answers 400 (or closes), and the log gets one
    warning line, not a traceback."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port_of(gateway))
    with observed() as seen:
        if after_a_request:
            await keep_alive_request(reader, writer)
        writer.write(garbage + b"\r\n\r\n")
        writer.write_eof()
        answer = await closed_within(reader)
        writer.close()
    assert b"HTTP/1.1 5" not in answer, answer[:200]
    assert seen.quiet
