"""The ``llm:`` section: OpenAI-compatible providers, the models on them, and routing.

Every cross-reference (a model's provider, a route's or fallback's model) is checked here,
so a misspelt name fails ``tether check`` with its key path instead of the first LLM call.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, SecretStr, ValidationInfo, field_validator, model_validator

from tether.config.section import Section


class LLMProviderConfig(Section):
    """An OpenAI-compatible endpoint: OpenAI, OpenRouter, Ollama, vLLM, llama.cpp, ..."""

    #: The API root the SDK appends ``/chat/completions`` to, e.g. ``https://api.openai.com/v1``.
    base_url: str
    #: Empty for servers that need none (Ollama); write ``${OPENAI_API_KEY}``, not the key.
    api_key: SecretStr = SecretStr("")
    #: A pool of keys for the same endpoint, instead of ``api_key``: calls spread over the
    #: healthy ones, a 429 cools one down and 401/402/403 takes it out until a reload.
    api_keys: list[SecretStr] = []
    #: Seconds before a call counts as timed out (then a fallback model is tried).
    timeout: float = Field(default=60.0, gt=0)
    #: Extra HTTP headers, e.g. OpenRouter's ``HTTP-Referer`` and ``X-Title``.
    headers: dict[str, str] = {}

    @model_validator(mode="after")
    def _one_key_form(self) -> LLMProviderConfig:
        if self.api_key.get_secret_value() and self.api_keys:
            raise ValueError("api_key and api_keys are both set: keep one (api_keys for a pool)")
        if any(not key.get_secret_value() for key in self.api_keys):
            raise ValueError("api_keys: an empty key (an unset ${VARIABLE}?)")
        return self

    def keys(self) -> list[str]:
        """The pool, in configured order; one empty key for a server that needs none."""
        return [k.get_secret_value() for k in self.api_keys] or [self.api_key.get_secret_value()]


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
    #: The model takes images (OpenAI image content parts): the ``llm`` agent sends it
    #: the photos people send; without it they are told the model cannot see them.
    vision: bool = False
    #: Whether calls to this model may offer tools (docs/tools.md); ``false`` for a model
    #: or server without tool calling, which then answers without them.
    tools: bool = True


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


class CircuitBreakerConfig(Section):
    """When a model keeps failing, stop asking it for a while and go to the fallbacks."""

    #: Consecutive failures (5xx, timeouts, unreachable) that open a model's breaker.
    failures: int = Field(default=5, ge=1)
    #: Seconds an open breaker sends calls to the fallbacks before one probe call.
    cooldown: float = Field(default=30.0, gt=0)


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
    circuit_breaker: CircuitBreakerConfig = CircuitBreakerConfig()
    #: The longest anything waits for the model, in seconds: a key cooling after a 429
    #: (a provider asking for more, even ``inf``, is capped at this, and said out loud),
    #: an event waiting in ``retry_wait`` for a key or a probe. An event no model can
    #: answer within this of its arrival is answered with ``busy_notice`` instead.
    max_retry_after: float = Field(default=120.0, gt=0, allow_inf_nan=False)
    #: The answer when no model can answer in time (rate limited, breakers open): the
    #: person is told, not left waiting; their next message is tried afresh.
    busy_notice: str = Field(
        default="The model is unavailable right now, so I could not answer this."
        " Please try again in a few minutes.",
        min_length=1,
    )

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


class EmbeddingsConfig(Section):
    """``memory.embeddings``: semantic recall through an OpenAI-compatible ``/v1/embeddings``
    endpoint (docs/recall.md). Its endpoint is a provider of ``llm.providers`` by name
    (its base URL, first key, timeout and headers), or one of its own (``base_url``)."""

    #: A name in ``llm.providers``.
    provider: str | None = None
    #: Or an endpoint for embeddings alone, e.g. ``http://localhost:11434/v1`` (Ollama).
    base_url: str | None = None
    #: With ``base_url``; write ``${VARIABLE}``, not the key.
    api_key: SecretStr = SecretStr("")
    #: Seconds one request may take (with ``base_url``; a provider has its own).
    timeout: float = Field(default=30.0, gt=0)
    #: The endpoint's model id, e.g. ``text-embedding-3-small``, ``nomic-embed-text``.
    model: str = Field(min_length=1)
    #: Turns sent in one request while the indexer catches up.
    batch: int = Field(default=64, ge=1, le=2048)
    #: The cosine similarity from which a turn counts as near a query (model-dependent:
    #: unrelated texts score about 0.1 with OpenAI's models, related ones 0.3 and up).
    min_similarity: float = Field(default=0.3, ge=-1, le=1)

    @model_validator(mode="after")
    def _one_endpoint(self) -> EmbeddingsConfig:
        if (self.provider is None) == (self.base_url is None):
            raise ValueError(
                "set provider (a name in llm.providers) or base_url (an endpoint of its own),"
                " one of them"
            )
        if self.provider is not None and self.api_key.get_secret_value():
            raise ValueError("api_key goes with base_url; a provider's key is its own")
        return self


def check_embeddings(
    embeddings: EmbeddingsConfig | None, llm: LLMConfig | None
) -> EmbeddingsConfig | None:
    """``memory.embeddings.provider`` names a configured provider (the error names the
    key, for ``tether check``)."""
    if embeddings is None or embeddings.provider is None:
        return embeddings
    providers = sorted(llm.providers) if llm is not None else []
    if embeddings.provider not in providers:
        known = f"llm.providers has {', '.join(providers)}" if providers else "no llm.providers"
        raise ValueError(f"embeddings.provider: no provider {embeddings.provider!r} ({known})")
    return embeddings
