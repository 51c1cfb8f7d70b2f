"""Typed reads of a Discord payload's fields, for :mod:`.normalize`.

A payload is JSON from outside, so every field may be missing or of another type. Each
reader returns the value in the form normalize uses (ids as canonical decimal strings)
or raises :class:`Malformed` naming the field, which normalize turns into a skip with
that reason — one bad field never becomes an exception in the ingress.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

_DISCORD_EPOCH_MS = 1_420_070_400_000
_SNOWFLAKE_LIMIT = 2**64


class Malformed(ValueError):
    """A field normalizing needs is missing or of the wrong type."""


def created(snowflake: str) -> datetime:
    """When a message or interaction was made: its id says so (ms since Discord's epoch)."""
    return datetime.fromtimestamp(((int(snowflake) >> 22) + _DISCORD_EPOCH_MS) / 1000, tz=UTC)


def time(value: str, where: str) -> datetime:
    """An ISO 8601 time as Discord writes them (``edited_timestamp``), aware in UTC."""
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        raise Malformed(f"{where}: not an ISO 8601 time: {value[:40]!r}") from None
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=UTC)


def snowflake(value: Any, where: str) -> str:
    """A Discord id, as the canonical decimal string (the API sends strings of digits)."""
    if isinstance(value, str) and 0 < len(value) <= 20 and value.isascii() and value.isdigit():
        number = int(value)
    elif isinstance(value, int) and not isinstance(value, bool):
        number = value
    else:
        raise Malformed(f"{where}: expected an id, got {shape(value)}")
    if not 0 <= number < _SNOWFLAKE_LIMIT:
        raise Malformed(f"{where}: {number} is out of range for an id")
    return str(number)


def optional_snowflake(value: Any, where: str) -> str | None:
    return None if value is None else snowflake(value, where)


def ids(value: Any) -> list[str]:
    """The ids in a list of ids (``mention_roles``); anything else is left out."""
    found = map(id_or_none, value) if isinstance(value, list) else ()
    return [item for item in found if item is not None]


def id_or_none(value: Any) -> str | None:
    """An id, or None: for lists of mentions, where a bad entry is left out, not fatal."""
    try:
        return snowflake(value, "")
    except Malformed:
        return None


def mapping(value: Any, where: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise Malformed(f"{where}: expected an object, got {shape(value)}")
    return value


def items(value: Any, where: str) -> list[Any]:
    """A list; a missing one (None) is an empty list, as Discord leaves empty lists out."""
    if value is None:
        return []
    if not isinstance(value, list):
        raise Malformed(f"{where}: expected a list, got {shape(value)}")
    return value


def text(value: Any, where: str) -> str:
    """A string; a missing one (None) is empty, as content without the intent is."""
    if value is None:
        return ""
    if not isinstance(value, str):
        raise Malformed(f"{where}: expected a string, got {shape(value)}")
    return value


def nonempty(value: Any, where: str) -> str:
    """A string that must say something: a command without a name is no command."""
    if not (found := text(value, where)):
        raise Malformed(f"{where}: empty")
    return found


def optional_text(value: Any, where: str) -> str | None:
    return None if value is None else text(value, where)


def integer(value: Any, where: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise Malformed(f"{where}: expected an integer, got {shape(value)}")
    return value


def optional_integer(value: Any, where: str) -> int | None:
    return None if value is None else integer(value, where)


def flag(value: Any, where: str) -> bool:
    if value is None:
        return False
    if not isinstance(value, bool):
        raise Malformed(f"{where}: expected true or false, got {shape(value)}")
    return value


def display_name(user: Mapping[str, Any], member: Any) -> str:
    """As a client shows a person: server nickname (``member`` when it is an object),
    else global name, else username."""
    nick = member.get("nick") if isinstance(member, Mapping) else None
    for value in (nick, user.get("global_name")):
        if isinstance(value, str) and value:
            return value
    username = user.get("username")
    return username if isinstance(username, str) else ""


def shape(value: Any) -> str:
    """What a wrong value is, short enough for a log line."""
    if value is None:
        return "nothing"
    written = repr(value)
    return f"{type(value).__name__} {written if len(written) <= 40 else written[:37] + '...'}"
