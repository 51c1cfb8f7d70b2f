"""Settings for the fake Bot API (tests/fakes/telegram_api.py), and webhook posts to it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from aiohttp import ClientSession

from tests.fakes.telegram_api import FakeTelegram
from tests.support.config import make_settings
from tether.adapters.telegram.ingress import SECRET_HEADER
from tether.config import Settings
from tether.gateway.app import Gateway

SECRET = "s3cret-webhook_token"


WEBHOOK_PATH = "/telegram/webhook"


def telegram_settings(
    tmp_path: Path, fake: FakeTelegram, *, http: bool = False, **telegram: Any
) -> Settings:
    section = {
        "token": fake.token,
        "base_url": fake.base_url,
        "poll_timeout": 1,
        "rate_limits": False,
        **telegram,
    }
    sections: dict[str, Any] = {"platforms": {"telegram": section}}
    if http:
        sections["http"] = {"enabled": True, "port": 0}
    return make_settings(tmp_path, **sections)


def webhook_settings(tmp_path: Path, fake: FakeTelegram, **telegram: Any) -> Settings:
    hook = {"url": "https://bot.example.com/telegram/webhook", "secret_token": SECRET}
    return telegram_settings(tmp_path, fake, http=True, mode="webhook", webhook=hook, **telegram)


async def post_update(
    gateway: Gateway, body: Any, secret: str | None = SECRET, raw: bytes | None = None
) -> int:
    assert gateway.http is not None
    url = f"http://127.0.0.1:{gateway.http.port}{WEBHOOK_PATH}"
    headers = {"Content-Type": "application/json"}
    if secret is not None:
        headers[SECRET_HEADER] = secret
    data = raw if raw is not None else json.dumps(body).encode()
    async with ClientSession() as session, session.post(url, data=data, headers=headers) as resp:
        return resp.status
