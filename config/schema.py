"""The configuration schema: every key Tether reads, with its default.

Unknown keys are rejected (``extra="forbid"``) so a typo fails loudly instead of being
silently ignored. Secrets are ``SecretStr`` so they are masked wherever the config is
printed, and collected by :func:`secrets` for the log redactor.
"""

from __future__ import annotations

import re
from typing import Any, Literal, Self

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_core import InitErrorDetails, PydanticCustomError

_TELEGRAM_TOKEN = re.compile(r"[0-9]+:[A-Za-z0-9_-]+")
_TELEGRAM_SECRET = re.compile(r"[A-Za-z0-9_-]{1,256}")
_JOB_ID = re.compile(r"[A-Za-z0-9_.-]{1,64}")
_DURATION = re.compile(r"(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?")


class Section(BaseModel):
    """Base for every config section: unknown keys are an error, values are immutable."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class AgentConfig(Section):
    name: str = "Tether"
    persona: str = "You are a helpful assistant."
    #: What answers when no plugin handler matched: ``llm`` (the default when an ``llm``
    #: section is configured) or ``echo`` (the default otherwise).
    handler: Literal["echo", "llm"] = "echo"
    group_sessions: Literal["per_user", "shared"] = "per_user"


class MemoryConfig(Section):
    #: ``sqlite:///relative.db``, ``sqlite:////absolute.db``, ``postgresql://user@host/db``
    #: (several instances), or ``memory://`` (nothing kept).
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

    @field_validator("store")
    @classmethod
    def _known_scheme(cls, value: str) -> str:
        if not value.startswith(("sqlite://", "postgresql://", "postgres://", "memory://")):
            raise ValueError(
                "must start with sqlite:///, postgresql:// or memory://"
                f" (got {value.split(':', 1)[0]!r})"
            )
        return value


class LLMProviderConfig(Section):
    """An OpenAI-compatible endpoint: OpenAI, OpenRouter, Ollama, vLLM, llama.cpp, ..."""

    #: The API root the SDK appends ``/chat/completions`` to, e.g. ``https://api.openai.com/v1``.
    base_url: str
    #: Empty for servers that need none (Ollama); write ``${OPENAI_API_KEY}``, not the key.
    api_key: SecretStr = SecretStr("")
    #: Seconds before a call counts as timed out (then a fallback model is tried).
    timeout: float = Field(default=60.0, gt=0)
    #: Extra HTTP headers, e.g. OpenRouter's ``HTTP-Referer`` and ``X-Title``.
    headers: dict[str, str] = {}


class LLMModelConfig(Section):
    provider: str
    #: The provider's model id, e.g. ``gpt-4o-mini``, ``meta-llama/llama-3.1-8b-instruct``.
    model: str
    #: The model's context window; routing skips a model whose window the prompt overflows.
    context_tokens: int = Field(default=8192, ge=1)
    #: Cap on completion tokens per call (also lowered to what the task budget has left).
    max_tokens: int | None = Field(default=None, ge=1)
    #: Prices per 1M tokens, for the cost in ``usage`` and ``/usage``.
    price_prompt: float = Field(default=0.0, ge=0)
    price_completion: float = Field(default=0.0, ge=0)
    #: tiktoken encoding for counting; by default from the model id, else ``o200k_base``.
    encoding: Literal["o200k_base", "cl100k_base"] | None = None
    temperature: float | None = Field(default=None, ge=0, le=2)


class LLMRouteConfig(Section):
    """Send matching calls to ``model``; every condition given must hold (first match wins)."""

    model: str
    platform: str | None = None
    #: A glob over the conversation key, e.g. ``telegram:-100*``.
    conversation: str | None = None
    #: The event's command without ``/``.
    command: str | None = None
    min_prompt_tokens: int | None = Field(default=None, ge=0)
    max_prompt_tokens: int | None = Field(default=None, ge=0)


class LLMConfig(Section):
    providers: dict[str, LLMProviderConfig] = Field(min_length=1)
    models: dict[str, LLMModelConfig] = Field(min_length=1)
    #: The model used when no route matches; the first model when unset.
    default: str | None = None
    #: The model that writes conversation summaries; the task's routed model when unset.
    summary_model: str | None = None
    routes: list[LLMRouteConfig] = []
    #: Tried in order when the chosen model answers 5xx, times out or cannot be reached.
    fallbacks: list[str] = []

    @field_validator("models")
    @classmethod
    def _known_providers(
        cls, value: dict[str, LLMModelConfig], info: ValidationInfo
    ) -> dict[str, LLMModelConfig]:
        providers = info.data.get("providers")
        if providers is None:  # already reported
            return value
        for name, model in value.items():
            if model.provider not in providers:
                raise ValueError(
                    f"{name}.provider: no provider {model.provider!r}"
                    f" (llm.providers has {', '.join(sorted(providers))})"
                )
        return value

    @field_validator("default", "summary_model", "fallbacks", "routes")
    @classmethod
    def _known_models(cls, value: Any, info: ValidationInfo) -> Any:
        models = info.data.get("models")
        if models is None or value is None:
            return value
        named: list[tuple[str, str]]  # (where, model name)
        if info.field_name == "routes":
            named = [(f"[{i}].model", route.model) for i, route in enumerate(value)]
        elif info.field_name == "fallbacks":
            named = [(f"[{i}]", name) for i, name in enumerate(value)]
        else:
            named = [("", value)]
        for where, name in named:
            if name not in models:
                raise ValueError(
                    f"{where + ': ' if where else ''}no model {name!r}"
                    f" (llm.models has {', '.join(sorted(models))})"
                )
        return value

    def default_model(self) -> str:
        return self.default or next(iter(self.models))


class HttpConfig(Section):
    enabled: bool = True
    host: str = "127.0.0.1"
    port: int = Field(default=8080, ge=0, le=65535)


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


class OutboxConfig(Section):
    max_attempts: int = Field(default=8, ge=1)
    backoff_base: float = Field(default=1.0, gt=0)
    backoff_max: float = Field(default=120.0, gt=0)
    concurrency: int = Field(default=32, ge=1)


class ConsoleConfig(Section):
    enabled: bool = True
    user: str = "local"


class TelegramWebhookConfig(Section):
    """Where Telegram posts updates in webhook mode, and the secret it must present."""

    #: The public HTTPS URL Telegram posts to (it reaches ``path`` on Tether's HTTP server).
    url: str | None = None
    path: str = "/telegram/webhook"
    #: Sent back by Telegram in ``X-Telegram-Bot-Api-Secret-Token``; mandatory in webhook mode.
    secret_token: SecretStr | None = None

    @field_validator("path")
    @classmethod
    def _absolute(cls, value: str) -> str:
        if not value.startswith("/"):
            raise ValueError("must start with '/'")
        return value

    @field_validator("secret_token")
    @classmethod
    def _secret_shape(cls, value: SecretStr | None) -> SecretStr | None:
        # Telegram's own rule; anything else is refused by setWebhook at start.
        if value is not None and not _TELEGRAM_SECRET.fullmatch(value.get_secret_value()):
            raise ValueError("must be 1-256 characters of A-Z, a-z, 0-9, _ and -")
        return value


class TelegramConfig(Section):
    """``platforms.telegram``: present (with a token) means enabled."""

    token: SecretStr
    mode: Literal["polling", "webhook"] = "polling"
    #: PTB's base_url, e.g. ``http://127.0.0.1:8081/bot`` for a self-hosted Bot API server.
    base_url: str | None = None
    webhook: TelegramWebhookConfig = TelegramWebhookConfig()
    #: In groups, answer only commands, mentions and replies to the bot, or everything.
    answer_groups: Literal["addressed", "all"] = "addressed"
    #: Messages from other bots are dropped, so two agents cannot answer each other forever.
    ignore_bots: bool = True
    #: Resend a reply whose first send timed out (Telegram has no idempotency key: it
    #: may then arrive twice). False marks it ``unknown`` for an operator to decide.
    resend_unknown: bool = False
    #: Per-chat 1/s, per-group 20/min, global 30/s. Off only for benchmarks and tests.
    rate_limits: bool = True
    #: Show "typing…" in a chat when a message for the bot arrives.
    typing: bool = True
    #: Long-poll seconds per getUpdates call.
    poll_timeout: int = Field(default=25, ge=0, le=50)
    allowed_updates: list[str] = ["message", "edited_message", "callback_query"]

    @field_validator("token")
    @classmethod
    def _token_shape(cls, value: SecretStr) -> SecretStr:
        if not _TELEGRAM_TOKEN.fullmatch(value.get_secret_value()):
            raise ValueError("must look like '123456:ABC-DEF...' (the token from @BotFather)")
        return value

    @model_validator(mode="after")
    def _webhook_needs_url_and_secret(self) -> Self:
        if self.mode != "webhook":
            return self
        missing = [
            key
            for key, value in (
                ("webhook.url", self.webhook.url),
                ("webhook.secret_token", self.webhook.secret_token),
            )
            if not value
        ]
        if missing:
            raise ValueError(
                f"mode: webhook requires {' and '.join(missing)}"
                " (the secret lets Tether reject posts that do not come from Telegram)"
            )
        return self


_FEISHU_DOMAINS = {"feishu": "https://open.feishu.cn", "lark": "https://open.larksuite.com"}
_LOOPBACK = ("127.0.0.1", "localhost", "::1")


class FeishuWebhookConfig(Section):
    """Where Feishu/Lark posts events in webhook mode."""

    #: The route on Tether's HTTP server; the console's "Request URL" must reach it.
    path: str = "/feishu/webhook"
    #: Requests whose ``X-Lark-Request-Timestamp`` is further than this from now (seconds)
    #: are refused, so a captured request cannot be replayed later.
    max_age: float = Field(default=300.0, gt=0)

    @field_validator("path")
    @classmethod
    def _absolute(cls, value: str) -> str:
        if not value.startswith("/"):
            raise ValueError("must start with '/'")
        return value


class FeishuConfig(Section):
    """``platforms.feishu``: present (with app_id and app_secret) means enabled."""

    app_id: str = Field(min_length=1)
    app_secret: SecretStr
    #: ``feishu`` (open.feishu.cn), ``lark`` (open.larksuite.com), or an origin URL
    #: (``https://host[:port]``; plain http only on loopback, for tests).
    domain: str = "feishu"
    #: ``websocket``: the long connection (no public URL needed); ``webhook``: event posts.
    mode: Literal["websocket", "webhook"] = "websocket"
    #: The console's "Verification Token"; checked on every webhook post (required there).
    verification_token: SecretStr | None = None
    #: The console's "Encrypt Key": webhook bodies are AES-encrypted and signed with it.
    encrypt_key: SecretStr | None = None
    webhook: FeishuWebhookConfig = FeishuWebhookConfig()
    #: In groups, answer only messages that @-mention the bot, or every message (the
    #: app then needs the permission to read all group messages).
    answer_groups: Literal["mentioned", "all"] = "mentioned"
    #: Messages sent by bots (other apps) are dropped, so two agents cannot loop.
    ignore_bots: bool = True
    #: 5 sends/s per chat and 50/s per app, as Feishu asks. Off only for benchmarks and tests.
    rate_limits: bool = True
    #: Seconds an open-platform API call may take before it counts as failed.
    timeout: float = Field(default=10.0, gt=0)

    @field_validator("domain")
    @classmethod
    def _domain(cls, value: str) -> str:
        value = _FEISHU_DOMAINS.get(value.lower(), value).rstrip("/")
        scheme, sep, rest = value.partition("://")
        host = rest.split("/", 1)[0].rsplit(":", 1)[0].strip("[]")
        if not sep or "/" in rest or not host or "@" in rest or "?" in rest:
            raise ValueError("must be feishu, lark, or an origin like https://open.feishu.cn")
        if scheme != "https" and not (scheme == "http" and host in _LOOPBACK):
            raise ValueError("must use https (plain http only for 127.0.0.1/localhost)")
        return value

    @model_validator(mode="after")
    def _webhook_needs_token(self) -> Self:
        if self.mode == "webhook" and not self.verification_token:
            raise ValueError(
                "mode: webhook requires verification_token (the console's Verification"
                " Token lets Tether reject posts that do not come from Feishu)"
            )
        return self


#: discord.Intents' flag names (discord.py 2.7), checked here so `tether check` sees a typo.
_DISCORD_INTENTS = frozenset(
    """guilds members moderation bans emojis emojis_and_stickers expressions integrations
    webhooks invites voice_states presences messages guild_messages dm_messages reactions
    guild_reactions dm_reactions typing guild_typing dm_typing message_content
    guild_scheduled_events auto_moderation auto_moderation_configuration
    auto_moderation_execution polls guild_polls dm_polls""".split()  # noqa: SIM905
)


class DiscordConfig(Section):
    """``platforms.discord``: present (with a token) means enabled."""

    #: The bot token from the developer portal (Bot → Reset Token), without "Bot ".
    token: SecretStr
    #: Gateway intents (discord.Intents flag names). ``message_content`` is privileged:
    #: enable it in the portal too, or Discord closes the connection (code 4014).
    intents: list[str] = ["guilds", "guild_messages", "dm_messages", "message_content"]
    #: In servers, answer only messages that mention the bot or reply to it (DMs and
    #: ``/ask`` are always answered).
    require_mention: bool = True
    #: Messages from other bots (and webhooks) are dropped, so two agents cannot loop.
    ignore_bots: bool = True
    #: After a (re)connect, read what was posted while Tether was away in the channels
    #: active within this many hours (0 turns backfill off).
    backfill_hours: float = Field(default=24.0, ge=0)
    #: At most this many missed messages are read per channel on a backfill.
    backfill_limit: int = Field(default=500, ge=1)
    #: Register the ``/ask`` slash command (answered by editing the deferred response).
    ask_command: bool = False
    #: REST base, e.g. ``https://discord.com/api/v10`` (a proxy, or a fake in tests).
    api_base: str | None = None
    #: Gateway URL, e.g. ``wss://gateway.discord.gg/`` (a proxy, or a fake in tests).
    gateway_url: str | None = None
    #: Seconds one send may take, discord.py's own rate-limit waits and 5xx retries
    #: included; a slower send is retried with the same nonce (so it cannot post twice).
    send_timeout: float = Field(default=30.0, gt=0)

    @field_validator("token")
    @classmethod
    def _token_shape(cls, value: SecretStr) -> SecretStr:
        token = value.get_secret_value()
        if token.lower().startswith("bot "):
            raise ValueError("write the token without the 'Bot ' prefix")
        if not token or any(ch.isspace() for ch in token):
            raise ValueError("must be the bot token from the developer portal (no spaces)")
        return value

    @field_validator("intents")
    @classmethod
    def _known_intents(cls, value: list[str]) -> list[str]:
        unknown = [name for name in value if name not in _DISCORD_INTENTS]
        if unknown:
            raise ValueError(
                f"unknown intent(s) {', '.join(map(repr, unknown))}"
                " (names as in discord.Intents, e.g. guild_messages, message_content)"
            )
        return value

    @field_validator("api_base")
    @classmethod
    def _http_url(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith(("https://", "http://")):
            raise ValueError("must start with https:// (or http:// for a local proxy)")
        return value.rstrip("/") if value else value

    @field_validator("gateway_url")
    @classmethod
    def _ws_url(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith(("wss://", "ws://")):
            raise ValueError("must start with wss:// (or ws:// for a local proxy)")
        return value


class PlatformsConfig(Section):
    console: ConsoleConfig = ConsoleConfig()
    #: None (absent) disables Telegram.
    telegram: TelegramConfig | None = None
    #: None (absent) disables Discord.
    discord: DiscordConfig | None = None
    #: None (absent) disables Feishu/Lark.
    feishu: FeishuConfig | None = None


class RateLimitConfig(Section):
    """Per sender: ``messages`` within ``per_seconds`` (a token bucket); 0 turns it off."""

    messages: int = Field(default=20, ge=0)
    per_seconds: float = Field(default=60.0, gt=0)


class AccessConfig(Section):
    """Who may talk to the bot. Patterns are ``platform:user`` or ``platform:chat`` with
    ``*`` wildcards, e.g. ``telegram:12345``, ``discord:*``, ``*``."""

    allow: list[str] = []
    admins: list[str] = []
    #: Unknown senders in a DM get a one-time code for ``tether pair approve CODE``.
    pairing: bool = True
    rate_limit: RateLimitConfig = RateLimitConfig()

    @field_validator("allow", "admins")
    @classmethod
    def _patterns(cls, value: list[str]) -> list[str]:
        for pattern in value:
            if pattern != "*" and ":" not in pattern:
                raise ValueError(f"{pattern!r} should be platform:id (wildcards allowed) or *")
        return value


class JobConfig(Section):
    """One ``jobs:`` entry: when it fires, where its messages go, what it does, and what
    happens to fires missed while Tether was down (see README.md, "Scheduled jobs (cron)")."""

    #: Part of every fire's event key (``cron:{id}:{time}``), so it must be stable.
    id: str
    #: 5 fields (``minute hour day month weekday``, 0 and 7 are Sunday) or 6, seconds first.
    cron: str
    #: IANA name; fire times follow its daylight-saving changes.
    timezone: str = "UTC"
    #: Delay each fire by a random 0..jitter seconds (the event key keeps the scheduled time).
    jitter: float | None = Field(default=None, ge=0)
    #: ``platform:chat[:thread]`` or a list; the first is the conversation the job runs in.
    deliver: list[str] = []
    #: Fires missed while down: ``latest`` runs the newest, ``all`` every one, ``skip`` none.
    catch_up: Literal["latest", "all", "skip"] = "latest"
    #: How late a missed fire may still run: seconds, or ``90s``, ``30m``, ``1h``, ``1d``.
    grace: float = Field(default=3600.0, ge=0)
    #: A fire while the previous one is unfinished: ``skip`` it, or ``queue`` it behind.
    overlap: Literal["skip", "queue"] = "skip"
    #: Exactly one action: a fixed message, a prompt for the agent, or ``module:function``.
    text: str | None = None
    prompt: str | None = None
    handler: str | None = None

    @field_validator("id")
    @classmethod
    def _id_shape(cls, value: str) -> str:
        if not _JOB_ID.fullmatch(value):
            raise ValueError("must be 1-64 characters of A-Z, a-z, 0-9, _, . and -")
        return value

    @field_validator("cron")
    @classmethod
    def _cron_parses(cls, value: str) -> str:
        from tether.scheduler.cron import trigger  # the scheduler's own parser: one set of rules

        trigger(value)
        return value

    @field_validator("timezone")
    @classmethod
    def _known_zone(cls, value: str) -> str:
        from tether.scheduler.cron import zone

        zone(value)
        return value

    @field_validator("deliver", mode="before")
    @classmethod
    def _targets(cls, value: Any) -> Any:
        items = [value] if isinstance(value, str) else value
        if isinstance(items, list):
            for item in items:
                parts = item.split(":", 2) if isinstance(item, str) else []
                if len(parts) < 2 or not all(parts):
                    raise ValueError(f"expected platform:chat[:thread], got {item!r}")
        return items

    @field_validator("grace", mode="before")
    @classmethod
    def _duration(cls, value: Any) -> Any:
        if not isinstance(value, str) or not value.strip():
            return value
        match = _DURATION.fullmatch(value.strip())
        if not match or not any(match.groups()):
            raise ValueError("expected seconds or a duration like 90s, 30m, 1h, 1d, 1h30m")
        days, hours, minutes, seconds = (int(group or 0) for group in match.groups())
        return ((days * 24 + hours) * 60 + minutes) * 60 + seconds

    @model_validator(mode="after")
    def _one_action(self) -> Self:
        actions = [name for name in ("text", "prompt", "handler") if getattr(self, name)]
        if len(actions) != 1:
            raise ValueError(
                "needs exactly one of text, prompt or handler"
                + (f" (got {' and '.join(actions)})" if actions else "")
            )
        if self.handler is not None:
            module, _, function = self.handler.partition(":")
            if not module or not function:
                raise ValueError(f"handler: {self.handler!r} should be 'package.module:function'")
        elif not self.deliver:
            raise ValueError(f"{actions[0]} needs deliver: the chat(s) to send to")
        return self


class LoggingConfig(Section):
    level: Literal["debug", "info", "warning", "error"] = "info"
    format: Literal["auto", "json", "console"] = "auto"
    file: str | None = None


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

    @field_validator("jobs")
    @classmethod
    def _unique_job_ids(cls, value: list[JobConfig]) -> list[JobConfig]:
        first: dict[str, int] = {}
        for index, job in enumerate(value):
            if job.id in first:
                # Raised with its own location, so the error names jobs[i].id itself.
                detail = f"duplicate job id (jobs[{first[job.id]}].id has it too)"
                raise ValidationError.from_exception_data(
                    "Settings",
                    [
                        InitErrorDetails(
                            type=PydanticCustomError("duplicate_job_id", detail),
                            loc=(index, "id"),
                            input=job.id,
                        )
                    ],
                )
            first[job.id] = index
        return value

    def secrets(self) -> list[str]:
        """Every secret value in the config, for the log redactor."""
        found: list[str] = []
        _collect_secrets(self, found)
        return [s for s in found if s]

    def masked(self) -> dict[str, Any]:
        """The effective config as plain data, every secret replaced by ``***``."""
        masked: dict[str, Any] = _masked(self)
        return masked


def _collect_secrets(value: Any, out: list[str]) -> None:
    if isinstance(value, SecretStr):
        out.append(value.get_secret_value())
    elif isinstance(value, BaseModel):
        for name in type(value).model_fields:
            _collect_secrets(getattr(value, name), out)
    elif isinstance(value, dict):
        for item in value.values():
            _collect_secrets(item, out)
    elif isinstance(value, list | tuple):
        for item in value:
            _collect_secrets(item, out)


def _masked(value: Any) -> Any:
    if isinstance(value, SecretStr):
        return "***" if value.get_secret_value() else ""
    if isinstance(value, BaseModel):
        return {name: _masked(getattr(value, name)) for name in type(value).model_fields}
    if isinstance(value, dict):
        return {k: _masked(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_masked(v) for v in value]
    return value
