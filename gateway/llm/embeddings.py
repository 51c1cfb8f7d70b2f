"""Embeddings: texts to vectors through an OpenAI-compatible ``/v1/embeddings`` endpoint.

``memory.embeddings`` names the endpoint (a provider of ``llm.providers``, or a
``base_url`` of its own) and the model; the ``openai`` SDK's ``embeddings.create`` makes
the call, with its own retries off like every other model call: the indexer retries a
failed batch later (gateway/llm/indexing.py), and a query that cannot be embedded is
searched by its words alone (gateway/handler/semantic.py).

What is paid for, once: every stored turn (by the indexer, which asks the store which
turns lack a vector) and the query of a search (a memoized step of its turn). A text
embedded moments ago is not sent again: with ``memory.recall: auto`` each message is a
query before it is a stored turn, and the indexer finds its vector among the recent
ones (:attr:`Embedder.recent`, in this process's memory).

Keys are never logged (the configured ones are scrubbed from every log line, as all
secrets are); a provider's pool lends its first key.
"""

from __future__ import annotations

import time
from array import array
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

import structlog
from prometheus_client import Counter

from tether.config.llm import EmbeddingsConfig, LLMProviderConfig
from tether.memory.embeddings.store import EmbeddingStore

if TYPE_CHECKING:
    import openai

log = structlog.get_logger("tether.embeddings")

#: Characters of a text that are embedded: a long turn's start says what it is about,
#: and every embedding model takes this much (8,191 tokens on OpenAI's).
MAX_CHARS = 6000
#: Vectors kept by text, newest last (a 1,536-dimension vector is 6 KB).
RECENT = 512
#: What a text was embedded for: a stored turn, or a search.
Purpose = Literal["turn", "query"]

EMBEDDED = Counter(
    "tether_embeddings_inputs_total", "Texts sent to the embeddings endpoint", ["purpose"]
)


class EmbeddingFailed(Exception):
    """The endpoint did not answer with vectors. ``refused``: it answered that it will
    not embed these texts (a 4xx other than a key's or a rate limit): sending them again
    cannot help, unlike a timeout, a 5xx or a 429."""

    def __init__(self, message: str, *, refused: bool = False) -> None:
        super().__init__(message)
        self.refused = refused


class Embedder:
    """One endpoint and model; the SDK client is made at the first call."""

    def __init__(
        self, config: EmbeddingsConfig, providers: Mapping[str, LLMProviderConfig]
    ) -> None:
        self.model = config.model
        self.batch = config.batch
        if config.provider is not None:
            provider = providers[config.provider]  # checked by the config
            self._base_url, self._key = provider.base_url, provider.keys()[0]
            self._timeout, self._headers = provider.timeout, dict(provider.headers)
        else:
            assert config.base_url is not None  # one of them, checked by the config
            self._base_url, self._key = config.base_url, config.api_key.get_secret_value()
            self._timeout, self._headers = config.timeout, {}
        self._client: openai.AsyncOpenAI | None = None
        #: Vectors of the texts embedded last, by text (see the module).
        self.recent: OrderedDict[str, array[float]] = OrderedDict()

    def _sdk(self) -> openai.AsyncOpenAI:
        if self._client is None:
            import openai  # not at the top: only a gateway with embeddings on needs it

            self._client = openai.AsyncOpenAI(
                base_url=self._base_url,
                api_key=self._key or "unused",  # local servers ignore it
                timeout=self._timeout,
                max_retries=0,
                default_headers=self._headers or None,
            )
        return self._client

    async def embed(self, texts: Sequence[str], purpose: Purpose) -> list[array[float]]:
        """The vectors of ``texts``, in order: those embedded recently from memory, the
        rest in requests of at most ``batch`` texts. Raises :class:`EmbeddingFailed`."""
        cut = [text[:MAX_CHARS] for text in texts]
        got = {text: self.recent[text] for text in cut if text in self.recent}
        missing = [text for text in dict.fromkeys(cut) if text not in got]
        for start in range(0, len(missing), self.batch):
            chunk = missing[start : start + self.batch]
            for text, vector in zip(chunk, await self._call(chunk, purpose), strict=True):
                got[text] = vector
                self._keep(text, vector)
        return [got[text] for text in cut]

    def _keep(self, text: str, vector: array[float]) -> None:
        self.recent[text] = vector
        self.recent.move_to_end(text)
        while len(self.recent) > RECENT:
            self.recent.popitem(last=False)

    async def _call(self, texts: list[str], purpose: Purpose) -> list[array[float]]:
        import openai

        started = time.monotonic()
        try:
            response = await self._sdk().embeddings.create(model=self.model, input=texts)
        except (openai.APITimeoutError, openai.APIConnectionError) as exc:
            raise EmbeddingFailed(f"{self.model}: {type(exc).__name__}: {exc}") from exc
        except openai.APIStatusError as exc:
            status = exc.status_code
            refused = 400 <= status < 500 and status not in (401, 403, 408, 409, 429)
            raise EmbeddingFailed(
                f"{self.model}: HTTP {status}: {exc.message}", refused=refused
            ) from exc
        data = sorted(response.data, key=lambda item: item.index)
        if len(data) != len(texts):
            raise EmbeddingFailed(f"{self.model}: {len(data)} vectors for {len(texts)} texts")
        EMBEDDED.labels(purpose).inc(len(texts))
        log.info(
            "embeddings.call",
            model=self.model,
            purpose=purpose,
            inputs=len(texts),
            duration_ms=round((time.monotonic() - started) * 1000, 2),
        )
        return [array("f", item.embedding) for item in data]

    async def close(self) -> None:
        if self._client is not None:
            await self._client.close()
            self._client = None


@dataclass(frozen=True, slots=True)
class Semantic:
    """What a turn's search needs for semantic recall: the endpoint, the store's vectors,
    and the similarity from which a turn counts as near (``min_similarity``)."""

    embedder: Embedder
    store: EmbeddingStore
    least: float

    @property
    def model(self) -> str:
        return self.embedder.model
