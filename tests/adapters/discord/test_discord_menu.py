"""The command menu as Discord slash commands: written at start, again only when a
reload changes it, and a registered command dispatches with its ``args``.

The real gateway with the real discord.py client on the fake REST + gateway
(tests/fakes/discord_api.py), which checks names and descriptions as Discord does and
records every bulk overwrite.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import structlog
import yaml
from hypothesis import given
from hypothesis import strategies as st

from tests.fakes.discord_api import FakeDiscord
from tests.support.config import config_dict, events_named
from tests.support.discord import section
from tether.adapters.discord.commands import entries, name_problem
from tether.config import load
from tether.gateway.app import Gateway
from tether.gateway.assembly import build_adapters

PLUGIN = '''
from tether.gateway.handler.routing import Router

router = Router("dc_menu")


@router.command("weather")
async def weather(ctx):
    """today's weather (a place)"""
    await ctx.reply(f"sunny in {ctx.event.args or 'here'}")


@router.command("Wetter-Heute", "two words")
async def odd(ctx):
    """lowercased for Discord; a space is refused"""
'''


@pytest.fixture
def fake(discord_fake: FakeDiscord) -> FakeDiscord:
    return discord_fake


def write(tmp_path: Path, fake: FakeDiscord, **extra: object) -> Path:
    discord = section(fake, ask_command=True, require_mention=False)
    path = tmp_path / "tether.yaml"
    path.write_text(yaml.safe_dump(config_dict(tmp_path, platforms={"discord": discord}, **extra)))
    return path


async def test_the_menu_is_registered_at_start_and_again_only_when_a_reload_changes_it(
    tmp_path: Path, fake: FakeDiscord, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys, "path", list(sys.path))  # the config's folder a reload adds
    module = f"dc_menu_{tmp_path.name.replace('-', '_')}"
    config = write(tmp_path, fake)
    settings = load(config)
    gateway = Gateway(settings, build_adapters(settings), config_path=str(config))
    with structlog.testing.capture_logs() as logs:
        await gateway.start()
        try:
            first = {c["name"]: c for c in fake.commands}
            assert first["help"]["description"] == "this list"
            assert first["help"]["options"][0] == {
                "type": 3,
                "name": "args",
                "description": "what follows the command",
                "required": False,
            }
            assert first["ask"]["options"][0]["name"] == "question"  # /ask kept
            assert "weather" not in first and "approve" not in first  # admin-only: left out
            puts = len(fake.command_puts)
            assert await gateway.reloader.reload()  # nothing changed: no overwrite
            assert len(fake.command_puts) == puts
            (tmp_path / f"{module}.py").write_text(PLUGIN)
            write(tmp_path, fake, plugins=[f"{module}:router"])
            assert await gateway.reloader.reload()
            assert len(fake.command_puts) == puts + 1  # one overwrite for the new command
            shown = {c["name"]: c["description"] for c in fake.commands}
            assert shown["weather"] == "today's weather (a place)"
            assert shown["wetter-heute"].startswith("lowercased") and "two words" not in shown
            assert set(first) < set(shown)
            await fake.interact("Berlin", name="weather", option="args", token="menu-1")
            await fake.interact("", name="weather", option="args", token="menu-2")
            await fake.wait_for(lambda: len(fake.original_edits) >= 2)
            await gateway.drain()
        finally:
            await gateway.stop()
            sys.modules.pop(module, None)
    answers = dict((token, body["content"]) for token, body in fake.original_edits)
    assert answers == {"menu-1": "sunny in Berlin", "menu-2": "sunny in here"}
    assert [body for _, body in fake.callbacks] == [{"type": 5}, {"type": 5}]  # deferred
    (skipped,) = {
        (e["command"], e["reason"])
        for e in events_named([dict(e) for e in logs], "discord.command_skipped")
    }
    assert skipped == ("two words", "' ' is not a letter, digit, '-' or '_'")
    assert not events_named([dict(e) for e in logs], "menu.register_failed")


async def test_a_restart_with_the_same_menu_writes_nothing(
    tmp_path: Path, fake: FakeDiscord
) -> None:
    config = write(tmp_path, fake)
    written = []
    for _ in range(2):
        settings = load(config)
        gateway = Gateway(settings, build_adapters(settings), config_path=str(config))
        await gateway.start()
        await gateway.stop()
        written.append(len(fake.command_puts))
    assert written == [2, 2]  # the first: /ask at open, then the menu; the second: nothing
    assert [c["name"] for c in fake.command_puts[0]] == ["ask"]
    assert {c["name"] for c in fake.commands} == {c["name"] for c in fake.command_puts[1]}
    assert {"ask", "help", "start"} <= {c["name"] for c in fake.commands}


@given(st.text(max_size=40))
def test_a_name_is_offered_to_discord_only_when_discord_would_take_it(name: str) -> None:
    made = entries([(name, "about")], ask=False)
    if name_problem(name.lower()) is None:
        assert [c["name"] for c in made] == [name.lower()]
        assert 1 <= len(name.lower()) <= 32
    else:
        assert made == []


def test_descriptions_are_cut_to_discords_100_and_an_empty_one_is_left_out() -> None:
    made = entries([("long", "x" * 150), ("blank", "  "), ("long", "again")], ask=False)
    assert [(c["name"], len(c["description"])) for c in made] == [("long", 100)]


def test_past_discords_100_commands_the_rest_are_left_out_with_one_line_naming_them() -> None:
    menu = [(f"c{n:03}", "about") for n in range(105)]
    with structlog.testing.capture_logs() as logs:
        made = entries(menu, ask=True)
    assert len(made) == 100 and made[0]["name"] == "ask"
    [capped] = events_named(logs, "discord.commands_capped")
    assert capped["left_out"] == [f"c{n:03}" for n in range(99, 105)]


async def test_a_menu_command_discord_py_cannot_read_is_dropped_and_the_next_answers(
    tmp_path: Path, fake: FakeDiscord
) -> None:
    config = write(tmp_path, fake)
    settings = load(config)
    gateway = Gateway(settings, build_adapters(settings), config_path=str(config))
    with structlog.testing.capture_logs() as logs:
        await gateway.start()
        try:
            await fake.wait_for(lambda: fake.connected >= 1)
            broken = {"type": 2, "data": {"name": "help", "type": 1}}  # no id, no token
            await fake.dispatch("INTERACTION_CREATE", broken)
            await fake.interact("", name="help", option="args", token="menu-ok")
            await fake.wait_for(lambda: len(fake.original_edits) >= 1)
            await gateway.drain()
        finally:
            await gateway.stop()
    assert [token for token, _ in fake.original_edits] == ["menu-ok"]
    assert "/help - this list" in fake.original_edits[0][1]["content"]
    (dropped,) = events_named([dict(e) for e in logs], "discord.interaction_dropped")
    assert dropped["reason"].startswith("malformed: ")
