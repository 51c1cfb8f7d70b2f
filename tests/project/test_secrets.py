"""No configured secret reaches a log line, an error, a dead letter or `tether check`:
not as configured, nor its secret half, nor percent-encoded or escaped, nor inside a URL."""

from __future__ import annotations

import asyncio
import io
import json
import re
import signal
import sqlite3
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote, quote_plus

import aiohttp
import pytest
from aiohttp import web

from tests.fakes.telegram_api import FakeTelegram
from tests.support.config import write_config
from tests.support.processes import TETHER, subprocess_env
from tether.config import load_text
from tether.errors import ConfigError
from tether.gateway.cli import main
from tether.gateway.ops import logs
from tether.redaction import Redactor


@dataclass
class Leaked:
    """Everything a leaky run left behind, where an operator would look."""

    logged: str
    lines: list[dict[str, Any]]
    error: str
    traceback: str
    snapshot: str
    dead_list: str
    dead_show: str
    checked: subprocess.CompletedProcess[str]
    key: str
    cli: Callable[..., subprocess.CompletedProcess[str]]


async def run_leaky(tmp_path: Path, fake: FakeTelegram, plugin: str, text: str) -> Leaked:
    """``tether run`` with ``plugin`` on the fake Bot API: ``text`` (dead-lettered by the
    plugin) then "hello" (echoed, so the leak has been handled), then the CLI's views."""
    config = write_config(
        tmp_path,
        plugins=[plugin],
        platforms={
            "telegram": {
                "token": "${TG_TOKEN}",
                "base_url": fake.base_url,
                "poll_timeout": 1,
                "rate_limits": False,
            }
        },
    )
    env = subprocess_env(TG_TOKEN=fake.token)
    fake.push(message=fake.message(7, text))
    fake.push(message=fake.message(7, "hello"))
    log = tmp_path / "tether.log"
    with log.open("wb") as stderr:
        proc = await asyncio.create_subprocess_exec(
            TETHER, "run", "-c", str(config),
            stdin=subprocess.DEVNULL, stdout=stderr, stderr=stderr, env=env,
        )  # fmt: skip
        try:
            await fake.wait_for(lambda: len(fake.sent) >= 1, timeout=30)  # "hello" echoed
        finally:
            proc.send_signal(signal.SIGTERM)
            assert await asyncio.wait_for(proc.wait(), 30) == 0

    with sqlite3.connect(tmp_path / "tether.db") as db:
        [(key, error, traceback, snapshot)] = db.execute(
            "SELECT key, error, traceback, snapshot FROM dead_letters"
        ).fetchall()

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        command = [TETHER, *args, "-c", str(config)]
        return subprocess.run(command, capture_output=True, text=True, env=env)

    listed = await asyncio.to_thread(cli, "dead", "list")
    shown = await asyncio.to_thread(cli, "dead", "show", key)
    checked = await asyncio.to_thread(cli, "check")
    assert listed.returncode == shown.returncode == checked.returncode == 0
    logged = log.read_text()
    lines = [json.loads(line) for line in logged.splitlines() if line.startswith("{")]
    assert any(line["event"] == "event.dead" for line in lines)
    return Leaked(
        logged, lines, error, traceback, snapshot, listed.stdout, shown.stdout, checked, key, cli
    )


@pytest.mark.slow
async def test_a_leaky_handler_leaks_nothing(tmp_path: Path, fake: FakeTelegram) -> None:
    token = fake.token
    leaked = await run_leaky(tmp_path, fake, "tests.plugins.leaky:router", "leak")
    # The leaks really happened (so the test would see them), and were masked.
    leaks = [line for line in leaked.lines if line["event"] == "leaky.debug"]
    assert leaks and leaks[0]["token"] == "***" and "bot***/getMe" in leaks[0]["url"]
    assert "bot***/sendMessage" in leaked.error
    assert "bot***/sendMessage" in leaked.traceback and "my token is ***" in leaked.snapshot
    assert "token: '***'" in leaked.checked.stdout
    for place in (
        leaked.logged,
        leaked.error,
        leaked.traceback,
        leaked.snapshot,
        leaked.dead_show,
        leaked.checked.stdout,
        leaked.checked.stderr,
    ):
        assert token not in place
    # The part after the colon is the secret half of a bot token: not even that.
    assert token.split(":", 1)[1] not in leaked.logged


