"""The command menu as Discord's global slash commands, kept equal to the routers'.

Discord rate-limits command creation (about 200 a day per application), and a bulk
overwrite counts each command, so the registered set is read first and written only when
it differs: a restart or a reload that changes nothing calls only the GET. Every menu
command gets one optional string option, ``args``: what a typed ``/name args`` would
carry (normalize reads it back). ``/ask`` keeps its own shape (its required
``question``) when ``ask_command`` is on, so the overwrite never drops it.

Discord's rules differ from Telegram's: names are 1-32 lowercase letters, digits, ``-``
or ``_`` (any script), descriptions 1-100 characters. A name that breaks them is left
out with a log line saying why; a description is cut to fit. An application has at most
100 global slash commands: past that, the rest are left out with one line naming them
(they still answer when typed as ``/name`` in a message the bot reads).
"""

from __future__ import annotations

import unicodedata
from collections.abc import Mapping, Sequence
from typing import Any

import discord
import structlog

log = structlog.get_logger("tether.discord")

#: The option every menu command carries.
ARGS = "args"
_STRING = 3
#: Discord's cap on an application's global chat-input commands.
MAX_COMMANDS = 100
_CHAT_INPUT = 1


def name_problem(name: str) -> str | None:
    """Why Discord would refuse ``name`` as a slash command's name, or None."""
    if not 1 <= len(name) <= 32:
        return f"{len(name)} characters (Discord allows 1-32)"
    if name != name.lower():
        return "not lowercase"
    for ch in name:
        if ch not in "-_" and unicodedata.category(ch)[0] not in "LN":
            return f"{ch!r} is not a letter, digit, '-' or '_'"
    return None


def entries(commands: Sequence[tuple[str, str]], ask: bool) -> list[dict[str, Any]]:
    """The bulk-overwrite body: ``/ask`` (when on) and each valid menu command once."""
    wanted: dict[str, dict[str, Any]] = {}
    if ask:
        wanted["ask"] = _command("ask", "Ask the agent", "question", "What you want to ask")
    for raw, about in commands:
        name = raw.lower()
        problem = name_problem(name)
        if problem is not None:
            log.warning("discord.command_skipped", command=raw, reason=problem)
            continue
        description = about.strip()[:100]
        if not description or name in wanted:
            continue
        wanted[name] = _command(name, description, ARGS, "what follows the command", False)
    kept = list(wanted.values())
    if len(kept) > MAX_COMMANDS:
        left = [command["name"] for command in kept[MAX_COMMANDS:]]
        log.warning("discord.commands_capped", cap=MAX_COMMANDS, left_out=left)
    return kept[:MAX_COMMANDS]


def _command(
    name: str, description: str, option: str, about: str, required: bool = True
) -> dict[str, Any]:
    described = {"name": option, "description": about, "required": required}
    return {
        "type": _CHAT_INPUT,
        "name": name,
        "description": description,
        "options": [{"type": _STRING, **described}],
    }


def _shape(commands: Sequence[Mapping[str, Any]]) -> set[tuple[Any, ...]]:
    """What a registration is compared on (Discord adds ids, versions, defaults)."""
    return {
        (
            command.get("type", _CHAT_INPUT),
            command.get("name"),
            command.get("description"),
            tuple(
                (o.get("type"), o.get("name"), o.get("description"), bool(o.get("required")))
                for o in command.get("options") or ()
            ),
        )
        for command in commands
    }


async def sync(client: discord.Client, application_id: int, wanted: list[dict[str, Any]]) -> bool:
    """Overwrite the application's global commands with ``wanted`` unless they are
    already those; True when it wrote."""
    registered = await client.http.get_global_commands(application_id)
    return await _write(client, application_id, list(registered), wanted)


async def _write(
    client: discord.Client,
    application_id: int,
    registered: Sequence[Mapping[str, Any]],
    wanted: list[dict[str, Any]],
) -> bool:
    if _shape(registered) == _shape(wanted):
        log.info("discord.commands_unchanged", commands=len(wanted))
        return False
    await client.http.bulk_upsert_global_commands(application_id, wanted)
    log.info("discord.commands_synced", commands=[command["name"] for command in wanted])
    return True


async def keep_ask(client: discord.Client, application_id: int) -> bool:
    """At open: ``/ask`` registered beside whatever menu is, written only if missing
    (a restart rewrites nothing; the gateway's menu follows, see :func:`sync`)."""
    registered = await client.http.get_global_commands(application_id)
    others = [_payload(c) for c in registered if c.get("name") != "ask"]
    return await _write(client, application_id, list(registered), [*entries([], True), *others])


def _payload(command: Mapping[str, Any]) -> dict[str, Any]:
    """A registered command as the overwrite body takes it back."""
    fields = ("type", "name", "description", "options")
    return {field: command[field] for field in fields if field in command}
