"""The configuration schema: :class:`Settings`, the root of ``tether.yaml``.

Every key Tether reads, with its default. The big sections live beside this module, and
every section class is importable from here too:

- ``section.py``    :class:`Section`, the base: unknown keys are rejected (``extra="forbid"``)
                    so a typo fails loudly instead of being silently ignored
- ``platforms.py``  ``platforms:`` console, Telegram, Discord, Feishu/Lark, Slack
- ``llm.py``        ``llm:`` providers, models, routes, fallbacks
- ``jobs.py``       one ``jobs:`` entry (cron)
- here              ``agent``, ``memory``, ``http``, ``pipeline``, ``outbox``, ``access``,
                    ``logging``, ``media``, and the root that ties them together

Secrets are ``SecretStr`` so they are masked wherever the config is printed, and collected
by :meth:`Settings.secrets` for the log redactor, with the credentials written inside
other values (a URL's password, a ``headers`` entry; see ``credentials.py``).
"""

from __future__ import annotations

import os
from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field, SecretStr, ValidationInfo, field_validator, model_validator
from pydantic.functional_validators import AfterValidator

from tether.addresses import HostRule, parse_rule, parse_rules
from tether.config.agents import AgentSpec, RoomsConfig, check_agents
from tether.config.console import UiConfig
from tether.config.credentials import MASK, mask_urls, secret_name, url_secrets
from tether.config.jobs import JobConfig, unique_ids
from tether.config.llm import (
    CircuitBreakerConfig,
    EmbeddingsConfig,
    LLMConfig,
    LLMModelConfig,
    LLMProviderConfig,
    LLMRouteConfig,
    check_embeddings,
)
from tether.config.mcp import McpConfig, McpToolFilter
from tether.config.messages import MessagesConfig
from tether.config.ops import AlertsConfig, OpsConfig, WatchdogConfig
from tether.config.platforms import (
    ConsoleConfig,
    DiscordConfig,
    FeishuConfig,
    FeishuWebhookConfig,
    PlatformsConfig,
    SlackConfig,
    TelegramConfig,
    TelegramWebhookConfig,
)
from tether.config.retention import RetentionConfig, check_inbox_retention, enabled_platforms
from tether.config.section import Patterns, Section
from tether.config.tools import DEFAULT_MAX_TOOL_ROUNDS, TasksConfig, ToolsConfig
from tether.files import in_pseudo_filesystem

__all__ = [
    "AccessConfig",
    "AgentConfig",
    "AlertsConfig",
    "CircuitBreakerConfig",
    "ConsoleConfig",
    "DiscordConfig",
    "FeishuConfig",
    "FeishuWebhookConfig",
    "HttpConfig",
    "JobConfig",
    "LLMConfig",
    "LLMModelConfig",
    "LLMProviderConfig",
    "LLMRouteConfig",
    "LoggingConfig",
    "MediaConfig",
    "MemoryConfig",
    "OpsConfig",
    "OutboxConfig",
    "PipelineConfig",
    "PlatformsConfig",
    "RateLimitConfig",
    "Section",
    "Settings",
    "SlackConfig",
    "TelegramConfig",
    "TelegramWebhookConfig",
    "WatchdogConfig",
]


class AgentConfig(Section):
    name: str = "Tether"
    persona: str = "You are a helpful assistant."
    #: What answers when no plugin handler matched: ``llm`` (the default when an ``llm``
    #: section is configured) or ``echo`` (the default otherwise).
    handler: Literal["echo", "llm"] = "echo"
    group_sessions: Literal["per_user", "shared"] = "per_user"
    #: An edited message: ``ignore`` it (the first answer stands; fixing a typo does not
    #: cost a second full answer) or ``reanswer`` it, the answer saying it is about the
    #: edited text.
    on_edit: Literal["ignore", "reanswer"] = "ignore"
    #: Show the ``llm`` agent's answer while the model writes it, by editing one message
    #: (Telegram, Discord, Feishu); ``false``: one message, once the answer is complete.
    streaming: bool = True
    #: Rounds of tool calls in one turn; past them the model answers without tools.
    max_tool_rounds: int = Field(default=DEFAULT_MAX_TOOL_ROUNDS, ge=1, le=100)
    #: Built-in tools, each on unless switched off (``remember: false``).
    tools: ToolsConfig = Field(default_factory=ToolsConfig)
    #: Which MCP tools (``server__tool`` patterns) this agent may call (config/mcp.py).
    mcp_tools: McpToolFilter = McpToolFilter()
    #: Background tasks and sub-agents, and their bounds (config/tools.py).
    tasks: TasksConfig = Field(default_factory=TasksConfig)


