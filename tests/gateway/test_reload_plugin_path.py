"""A plugin that a reload adds imports from the config file's folder, and so do the
modules it imports lazily, inside a handler, after start.

The real gateway (no CLI: the gateway embedded as a library is given only its config's
path) with the real Telegram adapter on the fake Bot API. The config lives in a tmp
folder that is not on ``sys.path``; module names are unique per test, so nothing an
earlier test imported can answer for them.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import yaml

from tests.fakes.telegram_api import FakeTelegram
from tests.support.config import config_dict
from tether.config import load, plugin_path
from tether.gateway.app import Gateway
from tether.gateway.assembly import build_adapters

ALICE = 111
PLUGIN = '''
from tether.gateway.handler.routing import Router

router = Router("late_plugin")


@router.command("weather")
async def weather(ctx):
    """today's weather"""
    import {helper}  # a sibling, imported lazily: after start, inside the handler

    await ctx.reply({helper}.FORECAST)
'''


def write(tmp_path: Path, telegram: FakeTelegram, **extra: object) -> Path:
    platform = {"token": telegram.token, "base_url": telegram.base_url, "poll_timeout": 1}
    platform |= {"rate_limits": False, "typing": False}
    path = tmp_path / "tether.yaml"
    path.write_text(
        yaml.safe_dump(config_dict(tmp_path, platforms={"telegram": platform}, **extra))
    )
    return path


async def test_a_plugin_a_reload_adds_imports_beside_the_config_and_its_lazy_sibling_too(
    tmp_path: Path, telegram: FakeTelegram, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys, "path", list(sys.path))  # whatever the gateway adds, undone
    monkeypatch.setattr(plugin_path, "_base", None)  # as a fresh process: no CLI set it
    assert str(tmp_path) not in sys.path
    unique = tmp_path.name.replace("-", "_")
    plugin, helper = f"late_plugin_{unique}", f"late_helper_{unique}"
    config = write(tmp_path, telegram)
    settings = load(config)
    gateway = Gateway(settings, build_adapters(settings), config_path=str(config))
    await gateway.start()
    try:
        (tmp_path / f"{plugin}.py").write_text(PLUGIN.replace("{helper}", helper))
        (tmp_path / f"{helper}.py").write_text('FORECAST = "sunny beside the config"\n')
        write(tmp_path, telegram, plugins=[f"{plugin}:router"])
        assert await gateway.reloader.reload()  # was: No module named 'late_plugin_...'
        telegram.push(message=telegram.message(ALICE, "/weather"))
        await telegram.wait_for(lambda: len(telegram.sent) >= 1)
        await gateway.drain()
    finally:
        await gateway.stop()
        for name in (plugin, helper):
            sys.modules.pop(name, None)
    assert telegram.sent[0]["text"] == "sunny beside the config"
