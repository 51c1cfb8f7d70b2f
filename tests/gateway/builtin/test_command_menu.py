"""The command menu (Telegram's setMyCommands) made from the routers, and ``/new``.

The real gateway with the real Telegram adapter (PTB) on the fake Bot API
(tests/fakes/telegram_api.py), the LLM agent on the fake model server.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import structlog
import yaml

from tests.fakes.telegram_api import FakeTelegram
from tests.support.config import config_dict, events_named
from tether.config import load
from tether.gateway.app import Gateway
from tether.gateway.assembly import build_adapters
from tether.testing.model import FakeModel

ALICE = 111
PLUGIN = '''
from tether.gateway.handler.routing import Router

router = Router("menu_plugin")


@router.command("weather")
async def weather(ctx):
    """today's weather where you are"""
    await ctx.reply("sunny")


@router.command("shutdown", admin=True)
async def shutdown(ctx):
    """stop the bot (admins)"""


@router.command("quiet", description="")
async def quiet(ctx):
    """answered, but not in the menu"""
'''


def write(tmp_path: Path, telegram: FakeTelegram, model: FakeModel, **extra: Any) -> Path:
    platform = {"token": telegram.token, "base_url": telegram.base_url, "poll_timeout": 1}
    platform |= {"rate_limits": False, "typing": False}
    sections = {"platforms": {"telegram": platform}, "llm": model.section(timeout=5), **extra}
    path = tmp_path / "tether.yaml"
    path.write_text(yaml.safe_dump(config_dict(tmp_path, **sections)))
    return path


@asynccontextmanager
async def running(config: Path) -> AsyncIterator[Gateway]:
    settings = load(config)
    gateway = Gateway(settings, build_adapters(settings), config_path=str(config))
    await gateway.start()
    try:
        yield gateway
    finally:
        await gateway.stop()


async def test_the_menu_is_set_at_start_and_again_after_a_reload_adds_a_command(
    tmp_path: Path, telegram: FakeTelegram, model: FakeModel, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = write(tmp_path, telegram, model)
    monkeypatch.syspath_prepend(str(tmp_path))  # the plugin a reload adds, beside the config
    async with running(config) as gateway:
        shown = dict(telegram.commands)
        assert shown["help"] == "this list"
        assert shown["new"] == "the same as /reset" and shown["reset"].startswith("start a")
        assert {"start", "whoami", "stop", "usage", "remember"} <= set(shown)
        assert "approve" not in shown  # admin-only: not in a public menu
        assert "weather" not in shown
        (tmp_path / "menu_plugin.py").write_text(PLUGIN)
        write(tmp_path, telegram, model, plugins=["menu_plugin:router"])
        assert await gateway.reloader.reload()
        shown = dict(telegram.commands)
        assert shown["weather"] == "today's weather where you are"
        assert "shutdown" not in shown and "quiet" not in shown
        assert shown["help"] == "this list"
    assert len(telegram.calls_to("setMyCommands")) == 2


async def test_a_refused_menu_is_a_warning_and_the_bot_still_answers(
    tmp_path: Path, telegram: FakeTelegram, model: FakeModel
) -> None:
    telegram.fail_next("setMyCommands", 400, "Bad Request: BOT_COMMAND_INVALID")
    with structlog.testing.capture_logs() as captured:
        async with running(write(tmp_path, telegram, model)) as gateway:
            telegram.push(message=telegram.message(ALICE, "/help"))
            await telegram.wait_for(lambda: len(telegram.sent) >= 1)
            await gateway.drain()
    failed = events_named(captured, "menu.register_failed")
    assert len(failed) == 1 and failed[0]["log_level"] == "warning"
    assert "Bot_command_invalid" in failed[0]["error"]  # as PTB words it
    assert "/new - " in telegram.sent[0]["text"]


async def test_new_starts_a_fresh_context_like_reset(
    tmp_path: Path, telegram: FakeTelegram, model: FakeModel
) -> None:
    async with running(write(tmp_path, telegram, model)) as gateway:
        telegram.push(message=telegram.message(ALICE, "/new"))
        await telegram.wait_for(lambda: len(telegram.sent) >= 1)
        await gateway.drain()
    assert telegram.sent[0]["text"].startswith("Started a fresh context.")
    assert not model.requests  # a command, not a question for the model