class MemoryConfig(Section):
    #: ``sqlite:///relative.db``, ``sqlite:////absolute.db``, ``postgresql://user@host/db``
    #: (several instances), or ``memory://`` (nothing kept). A password in the URL is a
    #: secret: masked by ``tether check`` and scrubbed from logs.
    store: str = "sqlite:///tether.db"
    #: ``normal`` survives a process crash (kill -9); ``full`` also survives power loss,
    #: at the cost of an fsync per group commit.
    sqlite_synchronous: Literal["normal", "full"] = "normal"
    #: Tokens of recent history in each prompt (tiktoken counts, stored per row); older
    #: turns are folded into the conversation's running summary, never deleted.
    history_tokens: int = Field(default=4000, ge=50)
    #: Tokens of saved facts (``/remember``) in each prompt: the newest that fit.
    facts_tokens: int = Field(default=1000, ge=0)
    #: Prompt + completion tokens (the API's usage) one event may spend over all its LLM
    #: calls; the call that would cross it is not made. ``null``: no cap.
    task_token_budget: int | None = Field(default=50_000, ge=1)
    #: The same, per conversation and UTC day. ``null``: no cap.
    daily_token_budget: int | None = Field(default=None, ge=1)
    #: ``auto``: each prompt also gets the past turns that best match the new message,
    #: marked as recalled (within the scope ``search_memory`` has); ``off``: only the tool.
    recall: Literal["off", "auto"] = "off"
    #: Tokens of found turns: in a prompt (``recall: auto``) and in one tool result.
    recall_tokens: int = Field(default=600, ge=50)
    #: Files ``search_memory`` also searches: paths, folders or globs (``docs/**/*.md``),
    #: relative to the working directory; Markdown, text and PDF. Re-read on reload.
    documents: list[str] = Field(default_factory=list)
    #: Semantic recall: turns found by meaning too, through an embeddings endpoint
    #: (``{provider, model}``; docs/recall.md). Off (``null``) by default: no call made.
    embeddings: EmbeddingsConfig | None = None
    #: Per class of data, how long it is kept (config/retention.py); kept forever by default.
    retention: RetentionConfig = RetentionConfig()

    @field_validator("store")
    @classmethod
    def _known_scheme(cls, value: str) -> str:
        if not value.startswith(("sqlite://", "postgresql://", "postgres://", "memory://")):
            raise ValueError(
                "must start with sqlite:///, postgresql:// or memory://"
                f" (got {value.split(':', 1)[0]!r})"
            )
        if value.startswith("sqlite://"):
            from tether.memory.stores import sqlite_path  # the store's own reading of the URL

            sqlite_path(value)  # a URL without a path is refused, not a silent scratch store
        return value


class HttpConfig(Section):
    """The built-in server (probes, metrics, webhooks). TLS, per-IP rate limits and
    slowloris at scale belong to a reverse proxy in front of it (docs/operations.md)."""

    enabled: bool = True
    host: str = "127.0.0.1"
    port: int = Field(default=8080, ge=0, le=65535)
    #: Seconds a client has to send a request's head (from connecting, or from the last
    #: answer on a kept-alive connection: idle connections close after it too), and
    #: again its body. A slower client is cut off; a platform's posts take milliseconds.
    read_timeout: float = Field(default=15.0, gt=0)
    #: Connections served at once; any beyond are answered 503 and closed. Telegram uses
    #: up to 40 for a webhook, Feishu and a Prometheus scraper a few.
    max_connections: int = Field(default=512, ge=1)
    #: The web console under ``/ui`` (config/console.py): off unless enabled with a credential.
    ui: UiConfig = UiConfig()


class PipelineConfig(Section):
    """How events are retried and how much runs at once."""

    max_attempts: int = Field(default=5, ge=1)
    backoff_base: float = Field(default=1.0, gt=0)
    backoff_max: float = Field(default=300.0, gt=0)
    concurrency: int = Field(default=64, ge=1)
    queue_size: int = Field(default=10_000, ge=1)
    handler_timeout: float = Field(default=300.0, gt=0)
    drain_timeout: float = Field(default=30.0, ge=0)
    sweep_interval: float = Field(default=2.0, gt=0)
    #: How long ``ctx.ask`` waits for an answer when the handler gives no ``timeout``.
    ask_timeout: float = Field(default=86_400.0, gt=0)
    #: Sent once to the chat of an event that gave up (dead letter), so the person is not
    #: left waiting in silence; empty turns it off. Cron fires without a chat get none.
    dead_notice: str = "Sorry, something went wrong and I could not answer this. Try again later."


