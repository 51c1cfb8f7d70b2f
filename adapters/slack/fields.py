"""The fields every Slack payload shares, read the same way by :mod:`.normalize` and
:mod:`.interactions`: which app received it, what the store may keep, a ``ts`` as a
time, a channel as a conversation. Pure.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from tether.events import Attachment, ChatType, Conversation

PLATFORM = "slack"
IGNORED = "slack.ignored"  # left out by policy: a bot, a channel message not for us
SKIPPED = "slack.skipped"  # cannot be handled: malformed, unsupported
#: Left out of ``raw``: secrets that let their holder act as the app.
_SECRET_FIELDS = ("token", "response_url")


def app_of(data: Mapping[str, Any]) -> str:
    """The receiving app as keys name it: ``api_app_id``, else the team's id."""
    for value in (data.get("api_app_id"), data.get("team_id"), as_dict(data.get("team")).get("id")):
        if isinstance(value, str) and value:
            return value
    return ""


def without_secrets(data: Mapping[str, Any]) -> dict[str, Any]:
    """``data`` for the store: the fields that let their holder act as the app removed."""
    return {k: v for k, v in data.items() if k not in _SECRET_FIELDS}


def conversation(channel: str, thread: str | None, chat_type: ChatType) -> Conversation:
    """A thread (``thread_ts``) is a conversation of its own, as topics are elsewhere."""
    return Conversation(platform=PLATFORM, chat_id=channel, thread_id=thread, chat_type=chat_type)


def chat_type_of(channel_type: Any, channel: str) -> ChatType:
    """``im`` (or a ``D…`` channel when the type is absent) is a DM; the rest are groups."""
    if channel_type == "im" or (channel_type is None and channel.startswith("D")):
        return "dm"
    return "group"


def files_of(files: Any) -> list[Attachment]:
    """A message's ``files`` as attachments (downloading them is not built yet)."""
    if not isinstance(files, list):
        return []
    found = []
    for item in files:
        if not isinstance(item, dict) or not is_text(item.get("id")):
            continue
        mime = item.get("mimetype") if is_text(item.get("mimetype")) else None
        size = item.get("size")
        found.append(
            Attachment(
                kind="image" if mime and mime.startswith("image/") else "file",
                file_id=item["id"],
                url=item.get("url_private") if is_text(item.get("url_private")) else None,
                mime=mime,
                size=size if isinstance(size, int) and not isinstance(size, bool) else None,
                name=item.get("name") if is_text(item.get("name")) else None,
            )
        )
    return found


def slack_time(value: Any) -> datetime:
    """A Slack ``ts`` (``"1712345678.000100"``) or epoch seconds → a UTC datetime."""
    try:
        return datetime.fromtimestamp(float(value), UTC)
    except (TypeError, ValueError, OverflowError, OSError):
        return datetime.now(UTC)


def is_text(value: Any) -> bool:
    return isinstance(value, str) and bool(value)


def as_dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def string(value: Any) -> str:
    """``value`` when it is a string, else empty: text fields may be absent or null."""
    return value if isinstance(value, str) else ""
