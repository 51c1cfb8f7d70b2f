"""Semantic recall's store side: a vector per stored turn, and the turns nearest a query.

- :mod:`.vectors`: unit-length float32 vectors, packed for storage and for steps.
- :mod:`.store`: the :class:`EmbeddingStore` role (which turns lack a vector, keep
  vectors, the nearest turns within a :class:`~tether.memory.recall.Scope`).
- :mod:`.sqlite`, :mod:`.postgres`, :mod:`.inmemory`: the role on each store.
- :mod:`.hybrid`: full-text hits and vector neighbours fused into one ranking.

Optional (``memory.embeddings``; docs/recall.md): with it off nothing here is called,
and the tables stay empty. The vectors come from an OpenAI-compatible ``/v1/embeddings``
endpoint through the gateway (gateway/llm/embeddings.py); nothing here makes a call.
"""

from tether.memory.embeddings.hybrid import fuse
from tether.memory.embeddings.inmemory import MemoryEmbeddings
from tether.memory.embeddings.postgres import PostgresEmbeddings
from tether.memory.embeddings.sqlite import SqliteEmbeddings
from tether.memory.embeddings.store import EmbeddingStore

__all__ = [
    "EmbeddingStore",
    "MemoryEmbeddings",
    "PostgresEmbeddings",
    "SqliteEmbeddings",
    "fuse",
]
