"""A handler's view of its conversation's memory: read history now, write at checkpoint.

Writes are buffered and committed in the event's checkpoint transaction, so a crash
never records half a turn, and a re-run never records a turn twice.
"""

from __future__ import annotations

from memory.store import Store, Turn


class ConversationMemory:
    def __init__(self, store: Store, conversation: str) -> None:
        self.store = store
        self.conversation = conversation
        self.pending: list[Turn] = []

    async def history(self, limit: int = 50) -> list[Turn]:
        """The newest ``limit`` committed turns, oldest first."""
        return await self.store.history(self.conversation, limit)

    def add(self, role: str, text: str) -> None:
        """Record a turn; it is written with the checkpoint, or not at all."""
        self.pending.append(Turn(conversation=self.conversation, role=role, text=text))
