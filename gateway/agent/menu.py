"""The platforms' command menus (Telegram's "/" button, Discord's slash commands), made
from the routers: what ``/help`` lists to everyone, with the same descriptions.

Registered at start and after each reload (a plugin's new command shows up without a
restart). Admin-only commands stay out: a menu is public. Each agent's account gets its
own agent's menu. A platform refusing the menu is a warning, never a failed start: the
commands still answer when typed.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

import structlog

from tether.adapters.base import Adapter
from tether.adapters.kit import describe
from tether.gateway.agent.accounts import split_account
from tether.gateway.builtin.commands import ACCESS_COMMANDS, DESCRIPTIONS
from tether.gateway.handler.routing import Router

log = structlog.get_logger(__name__)

#: What Telegram accepts as a menu command.
_NAME = re.compile(r"[a-z0-9_]{1,32}")
#: Each platform's rule, where it is stricter than what a router may name: a platform
#: not here gets every command and leaves out what it refuses itself (Discord's rule is
#: wider, ``wetter-heute`` and ``天气`` included: adapters/discord/commands.py).
_NAMES = {"telegram": _NAME}


def menu(
    router: Router, agent: str | None = None, rule: re.Pattern[str] | None = _NAME
) -> list[tuple[str, str]]:
    """(name, description) of every public command ``agent`` answers, access ones first;
    a command with no description is answered but not listed, nor one ``rule`` refuses."""
    entries = {name: DESCRIPTIONS[name] for name, admin in ACCESS_COMMANDS if not admin}
    for command, route in router.commands(agent):
        about = DESCRIPTIONS.get(command) or route.description
        if route.admin or not about or (rule is not None and not rule.fullmatch(command)):
            continue
        entries.setdefault(command, about[:100])  # 256 on Telegram, 100 on Discord
    return list(entries.items())


async def register(adapters: Mapping[str, Adapter], router: Router) -> None:
    """Each adapter's menu, its agent's where agents have accounts of their own."""
    for name, adapter in list(adapters.items()):
        _, agent = split_account(name)
        try:
            await adapter.set_commands(menu(router, agent, _NAMES.get(adapter.platform)))
        except Exception as exc:
            log.warning("menu.register_failed", platform=name, error=describe(exc))
