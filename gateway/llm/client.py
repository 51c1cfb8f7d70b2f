"""LLM calls: OpenAI-compatible chat completions, routed, memoized and within budgets.

One :class:`LLM` per gateway holds an ``AsyncOpenAI`` client per configured provider, so
OpenAI, OpenRouter, Ollama, vLLM and llama.cpp servers all work through the same SDK.
Each handler gets ``ctx.llm``, a :class:`TaskLLM` bound to its event:

- **memoized**: every call is a ``ctx.step``, so a retry or a restart after a crash gets
  the stored answer instead of paying for the same tokens again;
- **budgeted**: before a real call it checks the event's ``tether.memory.task_token_budget`` and
  the conversation's ``tether.memory.daily_token_budget``. A call that could cross one is not
  made (:class:`~tether.errors.BudgetExceeded`, logged as ``budget.exceeded``), and the
  completion is capped (``max_tokens``) at what is left, so the model is never trusted to
  stop by itself;
- **routed**: the first matching ``llm.routes`` rule (platform, conversation, command,
  prompt size) picks the model, then ``llm.fallbacks`` are tried in order on 5xx,
  timeouts and unreachable servers;
- **accounted**: the API's usage (prompt and completion tokens, cost from the configured
  prices) is recorded per conversation, model and day in the checkpoint transaction.

The SDK's own retries are off (``max_retries=0``). A provider's keys are a pool
(:mod:`.keys`): a 429 cools one key and the call moves to the next at once, a 401,
402 or 403 is tried once more and then takes the key out. A model whose keys are all
cooling, or whose circuit breaker is open, is passed over for the next candidate; when
none is left the call raises :class:`~.waits.ModelBusy` (a Retryable with the earliest
time one may answer, never beyond ``llm.max_retry_after``: the pipeline waits for it or
tells the person), Retryable when the models failed (5xx, timeouts), or
:class:`~.keys.KeysRefused` (Fatal) when every key was refused. 400 and other 4xx are
Fatal. A breaker's probe in flight makes the others wait for its verdict, not fail.

A reload builds a new LLM and retires this one: :meth:`LLM.retire` closes its clients
once no event that started on it is running (:meth:`LLM.acquire` / :meth:`LLM.release`).
"""

from __future__ import annotations

import asyncio
import fnmatch
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import structlog

from tether import metrics
from tether.config.schema import LLMModelConfig, Settings
from tether.errors import Fatal, Retryable
from tether.gateway.llm.keys import Breaker, Key, KeyPool, KeyProblem, KeysRefused
from tether.gateway.llm.misses import Misses
from tether.gateway.llm.stream import creator
from tether.gateway.llm.waits import ModelBusy, retry_after
from tether.gateway.ops.alerts import Reading
from tether.memory import tokens

if TYPE_CHECKING:
    import openai

log = structlog.get_logger("tether.llm")

#: One chat message in the OpenAI format; an assistant's ``tool_calls`` and a ``tool``
#: result's ``tool_call_id`` make some values other than text.
Message = dict[str, Any]
#: Completion cap when a model sets no ``max_tokens``: every current model allows it.
DEFAULT_MAX_TOKENS = 4096
#: A call with less room than this for its answer is not worth making.
MIN_COMPLETION_TOKENS = 16


@dataclass(frozen=True, slots=True)
class Completion:
    """One answered call: the text, which configured model answered, and what it cost."""

    text: str
    model: str
    prompt_tokens: int
    completion_tokens: int
    cost: float
    day: str
    #: The calls the model asked for, in the API's shape (``id``, ``type``, ``function``:
    #: ``name``, ``arguments`` as a JSON string); empty for a final answer.
    tool_calls: list[dict[str, Any]] = field(default_factory=list)

    @property
    def tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


@dataclass(frozen=True, slots=True)
class Request:
    """One question for the model, whichever candidate ends up answering it."""

    messages: list[Message]
    max_tokens: int
    #: Passed to the API as is (reflection's ``json_schema``); never streamed: its text
    #: is JSON, not for a person.
    response_format: dict[str, Any] | None = None
    #: The tool loop's schemas: the answer may hold ``tool_calls``.
    tools: list[dict[str, Any]] | None = None
    #: Called with the whole text so far while a streamed answer arrives (the agent's
    #: preview, ``gateway/agent/streaming.py``); None asks for one plain response.
    on_text: Callable[[str], None] | None = None


class Unavailable(Exception):
    """The model did not answer (5xx, timeout, connection): try the next fallback."""


