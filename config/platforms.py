"""``platforms:``: the console, Telegram, Discord, Feishu/Lark and Slack sections.

Each platform's credentials and connection are checked here in the platform's own terms
(token shapes, webhook secrets, intent names, domains), so ``tether check`` reports a
mistake with its key path before any connection is tried. A platform whose section is
absent is disabled.
"""

from __future__ import annotations

import re
from typing import Literal, Self

from pydantic import Field, SecretStr, ValidationError, field_validator, model_validator
from pydantic_core import InitErrorDetails, PydanticCustomError

from tether.config.console import WebChatConfig
from tether.config.section import RoutePath, Section

_TELEGRAM_TOKEN = re.compile(r"[0-9]+:[A-Za-z0-9_-]+")
_TELEGRAM_SECRET = re.compile(r"[A-Za-z0-9_-]{1,256}")


class ConsoleConfig(Section):
    enabled: bool = True
    user: str = "local"


class TelegramWebhookConfig(Section):
    """Where Telegram posts updates in webhook mode, and the secret it must present."""

    #: The public HTTPS URL Telegram posts to (it reaches ``path`` on Tether's HTTP server).
    url: str | None = None
    path: RoutePath = "/telegram/webhook"
    #: Sent back by Telegram in ``X-Telegram-Bot-Api-Secret-Token``; mandatory in webhook mode.
    secret_token: SecretStr | None = None

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
    path: RoutePath = "/feishu/webhook"
    #: Requests whose ``X-Lark-Request-Timestamp`` is further than this from now (seconds)
    #: are refused, so a captured request cannot be replayed later.
    max_age: float = Field(default=300.0, gt=0)


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


class SlackConfig(Section):
    """``platforms.slack``: present (with a bot token) means enabled.

    Socket Mode (the default) needs the app-level token (``xapp-…``, scope
    ``connections:write``) and no public URL; the Events API needs the signing secret and
    a route on Tether's HTTP server. Both send with the bot token (``xoxb-…``). The token
    prefixes are checked here because the two tokens are easy to swap, and Slack would
    only say ``not_allowed_token_type`` at start.
    """

    #: OAuth & Permissions → Bot User OAuth Token.
    bot_token: SecretStr
    #: Basic Information → App-Level Tokens (scope ``connections:write``); ``mode: socket``.
    app_token: SecretStr | None = None
    #: Basic Information → Signing Secret; ``mode: events`` (every post is checked with it).
    signing_secret: SecretStr | None = None
    #: ``socket``: Socket Mode (no public URL); ``events``: the Events API posts to ``events_path``.
    mode: Literal["socket", "events"] = "socket"
    #: The Web API's base (a proxy, or the fake in tests); methods are appended to it.
    api_base: str = "https://slack.com/api/"
    #: Where the Events API, slash commands and interactivity post (``mode: events``).
    events_path: RoutePath = "/slack/events"
    #: Oldest (or furthest future) request timestamp accepted, seconds: Slack's 5 minutes.
    max_age: float = Field(default=300.0, gt=0)
    #: Seconds one Web API call may take before it counts as failed.
    timeout: float = Field(default=10.0, gt=0)
    #: In channels, answer only messages that mention the bot (and its threads), or all.
    answer_channels: Literal["mentioned", "all"] = "mentioned"
    #: Messages from bots (other apps) are dropped, so two agents cannot loop.
    ignore_bots: bool = True
    #: About one message a second per channel, as Slack asks. Off only for benchmarks and tests.
    rate_limits: bool = True
    #: How many recent messages of a channel (or thread) are read back for an outbox key
    #: before a send that may already have happened (docs/slack.md#sending-exactly-once).
    reconcile_depth: int = Field(default=100, ge=1, le=999)

    @field_validator("bot_token")
    @classmethod
    def _bot_token_shape(cls, value: SecretStr) -> SecretStr:
        return _slack_token(value, "xoxb-", "the Bot User OAuth Token (xoxb-…)")

    @field_validator("app_token")
    @classmethod
    def _app_token_shape(cls, value: SecretStr | None) -> SecretStr | None:
        if value is None:
            return value
        return _slack_token(value, "xapp-", "an app-level token (xapp-…)")

    @field_validator("signing_secret")
    @classmethod
    def _secret_shape(cls, value: SecretStr | None) -> SecretStr | None:
        secret = value.get_secret_value() if value is not None else None
        if secret is not None and (not secret or any(ch.isspace() for ch in secret)):
            raise ValueError("must be the app's Signing Secret (Basic Information), no spaces")
        return value

    @field_validator("api_base")
    @classmethod
    def _api_base(cls, value: str) -> str:
        scheme, sep, rest = value.partition("://")
        host = rest.split("/", 1)[0].rsplit(":", 1)[0].strip("[]")
        if not sep or not host or scheme not in ("https", "http"):
            raise ValueError("must be a URL like https://slack.com/api/")
        if scheme == "http" and host not in _LOOPBACK:
            raise ValueError("must use https (plain http only for 127.0.0.1/localhost)")
        return value if value.endswith("/") else value + "/"  # slack-sdk joins method names

    @model_validator(mode="after")
    def _tokens_for_the_mode(self) -> Self:
        if self.mode == "socket" and self.app_token is None:
            _missing("app_token", "required with mode: socket (an app-level token, xapp-…)")
        if self.mode == "events" and self.signing_secret is None:
            _missing("signing_secret", "required with mode: events (Basic Information page)")
        return self


def _slack_token(value: SecretStr, prefix: str, what: str) -> SecretStr:
    token = value.get_secret_value()
    if not token.startswith(prefix) or any(ch.isspace() for ch in token):
        # Never the value itself: the message is printed by `tether check`.
        raise ValueError(f"must be {what}")
    return value


def _missing(key: str, reason: str) -> None:
    """Raise at ``platforms.slack.<key>`` rather than at the section, so the error names
    the key to add (a model validator's own error would name only ``platforms.slack``)."""
    raise ValidationError.from_exception_data(
        "SlackConfig",
        [
            InitErrorDetails(
                type=PydanticCustomError("required_for_mode", reason), loc=(key,), input=None
            )
        ],
    )


class PlatformsConfig(Section):
    console: ConsoleConfig = ConsoleConfig()
    #: None (absent) disables Telegram.
    telegram: TelegramConfig | None = None
    #: None (absent) disables Discord.
    discord: DiscordConfig | None = None
    #: None (absent) disables Feishu/Lark.
    feishu: FeishuConfig | None = None
    #: None (absent) disables Slack.
    slack: SlackConfig | None = None
    #: The web chat page (``/ui/chat``, behind the console's login; config/console.py).
    web: WebChatConfig = WebChatConfig()