class OutboxConfig(Section):
    max_attempts: int = Field(default=8, ge=1)
    backoff_base: float = Field(default=1.0, gt=0)
    backoff_max: float = Field(default=120.0, gt=0)
    concurrency: int = Field(default=32, ge=1)


class RateLimitConfig(Section):
    """Per sender: ``messages`` within ``per_seconds`` (a token bucket); 0 turns it off."""

    messages: int = Field(default=20, ge=0)
    per_seconds: float = Field(default=60.0, gt=0)


class AccessConfig(Section):
    """Who may talk to the bot. Patterns are ``platform:user`` or ``platform:chat`` with
    ``*`` wildcards, e.g. ``telegram:12345``, ``discord:*``, ``*``."""

    allow: Patterns = []
    admins: Patterns = []
    #: Unknown senders in a DM get a one-time code for ``tether pair approve CODE``.
    pairing: bool = True
    rate_limit: RateLimitConfig = RateLimitConfig()


class LoggingConfig(Section):
    level: Literal["debug", "info", "warning", "error"] = "info"
    format: Literal["auto", "json", "console"] = "auto"
    file: str | None = None


def _folder(value: str) -> str:
    if not os.path.isabs(value):
        raise ValueError("must be an absolute path (a folder local files may come from)")
    path = os.path.normpath(value)
    if path in ("/", "//"):
        raise ValueError("'/' would allow every file, the gateway's secrets included")
    if in_pseudo_filesystem(path):
        raise ValueError(f"{path} is a pseudo-filesystem, not a place for files to send")
    return path


def _host(value: str) -> str:
    parse_rule(value)  # its ValueError says what is wrong with the entry
    return value


#: memory/blobs.py's MAX_BLOB_BYTES: the store's own cap on one file.
_MAX_FILE = 50 * 1024 * 1024


class MediaConfig(Section):
    """``media:``: what ``files=`` may reach besides the bytes a handler holds. Closed by
    default, since a handler often names a file from what a person or a model said
    (docs/media.md): no local file, and URLs only to public addresses."""

    #: Absolute folders a ``Path`` in ``files=`` may be read from (after symlinks and
    #: ``..`` are resolved); never ``/``, ``/proc``, ``/sys`` or ``/dev``.
    allow_paths: list[Annotated[str, AfterValidator(_folder)]] = []
    #: Non-public hosts a URL may reach: ``cdn.lan``, ``10.0.0.0/8``, ``127.0.0.1:9000``,
    #: ``[::1]:9000`` (tether/addresses.py).
    allow_hosts: list[Annotated[str, AfterValidator(_host)]] = []
    #: Seconds one URL may take in all, redirects included.
    fetch_timeout: float = Field(default=30.0, gt=0)
    #: Redirects one URL may follow; each is checked like the URL itself.
    max_redirects: int = Field(default=5, ge=0, le=20)
    #: The largest file a reply may carry (each platform's own limit still applies; none
    #: takes more than 50 MB, Telegram's): stored as a blob, so a cap on the store too.
    max_file_bytes: int = Field(default=_MAX_FILE, ge=1, le=_MAX_FILE)
    #: ``ctx.download``'s cap on a file a person sent, when the handler gives none.
    max_download_bytes: int = Field(default=20 * 1024 * 1024, ge=1)
    #: A photo passed to a model that sees images (larger ones are refused with a note).
    max_image_bytes: int = Field(default=10 * 1024 * 1024, ge=1)

    def host_rules(self) -> tuple[HostRule, ...]:
        return parse_rules(tuple(self.allow_hosts))