class LLM:
    """The configured providers and models; shared by every event of a gateway."""

    def __init__(self, settings: Settings) -> None:
        if settings.llm is None:
            raise ValueError("no llm section configured")
        self.settings = settings
        self.config = settings.llm
        self._clients: dict[tuple[str, str], openai.AsyncOpenAI] = {}
        bound = self.config.max_retry_after
        self.pools = {
            name: KeyPool(name, p.keys(), bound) for name, p in self.config.providers.items()
        }
        breaker = self.config.circuit_breaker
        self.breakers = {
            name: Breaker(name, breaker.failures, breaker.cooldown) for name in self.config.models
        }
        #: Events running on this client: a retired one is closed when none is left.
        self._users = 0
        self._unused = asyncio.Event()
        self._unused.set()

    def prepare(self) -> None:
        """Import the SDK and make the clients now (importing ``openai`` takes ~0.6 s, which
        should not stall the event loop at the first call). Safe to run in a thread."""
        for provider, pool in self.pools.items():
            for key in pool.keys:
                self.client(provider, key)

    def client(self, provider: str, key: Key) -> openai.AsyncOpenAI:
        """One SDK client (and connection pool) per key of a provider, made on first use."""
        if (provider, key.id) not in self._clients:
            import openai  # not at the top: most processes (tether check, dead) never call

            cfg = self.config.providers[provider]
            self._clients[provider, key.id] = openai.AsyncOpenAI(
                base_url=cfg.base_url,
                # The SDK insists on a key; local servers (Ollama) ignore whatever is sent.
                api_key=key.secret or "unused",
                timeout=cfg.timeout,
                max_retries=0,  # the pipeline retries durably, with backoff
                default_headers=cfg.headers or None,
            )
        return self._clients[provider, key.id]

    async def close(self) -> None:
        for client in self._clients.values():
            await client.close()
        self._clients.clear()
        for pool in self.pools.values():
            pool.forget()

    def acquire(self) -> None:
        """An event starts on this client (the pipeline; :meth:`release` when it ends)."""
        self._users += 1
        self._unused.clear()

    def release(self) -> None:
        self._users -= 1
        if self._users <= 0:
            self._unused.set()

    async def retire(self) -> None:
        """A reload swapped in a new client: close this one once no event uses it (each
        client holds a connection pool and about a megabyte)."""
        await self._unused.wait()
        await self.close()

    def clients_open(self) -> bool:
        return any(not client.is_closed() for client in self._clients.values())

    def readings(self) -> list[Reading]:
        """One watchdog check per provider (``llm.{provider}``), tripped while every key
        is out or the provider asked to wait longer than ``llm.max_retry_after``: an
        alert and a ``/readyz`` reason, the operator's to act on."""
        return [pool.reading() for pool in self.pools.values()]

    def model(self, name: str) -> LLMModelConfig:
        return self.config.models[name]

    def candidates(
        self,
        *,
        platform: str,
        conversation: str,
        command: str | None,
        prompt_tokens: int,
        model: str | None = None,
    ) -> list[str]:
        """The model to ask first (``model``, else the first matching route, else the
        default), then the fallbacks; models whose window the prompt overflows are
        skipped while another one fits."""
        first = model or self._route(platform, conversation, command, prompt_tokens)
        names = [first, *(name for name in self.config.fallbacks if name != first)]
        need = prompt_tokens + MIN_COMPLETION_TOKENS
        fitting = [name for name in names if self.model(name).context_tokens >= need]
        if not fitting:
            raise Fatal(
                f"a prompt of {prompt_tokens} tokens fits no configured model"
                f" (largest context: {max(self.model(n).context_tokens for n in names)})"
            )
        return fitting

    def _route(
        self, platform: str, conversation: str, command: str | None, prompt_tokens: int
    ) -> str:
        for route in self.config.routes:
            if route.platform is not None and route.platform != platform:
                continue
            if route.conversation is not None and not fnmatch.fnmatchcase(
                conversation, route.conversation
            ):
                continue
            if route.command is not None and route.command.lstrip("/") != command:
                continue
            if route.min_prompt_tokens is not None and prompt_tokens < route.min_prompt_tokens:
                continue
            if route.max_prompt_tokens is not None and prompt_tokens > route.max_prompt_tokens:
                continue
            return route.model
        return self.config.default_model()

    def encoding(self, name: str) -> str:
        cfg = self.model(name)
        return cfg.encoding or tokens.encoding_name(cfg.model)

    async def answer(
        self,
        candidates: list[str],
        request: Request,
        scope: structlog.typing.FilteringBoundLogger,
    ) -> Completion:
        """The first answer of ``candidates`` in order, past open circuit breakers and
        rate-limited pools; a model whose probe is in flight is passed over, and asked
        again once the probe ends if no other candidate answered. Raises what
        :class:`Misses` makes of the candidates that did not answer."""
        misses = Misses(self.config.max_retry_after, self.config.busy_notice)
        remaining = list(candidates)
        while remaining:
            probing: list[Breaker] = []
            for index, candidate in enumerate(remaining):
                breaker = self.breakers[candidate]
                if breaker.probing:
                    probing.append(breaker)
                    continue
                if not breaker.allows():
                    misses.skipped(candidate, breaker.wait())
                    scope.info("llm.breaker_skip", model=candidate)
                    continue
                estimate = tokens.count_messages(request.messages, self.encoding(candidate))
                try:
                    completion = await self.complete(candidate, request, estimate)
                except (Unavailable, KeysRefused, ModelBusy) as exc:
                    misses.add(exc)
                    if isinstance(exc, Unavailable):
                        breaker.failed()
                    else:
                        breaker.released()  # the keys failed, not the model
                    following = remaining[index + 1] if index + 1 < len(remaining) else None
                    scope.warning("llm.unavailable", error=str(exc), fallback=following)
                    continue
                except BaseException:
                    breaker.released()
                    raise
                breaker.succeeded()
                return completion
            remaining = [breaker.model for breaker in probing]
            if probing:  # no other candidate answered: the probe's verdict decides
                scope.info("llm.breaker_wait", models=remaining)
                await probing[0].probed()
        raise misses.error()

    async def complete(self, name: str, request: Request, estimate: int) -> Completion:
        """One call to model ``name`` with the first key of its pool that answers."""
        provider = self.model(name).provider
        pool = self.pools[provider]
        refused: list[int] = []
        order = deque(pool.order())
        while order:
            key = order.popleft()
            try:
                completion = await self._call(name, key, request, estimate)
            except KeyProblem as exc:
                if exc.status == 429:
                    pool.cool(key, exc.retry_after)
                elif pool.refuse(key, exc.status):
                    order.append(key)  # once more, after the pool's other keys
                else:
                    refused.append(exc.status)
                continue
            pool.answered(key)
            return completion
        wait = pool.wait()
        if wait is None:
            why = f"HTTP {refused[-1]}" if refused else "401/402/403 earlier"
            raise KeysRefused(
                f"{name}: every API key of provider {provider!r} was refused ({why});"
                " they are tried again after a reload"
            )
        seconds, capped = wait
        raise ModelBusy(
            f"{name}: HTTP 429 rate limited on every API key of provider {provider!r}",
            retry_after=seconds,
            capped=capped,
            bound=self.config.max_retry_after,
            notice=self.config.busy_notice,
        )

    async def _call(self, name: str, key: Key, request: Request, estimate: int) -> Completion:
        """One request; errors mapped to Unavailable / KeyProblem / Retryable / Fatal."""
        import openai

        cfg = self.model(name)
        client = self.client(cfg.provider, key)
        extra: dict[str, Any] = {}
        if cfg.temperature is not None:
            extra["temperature"] = cfg.temperature
        if request.response_format is not None:  # structured output (reflection's proposal)
            extra["response_format"] = request.response_format
        if request.tools and cfg.tools:  # the agent's tool loop (gateway/tools/loop.py)
            extra["tools"] = request.tools
        started = time.monotonic()
        try:
            # Streamed when the agent shows this answer as it is written (.stream).
            response = await creator(client, request.response_format, request.on_text)(
                model=cfg.model,
                messages=request.messages,
                max_tokens=request.max_tokens,
                **extra,
            )
        except (openai.APITimeoutError, openai.APIConnectionError) as exc:
            raise Unavailable(f"{name}: {type(exc).__name__}: {exc}") from exc
        except openai.RateLimitError as exc:
            raise KeyProblem(429, retry_after(exc.response)) from exc
        except openai.APIStatusError as exc:
            status = exc.status_code
            if status in (401, 402, 403):
                raise KeyProblem(status) from exc
            if status >= 500 or status == 408:
                raise Unavailable(f"{name}: HTTP {status}: {exc.message}") from exc
            if status == 409:
                raise Retryable(f"{name}: HTTP 409: {exc.message}") from exc
            raise Fatal(f"{name}: HTTP {status}: {exc.message}") from exc
        if not response.choices:
            raise Unavailable(f"{name}: the answer has no choices")
        text = response.choices[0].message.content or ""
        calls = [
            {"id": c.id, "type": "function", "function": c.function.model_dump()}
            for c in response.choices[0].message.tool_calls or []
            if c.type == "function"
        ]
        usage = response.usage
        if usage is not None:
            prompt, completion = usage.prompt_tokens, usage.completion_tokens
        else:  # some servers omit usage: fall back to our own count
            prompt, completion = estimate, tokens.count(text, self.encoding(name))
            log.warning("llm.no_usage", model=name)
        cost = (prompt * cfg.price_prompt + completion * cfg.price_completion) / 1_000_000
        metrics.LLM_TOKENS.labels(name, "prompt").inc(prompt)
        metrics.LLM_TOKENS.labels(name, "completion").inc(completion)
        metrics.LLM_COST.labels(name).inc(cost)
        log.info(
            "llm.call",
            model=name,
            key=key.id,
            prompt_tokens=prompt,
            completion_tokens=completion,
            cost=round(cost, 8),
            duration_ms=round((time.monotonic() - started) * 1000, 2),
        )
        day = datetime.now(UTC).date().isoformat()
        return Completion(text, name, prompt, completion, cost, day, calls)