@pytest.mark.slow
async def test_the_secret_half_percent_encoded_and_json_escaped_forms_leak_nothing(
    tmp_path: Path, fake: FakeTelegram
) -> None:
    token = fake.token
    half = token.split(":", 1)[1]
    leaked = await run_leaky(tmp_path, fake, "tests.plugins.leaky_forms:router", "leak forms")
    [line] = [line for line in leaked.lines if line["event"] == "leaky.forms"]
    # Each form was logged, and masked where it stood.
    assert line["half"] == "***" and line["url"] == "https://proxy.example/bot***/getMe"
    assert json.loads(line["body"]) == {"text": "token\n***"}
    assert "the secret half is ***" in leaked.snapshot
    assert "bot***/sendMessage failed: key ***" in leaked.dead_list
    for place in (
        leaked.logged,
        leaked.error,
        leaked.traceback,
        leaked.snapshot,
        leaked.dead_list,
        leaked.dead_show,
    ):
        assert half not in place and quote(token, safe="") not in place

    # A letter stored before the redactor knew these forms is masked when it is shown.
    with sqlite3.connect(tmp_path / "tether.db") as db:
        db.execute(
            "UPDATE dead_letters SET error = ?, traceback = ?",
            (f"old: bot{quote(token, safe='')}/getMe", f"old: {half}"),
        )
    listed = await asyncio.to_thread(leaked.cli, "dead", "list")
    shown = await asyncio.to_thread(leaked.cli, "dead", "show", leaked.key)
    assert "old: bot***/getMe" in listed.stdout and "old: ***" in shown.stdout
    for place in (listed.stdout, shown.stdout):
        assert half not in place


# -- the redactor: every form of every secret ------------------------------------------

BOT_TOKEN = "987654:AAH-secret_half_0123456789abcdef"
#: A password that each encoding writes differently.
PASSWORD = 'p@ss/w:rd "q" \\ é+x'


def _lower_escapes(text: str) -> str:
    return re.sub(r"%[0-9A-F]{2}", lambda m: m.group().lower(), text)


@pytest.mark.parametrize(
    "form",
    [
        BOT_TOKEN,
        BOT_TOKEN.split(":", 1)[1],
        quote(BOT_TOKEN, safe=""),
        PASSWORD,
        PASSWORD.split(":", 1)[1],
        quote(PASSWORD, safe=""),
        quote(PASSWORD),
        quote_plus(PASSWORD),
        _lower_escapes(quote(PASSWORD, safe="")),
        json.dumps(PASSWORD)[1:-1],
        json.dumps(PASSWORD, ensure_ascii=False)[1:-1],
        json.dumps(json.dumps(PASSWORD)[1:-1])[1:-1],  # JSON inside JSON
        repr(PASSWORD)[1:-1],
    ],
)
def test_the_redactor_masks_each_form_of_a_secret(form: str) -> None:
    redactor = Redactor([BOT_TOKEN, PASSWORD])
    assert redactor.scrub(f"before {form} after") == "before *** after"


def test_the_redactor_keeps_what_is_not_secret() -> None:
    redactor = Redactor([BOT_TOKEN, "abc"])  # too short to mask: it would hit words
    assert redactor.scrub("tg:987654:17 abc") == "tg:987654:17 abc"  # the bot id is public
    assert Redactor().scrub("anything") == "anything"
    redactor.update(["987654:AAH-secret_half_0123456789abcdefXYZ"])  # contains the first
    assert redactor.scrub("987654:AAH-secret_half_0123456789abcdefXYZ!") == "***!"


