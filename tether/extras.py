"""The optional parts and the extra that installs each: one line that says how to add it.

The core install (``pip install tether-gateway``) runs the embedded default: SQLite,
cron, the console chat and the echo agent. Each platform SDK, PostgreSQL's driver, the
model client, MCP, the web console and PDF reading are extras (pyproject.toml), so a
Telegram bot does not install discord.py, lark-oapi or asyncpg. A part whose extra is
missing is found before it is started (``tether check`` and ``tether run`` alike) and
named by its config key with the exact ``pip install``, rather than a traceback from an
import deep inside it.
"""

from __future__ import annotations

import importlib.util

from tether.errors import GatewayError

#: The distribution (the import name is ``tether``).
DISTRIBUTION = "tether-gateway"

#: extra → the (import name, distribution) pairs it installs.
EXTRAS: dict[str, tuple[tuple[str, str], ...]] = {
    "telegram": (
        ("telegram", "python-telegram-bot"),
        ("telegramify_markdown", "telegramify-markdown"),
    ),
    "discord": (("discord", "discord.py"),),
    "feishu": (("lark_oapi", "lark-oapi"),),
    "slack": (("slack_sdk", "slack-sdk"),),
    "postgres": (("asyncpg", "asyncpg"),),
    "llm": (("openai", "openai"),),
    "mcp": (("mcp", "mcp"),),
    "console": (("jinja2", "Jinja2"),),
    "documents": (("pypdf", "pypdf"),),
}


def install(extra: str) -> str:
    """The command that adds ``extra``."""
    return f"pip install '{DISTRIBUTION}[{extra}]'"


def missing(extra: str) -> list[str]:
    """The distributions of ``extra`` that are not installed."""
    return [
        distribution
        for module, distribution in EXTRAS[extra]
        if importlib.util.find_spec(module) is None
    ]


def require(extra: str, key: str) -> None:
    """Raise a :class:`~tether.errors.GatewayError` naming ``key`` (what the config
    turned on) when ``extra`` is not installed."""
    absent = missing(extra)
    if absent:
        raise GatewayError(
            f"{key} needs the {extra} extra ({', '.join(absent)} not installed): {install(extra)}"
        )
