"""``agents:`` and ``rooms:``: several agents in one gateway, each with its own accounts.

``agent:`` stays the one-agent form. ``agents:`` lists several, each a full agent (name,
persona, handler, group sessions, edits) plus what makes it a separate participant:
its own platform accounts (a Telegram bot token, a Discord bot token, a Feishu app, a
Slack app — any subset), its own model routes and memory budgets, its own access rule on top of
the gateway's, and how it answers other agents in a room (``respond_to_agents``).

Checked here, with the key path of the mistake: a name used twice (it names the
agent's conversations, adapters and relayed events), one account given to two agents
(both would receive every message and answer it twice), a route to a model that
``llm.models`` does not have.
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import Field, SecretStr, ValidationError, field_validator
from pydantic_core import InitErrorDetails, PydanticCustomError

from tether.config.llm import LLMRouteConfig
from tether.config.mcp import McpToolFilter
from tether.config.platforms import DiscordConfig, FeishuConfig, SlackConfig, TelegramConfig
from tether.config.section import Patterns, Section

#: An agent's name is part of keys and conversation names (``telegram@NAME:chat``).
_NAME = re.compile(r"[A-Za-z0-9_-]{1,32}")
#: One platform account's section.
Account = TelegramConfig | DiscordConfig | FeishuConfig | SlackConfig
#: The key that tells one account from another, per platform (``token`` for the rest).
_ACCOUNT_KEY = {"feishu": "app_id", "slack": "bot_token"}


class AgentPlatforms(Section):
    """The accounts one agent answers through; each is the platform's own section."""

    telegram: TelegramConfig | None = None
    discord: DiscordConfig | None = None
    feishu: FeishuConfig | None = None
    slack: SlackConfig | None = None

    def enabled(self) -> dict[str, Account]:
        found: dict[str, Account | None] = {
            "telegram": self.telegram,
            "discord": self.discord,
            "feishu": self.feishu,
            "slack": self.slack,
        }
        return {name: config for name, config in found.items() if config is not None}


class AgentAccess(Section):
    """Who this agent answers, on top of the gateway's ``access:`` (which still applies).
    Patterns as in ``access.allow``; empty: everyone the gateway lets in."""

    allow: Patterns = []


class AgentSpec(Section):
    """One entry of ``agents:``."""

    name: str
    persona: str = "You are a helpful assistant."
    handler: Literal["echo", "llm"] = "llm"
    group_sessions: Literal["per_user", "shared"] = "per_user"
    on_edit: Literal["ignore", "reanswer"] = "ignore"
    #: Other names it answers to in a room besides ``name`` (a bot's @username, a nickname).
    aliases: list[str] = []
    #: A message from another agent in a room: answer it when it names this agent
    #: (``mentioned``), always (``all``, the loop guards still apply) or ``never``.
    respond_to_agents: Literal["mentioned", "all", "never"] = "mentioned"
    #: The model this agent asks; ``routes`` for more (same shape as ``llm.routes``).
    #: Neither: the ``llm:`` section's routes and default.
    model: str | None = None
    routes: list[LLMRouteConfig] | None = None
    #: Budgets instead of ``memory:``'s, for this agent's conversations only.
    history_tokens: int | None = Field(default=None, ge=50)
    task_token_budget: int | None = Field(default=None, ge=1)
    daily_token_budget: int | None = Field(default=None, ge=1)
    access: AgentAccess = AgentAccess()
    platforms: AgentPlatforms = AgentPlatforms()
    #: Which MCP tools this agent may call (``server__tool`` patterns; config/mcp.py).
    mcp_tools: McpToolFilter = McpToolFilter()

    @field_validator("name")
    @classmethod
    def _name_shape(cls, value: str) -> str:
        if not _NAME.fullmatch(value):
            raise PydanticCustomError(
                "agent_name", "must be 1-32 characters of A-Z, a-z, 0-9, _ and -"
            )
        return value

    def names(self) -> list[str]:
        """What counts as naming this agent in a message: its name and aliases."""
        return [self.name, *self.aliases]


class RoomsConfig(Section):
    """Guards for rooms: chats where several agents hear each other (through the gateway)."""

    #: Agent messages in a row (one answering the other) without a human message between.
    max_agent_turns: int = Field(default=3, ge=0)
    #: Agent messages per room and minute that are relayed to the other agents.
    agent_rate: int = Field(default=20, ge=1)


def check_agents(agents: list[AgentSpec], models: set[str] | None) -> list[AgentSpec]:
    """``agents`` unchanged, or a :class:`ValidationError` at the key that is wrong.

    ``models``: the names in ``llm.models`` (None: no ``llm:`` section).
    """
    names: dict[str, int] = {}
    accounts: dict[tuple[str, str], int] = {}
    for index, agent in enumerate(agents):
        if agent.name.lower() in names:
            other = names[agent.name.lower()]
            _fail(index, ("name",), f"agent name used twice (agents[{other}].name)", agent.name)
        names[agent.name.lower()] = index
        for platform, config in agent.platforms.enabled().items():
            account = _account(platform, config)
            if account in accounts:
                where = f"agents[{accounts[account]}].platforms.{platform}"
                field = _ACCOUNT_KEY.get(platform, "token")
                _fail(index, ("platforms", platform, field), f"{where} has this account too", None)
            accounts[account] = index
        if agent.handler == "llm" and models is None:
            _fail(index, ("handler",), "is 'llm', so an llm section is required", agent.handler)
        wanted: list[tuple[tuple[str | int, ...], str | None]] = [(("model",), agent.model)]
        wanted += [(("routes", i, "model"), r.model) for i, r in enumerate(agent.routes or [])]
        for loc, model in wanted:
            if model is not None and models is not None and model not in models:
                _fail(index, loc, f"no model {model!r} in llm.models", model)
    return agents


def _account(platform: str, config: Account) -> tuple[str, str]:
    if isinstance(config, FeishuConfig):
        return platform, config.app_id
    # A Slack bot token belongs to one app in one workspace: the same token is the same app.
    token: SecretStr = config.bot_token if isinstance(config, SlackConfig) else config.token
    return platform, token.get_secret_value()


def _fail(index: int, loc: tuple[str | int, ...], detail: str, value: object) -> None:
    raise ValidationError.from_exception_data(
        "Settings",
        [
            InitErrorDetails(
                type=PydanticCustomError("bad_agent", "{reason}", {"reason": detail}),
                loc=(index, *loc),
                input=value,
            )
        ],
    )