# -- credentials in URLs are secrets ----------------------------------------------------

PG_PASSWORD = "Pg-S3cret/pass"
PG_URL = f"postgresql://tether:{quote(PG_PASSWORD, safe='')}@127.0.0.1:5432/test"
FTP_URL = f"ftp://tether:{quote(PG_PASSWORD, safe='')}@proxy.example"
URL_CONFIG = f"""
memory: {{store: '{PG_URL}'}}
llm:
  providers:
    proxy:
      base_url: 'https://llm-user:llm-proxy-pass@proxy.example/v1?api_key=query-key-123&x=1'
      headers: {{Authorization: 'Bearer header-token-456', X-Title: Tether}}
  models: {{m: {{provider: proxy, model: gpt}}}}
"""


def test_credentials_inside_urls_and_headers_are_secrets() -> None:
    settings = load_text(URL_CONFIG)
    secrets = settings.secrets()
    for secret in (PG_PASSWORD, "llm-proxy-pass", "query-key-123", "Bearer header-token-456"):
        assert secret in secrets
    masked = settings.masked()
    assert masked["memory"]["store"] == "postgresql://tether:***@127.0.0.1:5432/test"
    provider = masked["llm"]["providers"]["proxy"]
    assert provider["base_url"] == "https://llm-user:***@proxy.example/v1?api_key=***&x=1"
    assert provider["headers"] == {"Authorization": "***", "X-Title": "Tether"}


def test_check_never_prints_a_store_password(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "tether.yaml"
    path.write_text(URL_CONFIG)
    assert main(["check", "-c", str(path)]) == 0
    out = capsys.readouterr().out
    assert "store: postgresql://tether:***@127.0.0.1:5432/test" in out
    for secret in (PG_PASSWORD, quote(PG_PASSWORD, safe=""), "llm-proxy-pass", "query-key-123"):
        assert secret not in out


@pytest.mark.parametrize(
    "text",
    [
        f"platforms: {{discord: {{token: x, api_base: '{FTP_URL}'}}}}\n",
        f"agent: {{handler: '{PG_URL}'}}\n",
        # The password, met again where an error echoes its value.
        "llm:\n  providers: {p: {base_url: 'https://u:Pa55word-x@h'}}\n"
        "  models: {m: {provider: p, model: x}}\n"
        "agent: {handler: 'Pa55word-x'}\n",
    ],
)
def test_config_errors_never_show_a_url_password(text: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load_text(text)
    message = str(caught.value)
    assert "***" in message
    for secret in (PG_PASSWORD, quote(PG_PASSWORD, safe=""), "Pa55word-x"):
        assert secret not in message


# -- stdlib logging (aiohttp) in the JSON stream ----------------------------------------


async def test_aiohttp_errors_are_one_json_line_each_and_scrubbed() -> None:
    out = io.StringIO()
    logs.configure("info", "json", secrets=[BOT_TOKEN], stream=out)

    async def broken(_request: web.Request) -> web.Response:
        raise RuntimeError(f"upstream said:\nno\nfor bot{quote(BOT_TOKEN, safe='')}")

    app = web.Application()
    app.router.add_get("/", broken)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        url = f"http://127.0.0.1:{runner.addresses[0][1]}/"
        async with aiohttp.ClientSession() as client, client.get(url) as got:
            assert got.status == 500
    finally:
        await runner.cleanup()
    logs.flush()
    text = out.getvalue()
    lines = [json.loads(line) for line in text.splitlines()]  # every line is JSON
    [error] = [line for line in lines if line.get("logger") == "aiohttp.server"]
    assert error["level"] == "error" and error["event"].startswith("Error handling request")
    assert "RuntimeError: upstream said:\nno\nfor bot***" in error["exception"]
    assert "secret_half" not in text
