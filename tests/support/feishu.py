"""Settings for the fake open platform (tests/fakes/feishu_api.py), and signed webhook
posts to a gateway."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import aiohttp

from tests.fakes.feishu_api import (
    APP_ID,
    APP_SECRET,
    ENCRYPT_KEY,
    VERIFICATION_TOKEN,
    FakeFeishu,
    signed_request,
)
from tests.support.config import make_settings
from tether.config import Settings
from tether.gateway.app import Gateway

PATH = "/feishu/webhook"


def feishu_section(fake: FakeFeishu, **overrides: Any) -> dict[str, Any]:
    section: dict[str, Any] = {
        "app_id": APP_ID,
        "app_secret": APP_SECRET,
        "domain": fake.domain,
        "mode": "webhook",
        "verification_token": VERIFICATION_TOKEN,
        "encrypt_key": ENCRYPT_KEY,
        "rate_limits": False,
    }
    section.update(overrides)
    return {k: v for k, v in section.items() if v is not None}


def feishu_settings(tmp_path: Path, fake: FakeFeishu, **overrides: Any) -> Settings:
    return make_settings(
        tmp_path,
        http={"enabled": True, "port": 0},
        platforms={"feishu": feishu_section(fake, **overrides)},
    )


async def post(
    port: int, body: bytes, headers: dict[str, str]
) -> tuple[int, dict[str, Any] | None]:
    url = f"http://127.0.0.1:{port}{PATH}"
    async with (
        aiohttp.ClientSession() as session,
        session.post(url, data=body, headers=headers) as response,
    ):
        try:
            data = await response.json(content_type=None)
        except ValueError:
            data = None
        return response.status, data


async def post_event(
    gateway: Gateway, payload: dict[str, Any], key: str | None = ENCRYPT_KEY, **kw: Any
) -> int:
    assert gateway.http is not None
    body, headers = signed_request(payload, key, **kw)
    status, _ = await post(gateway.http.port, body, headers)
    return status
