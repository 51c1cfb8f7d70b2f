"""The configuration schema: every key Tether reads, with its default.

Unknown keys are rejected (``extra="forbid"``) so a typo fails loudly instead of being
silently ignored. Secrets are ``SecretStr`` so they are masked wherever the config is
printed, and collected by :func:`secrets` for the log redactor.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator


class Section(BaseModel):
    """Base for every config section: unknown keys are an error, values are immutable."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class AgentConfig(Section):
    name: str = "Tether"
    persona: str = "You are a helpful assistant."
    handler: Literal["echo", "llm"] = "echo"
    group_sessions: Literal["per_user", "shared"] = "per_user"


class MemoryConfig(Section):
    store: str = "sqlite:///tether.db"
    history_tokens: int = Field(default=4000, gt=0)
    task_token_budget: int = Field(default=50_000, gt=0)
    sqlite_synchronous: Literal["normal", "full"] = "normal"

    @field_validator("store")
    @classmethod
    def _known_scheme(cls, value: str) -> str:
        if not value.startswith(("sqlite://", "memory://", "postgresql://", "postgres://")):
            raise ValueError(
                "must start with sqlite:///, postgresql:// or memory:// "
                f"(got {value.split(':', 1)[0]!r})"
            )
        return value


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


class PlatformsConfig(Section):
    console: ConsoleConfig = ConsoleConfig()


class LoggingConfig(Section):
    level: Literal["debug", "info", "warning", "error"] = "info"
    format: Literal["auto", "json", "console"] = "auto"
    file: str | None = None


class Settings(Section):
    """The root of ``tether.yaml``."""

    agent: AgentConfig = AgentConfig()
    memory: MemoryConfig = MemoryConfig()
    http: HttpConfig = HttpConfig()
    pipeline: PipelineConfig = PipelineConfig()
    outbox: OutboxConfig = OutboxConfig()
    platforms: PlatformsConfig = PlatformsConfig()
    plugins: list[str] = []
    logging: LoggingConfig = LoggingConfig()

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