class Settings(Section):
    """The root of ``tether.yaml``."""

    agent: AgentConfig = AgentConfig()
    #: Optional: providers and models for the ``llm`` agent and ``ctx.llm``.
    llm: LLMConfig | None = Field(default=None, validate_default=True)
    memory: MemoryConfig = MemoryConfig()
    http: HttpConfig = HttpConfig()
    pipeline: PipelineConfig = PipelineConfig()
    outbox: OutboxConfig = OutboxConfig()
    platforms: PlatformsConfig = PlatformsConfig()
    plugins: list[str] = []
    jobs: list[JobConfig] = []
    access: AccessConfig = AccessConfig()
    logging: LoggingConfig = LoggingConfig()
    #: The watchdog's thresholds and where its alerts go (config/ops.py).
    ops: OpsConfig = OpsConfig()
    #: MCP servers whose tools the agent may call (config/mcp.py).
    mcp: McpConfig = McpConfig()
    #: What ``files=`` may reach: local folders and non-public hosts.
    media: MediaConfig = MediaConfig()
    #: Several agents, each with its own accounts (config/agents.py); ``agent:`` is the
    #: one-agent form. ``rooms:``: the guards where they hear each other.
    agents: list[AgentSpec] = []
    rooms: RoomsConfig = RoomsConfig()
    #: ``messages:``: the language and texts of Tether's own words (config/messages/).
    messages: MessagesConfig = MessagesConfig()

    @model_validator(mode="before")
    @classmethod
    def _llm_by_default(cls, data: Any) -> Any:
        """With an ``llm`` section and no explicit ``agent.handler``, the LLM answers."""
        if isinstance(data, dict) and data.get("llm") is not None:
            agent = data.get("agent")
            if agent is None or (isinstance(agent, dict) and "handler" not in agent):
                data = {**data, "agent": {**(agent or {}), "handler": "llm"}}
        return data

    @field_validator("llm")
    @classmethod
    def _llm_when_needed(cls, value: LLMConfig | None, info: ValidationInfo) -> LLMConfig | None:
        agent = info.data.get("agent")
        if value is None and agent is not None and agent.handler == "llm":
            raise ValueError(
                "agent.handler is 'llm', so an llm section with llm.providers and at least"
                " one model in llm.models is required"
            )
        return value

    @field_validator("memory")
    @classmethod
    def _embeddings_provider(cls, value: MemoryConfig, info: ValidationInfo) -> MemoryConfig:
        if "llm" in info.data:  # else the llm section failed, and said so
            check_embeddings(value.embeddings, info.data["llm"])
        return value

    @field_validator("agents")
    @classmethod
    def _agents(cls, value: list[AgentSpec], info: ValidationInfo) -> list[AgentSpec]:
        llm = info.data.get("llm")
        return check_agents(value, set(llm.models) if llm is not None else None)

    @model_validator(mode="after")
    def _dedup_outlives_redelivery(self) -> Settings:
        """A finished inbox row is kept past every enabled platform's redelivery window."""
        check_inbox_retention(self.memory.retention, enabled_platforms(self))
        return self

    @field_validator("jobs")
    @classmethod
    def _unique_job_ids(cls, value: list[JobConfig]) -> list[JobConfig]:
        return unique_ids(value)

    def secrets(self) -> list[str]:
        """Every secret in the config, for the log redactor: ``SecretStr`` values, the
        passwords and secret-named parameters of URLs (a PostgreSQL store, a proxy), and
        entries of maps under a secret name (``headers: {Authorization: …}``)."""
        found: list[str] = []
        _collect_secrets(self, found)
        return [s for s in found if s]

    def masked(self) -> dict[str, Any]:
        """The effective config as plain data, every secret replaced by ``***``."""
        masked: dict[str, Any] = _masked(self)
        return masked


def _collect_secrets(value: Any, out: list[str], named: bool = False) -> None:
    """Secret values, the credentials inside URLs, and strings under a secret name
    (``named``: a ``headers`` entry like ``Authorization``, an ``env`` entry like ``API_KEY``).
    """
    if isinstance(value, SecretStr):
        out.append(value.get_secret_value())
    elif isinstance(value, str):
        out.extend([value] if named else url_secrets(value))
    elif isinstance(value, BaseModel):
        for name in type(value).model_fields:
            _collect_secrets(getattr(value, name), out)
    elif isinstance(value, dict):
        for key, item in value.items():
            _collect_secrets(item, out, secret_name(key))
    elif isinstance(value, list | tuple):
        for item in value:
            _collect_secrets(item, out, named)


def _masked(value: Any, named: bool = False) -> Any:
    if isinstance(value, SecretStr):
        return MASK if value.get_secret_value() else ""
    if isinstance(value, str):
        return MASK if named and value else mask_urls(value)
    if isinstance(value, BaseModel):
        return {name: _masked(getattr(value, name)) for name in type(value).model_fields}
    if isinstance(value, dict):
        return {k: _masked(v, secret_name(k)) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_masked(v, named) for v in value]
    return value
