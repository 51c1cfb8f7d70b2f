"""A handler's view of its conversation's memory: read history now, write at checkpoint.

Writes are buffered and committed in the event's checkpoint transaction, so a crash
never records half a turn, and a re-run never records a turn twice. That holds for
history turns and for everything else a turn may change: the persona, facts, the
running summary, a reset, and the tokens the event spent (:attr:`changes`).

Token counts are taken here, once, when a turn or fact is written; reads then add up
stored numbers instead of re-tokenizing the history.
"""

from __future__ import annotations

import copy
from typing import Any

from tether.errors import Fatal
from tether.memory import tokens
from tether.memory.people import PeopleStore
from tether.memory.records import (
    ConversationState,
    Fact,
    MemoryChanges,
    Turn,
    UsageRecord,
    Window,
)
from tether.memory.roles import ConversationStore
from tether.memory.state import ScopedData, chat_scope, user_scope


class ConversationMemory:
    def __init__(
        self,
        store: ConversationStore,
        conversation: str,
        owner: str | None = None,
        *,
        writer: str | None = None,
        people: PeopleStore | None = None,
        in_dm: bool = True,
    ) -> None:
        self.store = store
        self.conversation = conversation
        #: Whose conversation this is (:attr:`Turn.owner`), written with each turn.
        self.owner = owner
        #: Who is writing this turn (``platform:user``), whose person-facts it sees;
        #: None for a turn without a person (a cron fire).
        self.writer = writer
        self._people = people
        #: A turn in a DM: it sees the writer's facts said in DMs too (see Fact.in_dm).
        self.in_dm = in_dm
        self._identities: tuple[str, ...] | None = None
        self.pending: list[Turn] = []
        self.changes = MemoryChanges(conversation)
        self._state: ConversationState | None = None
        self._scoped: dict[str, ScopedData] = {}

    # -- reads (committed state) ------------------------------------------------------

    async def history(self, limit: int = 50) -> list[Turn]:
        """The newest ``limit`` committed turns, oldest first (the archive included)."""
        return await self.store.history(self.conversation, limit)

    async def state(self) -> ConversationState:
        """The conversation's persona override, summary and context start, with this
        event's pending changes applied."""
        if self.changes.state is not None:
            return self.changes.state
        if self._state is None:
            self._state = await self.store.conversation(self.conversation)
        return self._state

    async def window(self, budget: int) -> Window:
        """The newest unsummarized turns of the current context that fit ``budget``."""
        state = await self.state()
        return await self.store.recent(self.conversation, budget, after_id=state.context_from)

    async def identities(self) -> tuple[str, ...]:
        """The writer and every identity linked with them (:mod:`tether.memory.people`);
        empty for a turn without a person. Read once per turn."""
        if self.writer is None:
            return ()
        if self._identities is None:
            linked = await self._people.identities(self.writer) if self._people else ()
            self._identities = linked or (self.writer,)
        return self._identities

    async def facts(self, budget: int | None = None) -> list[Fact]:
        """The facts this turn sees, oldest first: all, or the newest that fit ``budget``
        tokens. The chat's own and the writer's person-facts, never anyone else's."""
        owners = await self.identities()
        return await self.store.facts(self.conversation, budget, owners, in_dm=self.in_dm)

    # -- writes (at checkpoint) -------------------------------------------------------

    def add(self, role: str, text: str) -> None:
        """Record a turn; it is written with the checkpoint, or not at all."""
        self.pending.append(
            Turn(
                conversation=self.conversation,
                role=role,
                text=text,
                tokens=tokens.count_turn(text),
                owner=self.owner,
            )
        )

    async def set_persona(self, persona: str | None) -> None:
        """Override ``agent.persona`` here; None goes back to the default."""
        state = await self._editable()
        state.persona = persona

    async def reset(self) -> None:
        """A fresh context: history so far and the summary leave the prompt.

        Nothing is deleted: the messages stay in the archive (``history``), facts and the
        persona stay. The lane runs one event of a conversation at a time, so no message
        can be written between reading the newest id here and the checkpoint.
        """
        state = await self._editable()
        state.context_from = await self.store.last_message_id(self.conversation)
        state.summary, state.summary_tokens, state.summarized_upto = "", 0, 0

    async def set_summary(self, summary: str, covered: list[Turn]) -> None:
        """Replace the running summary; ``covered`` turns are marked summarized (kept)."""
        state = await self._editable()
        state.summary = summary
        state.summary_tokens = tokens.count_message(summary)
        state.summarized_upto = covered[-1].id
        self.changes.summarized = (covered[0].id, covered[-1].id)

    def remember(self, text: str, about: str | None = None) -> None:
        """Save a fact about the chat, or about the person ``about`` (an identity; said
        in a DM, it stays in DMs: :attr:`Fact.in_dm`)."""
        if about is None:
            self.changes.facts.append((text, tokens.count_message(text)))
        else:
            counted = tokens.count_message(text)
            self.changes.person_facts.append((text, counted, about, self.in_dm))

    def forget(self, fact_ids: list[int]) -> None:
        self.changes.forget.extend(fact_ids)

    def forget_facts(self, facts: list[Fact]) -> None:
        """Forget ``facts`` as this turn listed them: the chat's by id, a person's by id
        and owner (it may have been said elsewhere)."""
        for fact in facts:
            if fact.owner is None:
                self.changes.forget.append(fact.id)
            else:
                self.changes.forget_owned.append((fact.id, fact.owner))

    def record_usage(self, record: UsageRecord) -> None:
        """Tokens spent by one LLM call of this event (idempotent on ``record.name``)."""
        if all(known.name != record.name for known in self.changes.usage):
            self.changes.usage.append(record)

    # -- handler state (committed with the checkpoint, :mod:`tether.memory.state`) -----

    async def chat_data(self) -> dict[str, Any]:
        """This conversation's handler state (with ``agent.group_sessions``, each person's
        session in a group is a conversation of its own)."""
        return await self._data(chat_scope(self.conversation))

    async def user_data(self) -> dict[str, Any]:
        """The writer's handler state, the same in every chat they write in."""
        if self.writer is None:
            raise Fatal("user_data: this event has no sender (a cron fire or a task)")
        return await self._data(user_scope(self.writer))

    async def _data(self, scope: str) -> dict[str, Any]:
        if scope not in self._scoped:
            committed = await self.store.handler_state(scope)
            self._scoped[scope] = ScopedData(scope, committed)
        return self._scoped[scope].data

    def seal(self) -> None:
        """The handler state's changed keys into :attr:`changes`, as the checkpoint is
        written (raises :class:`~tether.errors.Fatal` for a value that is not JSON)."""
        self.changes.handler_state = [c for d in self._scoped.values() for c in d.changed()]

    async def _editable(self) -> ConversationState:
        if self.changes.state is None:
            self.changes.state = copy.deepcopy(await self.state())
        return self.changes.state
