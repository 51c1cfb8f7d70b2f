"""The gateway's parts of recall beyond the store's own index: ``memory.documents``,
indexed in this process, and ``memory.embeddings``: the endpoint's client and the
indexer that embeds every stored turn once (gateway/llm/indexing.py).

Both are handed to each turn through the pipeline (``pipeline.documents``,
``pipeline.semantic``). Documents are read again at each reload; the embeddings
endpoint and model are kept until a restart (``memory.embeddings`` is restart-only: a
new model means new vectors for every turn, which is not a reload's to start).
"""

from __future__ import annotations

import contextlib
from typing import Protocol

import structlog

from tether.config.schema import Settings
from tether.gateway.llm.embeddings import Embedder, Semantic
from tether.gateway.llm.indexing import Indexer, IndexStore
from tether.gateway.ops.start_errors import quietly
from tether.memory.documents import DocumentIndex, refreshed

log = structlog.get_logger("tether.embeddings")


class Carrier(Protocol):
    """What hands recall to each turn: the pipeline."""

    documents: DocumentIndex | None
    semantic: Semantic | None


class Recall:
    def __init__(self, settings: Settings, store: IndexStore, pipeline: Carrier) -> None:
        self.pipeline = pipeline
        config = settings.memory.embeddings
        self.embedder: Embedder | None = None
        self.indexer: Indexer | None = None
        if config is not None:  # off by default: nothing below is made
            providers = settings.llm.providers if settings.llm is not None else {}
            self.embedder = Embedder(config, providers)
            interval = settings.pipeline.sweep_interval
            self.indexer = Indexer(store, self.embedder, interval)
            pipeline.semantic = Semantic(self.embedder, store, config.min_similarity)

    async def refresh(self, settings: Settings) -> None:
        """``memory.documents`` (re)indexed: at the start, at each reload."""
        docs = settings.memory.documents
        self.pipeline.documents = await refreshed(self.pipeline.documents, docs)

    async def start(self, settings: Settings, undo: contextlib.AsyncExitStack) -> None:
        """The documents indexed, and the indexer started (``undo`` stops it again)."""
        await self.refresh(settings)
        if self.indexer is not None:
            undo.push_async_callback(quietly, "embeddings.stop", self.stop)
            self.indexer.start()
            log.info("embeddings.indexing", model=self.indexer.embedder.model)

    async def stop(self) -> None:
        """The indexer stopped (a batch in flight is embedded again at the next start)."""
        if self.indexer is not None:
            await self.indexer.stop()
        if self.embedder is not None:
            await self.embedder.close()
