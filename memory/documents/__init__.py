"""Documents the agent can search: ``memory.documents`` (Markdown, text, PDF), chunked
and indexed by the same FTS5 trigram engine and ranked by the same rules as the
history (:mod:`tether.memory.recall`), searched by ``search_memory`` beside it."""

from tether.memory.documents.index import DocumentIndex, refreshed

__all__ = ["DocumentIndex", "refreshed"]
